"""Policies: what decides each action of an episode, and the loop that runs one episode with one.

A :class:`Policy` may serve many episodes at once (an HTTP client with a concurrency limit); for each episode it
starts an :class:`Agent`, which keeps that episode's conversation. Scripted policies, by name::

    reference       lays the task's reference solution over the workspace with write_file, runs the visible
                    tests, submits
    noop            submits the untouched workspace
    replay:FILE     replays the actions of the trajectory of this task recorded in FILE (its reward again)
    openai:MODEL    a chat-completions server (see OpenAIPolicy); base_url= and the rest as options
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ._episode import Episode
from ._errors import PolicyError
from ._trajectory import Trajectory, Turn, read_trajectories
from ._types import Observation

__all__ = ["Agent", "Decision", "Policy", "ScriptedPolicy", "policy_from_name", "run_episode"]


@dataclass(frozen=True)
class Decision:
    """One action, and what the policy wants recorded with it (token ids, logprobs, usage)."""

    action: Any
    record: dict[str, Any] = field(default_factory=dict)


class Agent(Protocol):
    """A policy's side of one episode."""

    async def act(self, observation: Observation) -> Decision:
        """The next action, given the last observation (the first one, after reset).

        Raises:
            PolicyError: no action could be decided.
        """
        ...


class Policy(Protocol):
    """Something that acts in episodes; ``name`` is recorded in trajectories."""

    name: str

    def start(self, episode: Episode) -> Agent:
        """Begin deciding for ``episode``, which was just reset."""
        ...


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


class _Script:
    def __init__(self, actions: Sequence[Any], name: str) -> None:
        self._actions = list(actions)
        self._name = name

    async def act(self, observation: Observation) -> Decision:
        if not self._actions:
            raise PolicyError(f"the {self._name} policy has no action left, and the episode has not ended")
        return Decision(self._actions.pop(0))


class ScriptedPolicy:
    """Plays a fixed list of actions (the same for every episode), or a list made per episode by ``script``."""

    def __init__(
        self,
        actions: Sequence[Any] = (),
        *,
        name: str = "scripted",
        script: Callable[[Episode], Sequence[Any]] | None = None,
    ) -> None:
        self.name = name
        self._actions = list(actions)
        self._script = script

    def start(self, episode: Episode) -> Agent:
        """An agent that plays the actions in order."""
        return _Script(self._script(episode) if self._script else self._actions, self.name)


def _reference(episode: Episode) -> list[Any]:
    solution = episode.task.solution
    if solution is None:
        raise PolicyError(f"task {episode.task.id!r} has no solution/ directory, so the reference policy cannot run")
    actions: list[Any] = []
    for path in sorted(p for p in solution.rglob("*") if p.is_file()):
        try:
            content = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise PolicyError(f"{path} is not UTF-8 text, which write_file cannot carry") from None
        actions.append(_call("write_file", path=path.relative_to(solution).as_posix(), content=content))
    if episode.visible_tests:
        actions.append(_call("run_tests"))
    return [*actions, _call("submit")]


def _replay(file: str) -> Callable[[Episode], Sequence[Any]]:
    recorded = read_trajectories(file)

    def script(episode: Episode) -> Sequence[Any]:
        found = _matching(recorded, episode)
        return [turn.action for turn in found.turns]

    return script


def _matching(recorded: list[Trajectory], episode: Episode) -> Trajectory:
    for trajectory in recorded:
        if trajectory.task_id == episode.task.id:
            return trajectory
    ids = sorted({t.task_id for t in recorded})
    raise PolicyError(f"the replayed file holds no trajectory of task {episode.task.id!r} (it has {ids[:5]})")


def policy_from_name(name: str, **options: Any) -> Policy:
    """The policy called ``name``: ``reference``, ``noop``, ``replay:FILE`` or ``openai:MODEL`` (``options`` go
    to :class:`OpenAIPolicy`).

    Raises:
        ValueError: no policy has that name; the message lists those that exist.
    """
    kind, _, argument = name.partition(":")
    if kind == "reference" and not argument:
        return ScriptedPolicy(name="reference", script=_reference)
    if kind == "noop" and not argument:
        return ScriptedPolicy([_call("submit")], name="noop")
    if kind == "replay" and argument:
        if not Path(argument).is_file():
            raise ValueError(f"replay:{argument}: no such trajectory file")
        return ScriptedPolicy(name=name, script=_replay(argument))
    if kind == "openai" and argument:
        from ._openai import OpenAIPolicy

        return OpenAIPolicy(argument, **options)
    raise ValueError(f"unknown policy {name!r}: expected reference, noop, replay:FILE or openai:MODEL")


async def run_episode(episode: Episode, policy: Policy, *, on_turn: Callable[[Turn], None] | None = None) -> Trajectory:
    """Run ``episode`` (new: it is reset here) with ``policy`` to its end, then close it; returns its trajectory.

    ``on_turn`` is called after each turn, as it happens.

    Raises:
        PolicyError: the policy could not act; the episode is closed unjudged.
        SandboxError, IsolationUnavailable: the episode's sandbox could not be made.
    """
    async with episode:
        if episode.trajectory.policy is None:
            episode.trajectory.policy = policy.name
        observation = await episode.reset()
        agent = policy.start(episode)
        done = False
        while not done:
            decision = await agent.act(observation)
            observation, _reward, done, _info = await episode.step(decision.action, record=decision.record)
            if on_turn is not None:
                on_turn(episode.trajectory.turns[-1])
    return episode.trajectory
