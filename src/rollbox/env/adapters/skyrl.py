"""SkyRL-gym: a ``BaseTextEnv`` whose episodes are rollbox episodes (``pip install 'rollbox[skyrl]'``).

    from rollbox.env.adapters.skyrl import RollboxSkyRLEnv, register
    register()                                   # as skyrl_gym env id "rollbox"
    env = skyrl_gym.make("rollbox", env_config={}, extras={"task": "tasks/calc", "max_turns": 20})
    prompt, _ = env.init([{"role": "system", "content": "..."}])
    out = env.step('<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>')
    env.close()

SkyRL hands ``step`` the model's text: the tool calls in it (``<tool_call>`` JSON blocks, or one JSON call) run in
order, one turn each, and their observations come back as one user message. The reward is 0.0 until the episode
ends, then the judge's. SkyRL needs a number: an infrastructure failure gives 0.0 with ``metadata["masked"]``
true and ``metadata["status"] == "infra_error"``; drop such episodes from training.
"""

from __future__ import annotations

from typing import Any

from skyrl_gym.envs import register as skyrl_register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from rollbox.env import Episode, make
from rollbox.env._sync import blocking
from rollbox.env._text import step_completion

from ._common import task_of

__all__ = ["RollboxSkyRLEnv", "register"]


class RollboxSkyRLEnv(BaseTextEnv):  # type: ignore[misc,unused-ignore]
    """One rollbox episode per environment: ``init`` resets it, ``step`` acts, ``close`` releases its sandbox.

    ``extras`` (the dataset row) names the task: ``task`` (or ``extra_info.task``, or ``reward_spec.ground_truth``)
    is a task directory; ``max_turns`` overrides its budget. ``env_config`` may hold ``shaped_rewards``.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        where = extras.get("task") or (extras.get("extra_info") or {}).get("task")
        where = where or (extras.get("reward_spec") or {}).get("ground_truth")
        options: dict[str, Any] = {"shaped_rewards": bool((env_config or {}).get("shaped_rewards", False))}
        if extras.get("max_turns"):
            options["max_turns"] = int(extras["max_turns"])
        self.episode: Episode = make(task_of(where), policy="skyrl", **options)
        self.max_turns = self.episode.budget.max_turns

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        """The prompt with the episode's first observation (instruction and workspace) as a user message."""
        observation = blocking(self.episode.reset())
        return [*prompt, {"role": "user", "content": observation.text}], {"tools": self.episode.tools}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Run the tool calls in the model's text; the observations come back as one user message."""
        self.turns += 1
        result = blocking(step_completion(self.episode, action))
        verdict = result.info.verdict
        metadata: dict[str, Any] = {"turn": result.info.turn, "end_reason": None, "status": None, "masked": False}
        if verdict is not None:
            metadata.update(end_reason=result.info.end_reason, status=verdict.status.value, verdict=verdict.to_json())
            metadata["masked"] = verdict.reward is None
        observations = [] if result.done else [{"role": "user", "content": result.observation.text}]
        return BaseTextEnvStepOutput(
            observations=observations, reward=result.reward or 0.0, done=result.done, metadata=metadata
        )

    def close(self) -> None:
        """Release the episode's sandbox (idempotent)."""
        blocking(self.episode.close())


def register(env_id: str = "rollbox") -> None:
    """Register :class:`RollboxSkyRLEnv` with skyrl_gym under ``env_id`` (once)."""
    from skyrl_gym.envs.registration import registry

    if env_id not in registry:
        skyrl_register(id=env_id, entry_point="rollbox.env.adapters.skyrl:RollboxSkyRLEnv")
