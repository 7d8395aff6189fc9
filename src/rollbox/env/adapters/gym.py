"""Gymnasium: rollbox episodes behind ``gymnasium.Env``, with text spaces (``pip install 'rollbox[gym]'``).

    env = RollboxGymEnv("tasks/calc", max_turns=20)
    obs, info = env.reset()
    obs, reward, terminated, truncated, info = env.step('{"name": "run_tests", "arguments": {}}')
    env.close()

An action is text: one JSON tool call, or a model's completion with ``<tool_call>`` blocks (each runs, one turn
each). ``terminated`` is true when the agent submitted, ``truncated`` when a budget ended the episode. Gymnasium
wants a number: an infrastructure failure gives reward 0.0 with ``info["masked"]`` true; drop such episodes.
Each ``reset`` starts a new rollbox episode (a new sandbox).
"""

from __future__ import annotations

import string
from typing import Any

import gymnasium
from gymnasium import spaces

from rollbox.env import EndReason, Episode, make
from rollbox.env._sync import blocking
from rollbox.env._text import step_completion

__all__ = ["RollboxGymEnv"]

#: Every character a text observation or action may hold, for the spaces' ``contains`` (printable ASCII and the
#: rest of the Basic Multilingual Plane, surrogates excepted).
_CHARSET = frozenset(string.printable) | frozenset(chr(c) for c in range(0xA0, 0xD800))


class RollboxGymEnv(gymnasium.Env[str, str]):  # type: ignore[misc,unused-ignore]
    """One task; each :meth:`reset` begins a new episode of it. ``options`` are :func:`rollbox.make`'s."""

    def __init__(self, task: Any, *, max_text: int = 1 << 20, **options: Any) -> None:
        self.metadata = {"render_modes": []}
        self._task = task
        self._options = options
        self.episode: Episode | None = None
        self.observation_space = spaces.Text(max_length=max_text, min_length=0, charset=_CHARSET)
        self.action_space = spaces.Text(max_length=max_text, min_length=0, charset=_CHARSET)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Close the last episode, start a new one; returns its first observation and ``{"tools": ...}``."""
        super().reset(seed=seed)
        self.close()
        self.episode = make(self._task, **self._options)
        observation = blocking(self.episode.reset())
        return observation.text, {"tools": self.episode.tools, "episode_id": self.episode.trajectory.episode_id}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run the tool calls in ``action``; returns ``(obs, reward, terminated, truncated, info)``."""
        if self.episode is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        result = blocking(step_completion(self.episode, action))
        info = result.info.to_json()
        info["masked"] = result.done and result.reward is None
        terminated = result.info.end_reason in (EndReason.SUBMITTED, EndReason.INFRA_ERROR)
        return result.observation.text, result.reward or 0.0, terminated, result.info.truncated, info

    def close(self) -> None:
        """Release the current episode's sandbox (idempotent)."""
        if self.episode is not None:
            blocking(self.episode.close())
            self.episode = None
