"""The ``episode`` kind: one agent episode of a task with a named policy, judged at its end.

Payload::

    {"task": "/path/to/task", "policy": "reference"}           reference, noop, or replay:/abs/path/trajectories.jsonl
    {"task": "/path/to/task", "policy": "openai:MODEL", "base_url": "http://127.0.0.1:8000/v1"}

optionally with ``"budget": {"max_turns": 20, "wall_s": 300}`` (overrides of the task's :class:`rollbox.env.Budget`)
and ``"cpus"`` (default 1; an episode that mostly waits for a model server needs less).

The result's status and reward are the verdict's; the trajectory goes to ``runs/ID/trajectories/JOB.json``, which
:func:`rollbox.env.read_trajectories` reads. An ``infra_error`` verdict (the agent's sandbox or the judge failed) is
retried; whatever the agent did (a wrong answer, a crash, a budget spent) is the result, never retried. A policy
that cannot act at all (a replay without this task, a server that refuses the request past its retries) ends the
job ``failed``, with no reward. The bearer token of an ``openai:`` policy is read from ``$ROLLBOX_API_KEY`` where
the episode runs, never stored in the payload (the job store keeps payloads in plain text).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rollbox.env import Budget, OpenAIPolicy, Policy, PolicyError, make, policy_from_name, run_episode
from rollbox.sandbox import Sandbox, SandboxConfig, SandboxSource
from rollbox.tasks import Task, TaskFormatError

from ._errors import PayloadError
from ._grade_kind import load_payload_task, task_pool, task_requirements
from ._kinds import JobContext, Outcome, requested
from ._model import Requirements

__all__ = ["API_KEY_VARIABLE", "EpisodeKind", "episode_payload"]

#: Where an ``openai:`` policy's bearer token comes from, in the environment of the process that runs the episode.
API_KEY_VARIABLE = "ROLLBOX_API_KEY"


def episode_payload(
    task: str | os.PathLike[str],
    policy: str,
    *,
    base_url: str | None = None,
    budget: Mapping[str, float] | None = None,
    cpus: float | None = None,
) -> dict[str, Any]:
    """The payload of an ``episode`` job: ``task`` (a task directory) played by ``policy`` (a name
    :func:`rollbox.env.policy_from_name` knows; a replay's file is made absolute here)."""
    kind, _, argument = policy.partition(":")
    if kind == "replay" and argument:
        policy = f"replay:{Path(argument).resolve()}"
    payload: dict[str, Any] = {"task": str(Path(task).resolve()), "policy": policy}
    if base_url is not None and kind == "openai":
        payload["base_url"] = base_url
    if budget:
        payload["budget"] = dict(budget)
    if cpus is not None:
        payload["cpus"] = cpus
    return payload


@functools.lru_cache(maxsize=256)
def _scripted(name: str) -> Policy:
    """A scripted policy (no connections, no state between episodes), made once per name: a replay reads its file
    once."""
    return policy_from_name(name)


def _parse(payload: Mapping[str, Any]) -> tuple[Task, str, dict[str, Any], Budget]:
    """The task, the policy's name, the budget's overrides of a payload and the budget they make, each checked.

    Raises:
        PayloadError: which field is wrong, and how to fix it.
    """
    task = load_payload_task(payload)
    name = payload.get("policy")
    if not isinstance(name, str):
        raise PayloadError(
            f"an episode job's payload needs 'policy' (reference, noop, replay:FILE, openai:MODEL), got {name!r}"
        )
    kind, _, argument = name.partition(":")
    if kind == "replay" and not Path(argument).is_absolute():
        raise PayloadError(f"policy {name!r}: a replay's file must be an absolute path (workers may run elsewhere)")
    if kind != "openai":
        try:
            _scripted(name)
        except (ValueError, PolicyError, OSError) as exc:
            raise PayloadError(f"invalid policy in an episode job: {exc}") from exc
    elif not argument:
        raise PayloadError("policy 'openai:' names no model: use openai:MODEL")
    budget = payload.get("budget") or {}
    if not isinstance(budget, Mapping):
        raise PayloadError(f"an episode job's 'budget' must be a table of Budget fields, got {budget!r:.80}")
    try:
        whole = Budget.for_task(task, **budget)
    except (TypeError, ValueError, TaskFormatError) as exc:
        raise PayloadError(f"invalid budget for task {task.id}: {exc}") from exc
    return task, name, dict(budget), whole


class _Judging:
    """The worker's sandboxes as the judge borrows them: the first borrow says grading began (without shaped
    rewards, the judge runs only at the episode's end)."""

    def __init__(self, source: SandboxSource, began: Callable[[], None]) -> None:
        self._source, self._began, self._said = source, began, False

    def _begin(self) -> None:
        if not self._said:
            self._said = True
            self._began()

    def sandbox(self, config: SandboxConfig) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        self._begin()
        return self._source.sandbox(config)

    def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        self._begin()
        return self._source.sandboxes(count, config, avoid=avoid)


class EpisodeKind:
    """Plays one episode with :func:`rollbox.env.run_episode`, in the worker's warm sandboxes (the agent's and the
    judge's), and returns its trajectory to be written beside the run's results."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        task, _, _, budget = _parse(payload)
        judge = task_requirements(task)
        # The agent's sandbox, as rollbox.env makes it: the task's limits with the budget's command timeout, over
        # the task's workspace. Its pool is the one queued episodes make grow ahead of them.
        timeout = budget.command_timeout_s or task.limits.timeout_s
        agent = task_pool(task, dataclasses.replace(task.limits, timeout_s=timeout), workspace=True)
        # While the judge grades, the agent's sandbox is still held (its workspace is read from it).
        return requested(payload, "episode", memory_bytes=task.limits.memory_bytes + judge.memory_bytes, pool=agent)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        task, name, budget, _ = _parse(payload)
        kind, _, model = name.partition(":")
        owned: OpenAIPolicy | None = None
        if kind == "openai":
            # One client per job: its connections belong to this event loop and close with the episode.
            owned = OpenAIPolicy(
                model,
                base_url=payload.get("base_url") or "http://127.0.0.1:8000/v1",
                api_key=os.environ.get(API_KEY_VARIABLE) or None,
            )
        policy: Policy = owned or _scripted(name)
        episode = make(
            task,
            sandboxes=context.sandboxes,
            judge_sandboxes=_Judging(context.sandboxes, context.grading),
            episode_id=f"{context.run_id}-job{context.job_id}-attempt{context.attempt}",
            **budget,
        )
        try:
            trajectory = await run_episode(episode, policy)
        except PolicyError as exc:
            raise PayloadError(f"policy {name} could not act on task {task.id}: {exc}") from exc
        finally:
            if owned is not None:
                await owned.aclose()
        verdict = trajectory.verdict or {}
        if trajectory.status == "infra_error":
            return Outcome(status="infra_error", error=verdict.get("error") or "the episode's infrastructure failed")
        summary = {
            "episode_id": trajectory.episode_id,
            "policy": trajectory.policy,
            "end_reason": trajectory.end_reason,
            "turns": len(trajectory.turns),
            "wall_s": round(trajectory.wall_s, 6),
            "verdict": verdict,
        }
        return Outcome(
            status=str(trajectory.status),
            reward=trajectory.reward,
            output=summary,
            error=verdict.get("error"),
            trajectory=trajectory.to_json(),
        )
