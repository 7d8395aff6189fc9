"""The ``rollout`` job kind: one episode of the training loop, graded twice — by the naive grader in the agent's
own sandbox, then by rollbox's judge in a fresh one.

Payload::

    {"task": "/path/to/task", "action": "always_equal", "max_mutants": 3}          an action of the candidate pool
    {"task": "/path/to/task", "policy": "openai:MODEL", "base_url": "http://..."}   a model, through the tools

The agent acts through the episode's tools; when it submits (or its turn budget is spent), the naive grader's files
are written and its command run with the same tools (``_naive``, recorded in the trajectory as the harness's
turns), and then the episode is submitted to the judge. The result's status and reward are the judge's verdict's;
its output holds the naive grader's reward too. An ``infra_error`` verdict (the agent's sandbox, its runtime, or
the judge failed) is retried by the scheduler, then masked by the loop; whatever the agent did is the result.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rollbox.env import Budget, Episode, Observation, OpenAIPolicy, Policy, PolicyError, ScriptedPolicy, make
from rollbox.judge import Verdict, VerdictStatus
from rollbox.sandbox import Status
from rollbox.scheduler import API_KEY_VARIABLE, JobContext, Outcome, PayloadError, Requirements, get_kind
from rollbox.tasks import Task, TaskFormatError, load_task

from ._actions import Action, pool_for
from ._naive import naive_check

__all__ = ["RolloutKind", "rollout_payload"]

#: The turns a pool action may take beyond its writes (its submit), and the naive grader's own.
_SPARE_TURNS = 4


def rollout_payload(
    task: str | os.PathLike[str],
    *,
    action: str | None = None,
    policy: str | None = None,
    base_url: str | None = None,
    max_mutants: int = 3,
) -> dict[str, Any]:
    """The payload of a ``rollout`` job: ``task`` played by one ``action`` of its pool, or by ``policy``
    (``openai:MODEL`` at ``base_url``)."""
    if (action is None) == (policy is None):
        raise ValueError("a rollout is played by an action of the pool or by a policy: give exactly one")
    payload: dict[str, Any] = {"task": str(Path(task).resolve())}
    if action is not None:
        payload |= {"action": action, "max_mutants": max_mutants}
    else:
        payload |= {"policy": policy, "base_url": base_url}
    return payload


def _task(payload: Mapping[str, Any]) -> Task:
    path = payload.get("task")
    if not isinstance(path, str):
        raise PayloadError(f"a rollout's payload needs 'task': a task directory, got {path!r}")
    try:
        return load_task(path)
    except (TaskFormatError, OSError) as exc:
        raise PayloadError(f"cannot load task {path!r}: {exc}") from exc


def _action(payload: Mapping[str, Any]) -> Action | None:
    name = payload.get("action")
    if name is None:
        policy = payload.get("policy")
        if not isinstance(policy, str) or not policy.startswith("openai:") or policy == "openai:":
            raise PayloadError(f"a rollout's payload needs 'action' (a pool action) or 'policy' (openai:MODEL), "
                               f"got {policy!r}")  # fmt: skip
        return None
    mutants = payload.get("max_mutants", 3)
    if not isinstance(mutants, int) or isinstance(mutants, bool) or mutants < 0:
        raise PayloadError(f"a rollout's 'max_mutants' must be a whole number >= 0, got {mutants!r}")
    for action in pool_for(str(Path(payload["task"]).resolve()), mutants):
        if action.name == name:
            return action
    raise PayloadError(f"task {payload['task']}: its pool has no action {name!r}")


def _submits(action: object) -> bool:
    call = action.get("function", action) if isinstance(action, Mapping) else None
    return isinstance(call, Mapping) and call.get("name") == "submit"


async def _naive(episode: Episode) -> dict[str, Any]:
    """Run the naive grader in the episode's sandbox through its tools: its reward (``None`` when the sandbox
    failed), and how its command ended."""
    check = naive_check(episode.task)
    if check is None:
        return {"reward": None, "status": None, "exit_code": None, "error": "no naive harness for this runner"}
    record = {"harness": "naive"}
    for path, text in check.staged().items():
        observation, _, done, _ = await episode.step(
            {"name": "write_file", "arguments": {"path": path, "content": text}}, record=record
        )
        if done or observation.status is Status.INFRA_ERROR:
            return _naive_result(observation)
    observation, _, _, _ = await episode.step({"name": "bash", "arguments": {"command": check.script()}}, record=record)
    return _naive_result(observation)


def _naive_result(observation: Observation) -> dict[str, Any]:
    status = observation.status
    if status is Status.INFRA_ERROR or status is None:
        reward = None
    else:
        reward = 1.0 if status is Status.OK and observation.exit_code == 0 else 0.0
    return {
        "reward": reward,
        "status": status.value if status else None,
        "exit_code": observation.exit_code,
        "tail": observation.text[-400:],
    }


class RolloutKind:
    """Plays one rollout (an action of the pool, or a model) in the worker's warm sandboxes; see the module."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        task = _task(payload)
        _action(payload)
        # The sandboxes an episode of the task holds, as the episode kind says (the agent's and the judge's).
        return get_kind("episode").requirements({"task": str(task.path), "policy": "noop"})

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        task = _task(payload)
        action = _action(payload)
        limit = Budget.for_task(task).max_turns
        owned: OpenAIPolicy | None = None
        if action is None:
            owned = OpenAIPolicy(
                str(payload["policy"]).partition(":")[2],
                base_url=payload.get("base_url") or "http://127.0.0.1:8000/v1",
                api_key=os.environ.get(API_KEY_VARIABLE) or None,
            )
            policy: Policy = owned
        else:
            limit = len(action.calls())
            policy = ScriptedPolicy(action.calls(), name=f"pool:{action.name}")
        check = naive_check(task)
        harness_turns = len(check.files) + 1 if check else 0
        episode = make(
            task,
            sandboxes=context.sandboxes,
            judge_sandboxes=context.sandboxes,
            episode_id=f"{context.run_id}-job{context.job_id}-attempt{context.attempt}",
            policy=policy.name,
            max_turns=limit + harness_turns + _SPARE_TURNS,
        )
        try:
            naive, verdict, messages = await self._play(episode, policy, limit, context.grading)
        except PolicyError as exc:
            raise PayloadError(f"policy {policy.name} could not act on task {task.id}: {exc}") from exc
        finally:
            if owned is not None:
                await owned.aclose()
        if verdict.status is VerdictStatus.INFRA_ERROR:
            return Outcome(status="infra_error", error=verdict.error or "the episode's infrastructure failed")
        output: dict[str, Any] = {
            "task_id": task.id,
            "action": action.name if action else None,
            "kind": action.kind.value if action else None,
            "naive": naive,
            "verdict": verdict.to_json(),
            "turns": len(episode.trajectory.turns),
        }
        if messages:
            output["messages"] = messages
        return Outcome(
            status=verdict.status.value,
            reward=verdict.reward,
            output=output,
            error=verdict.error,
            trajectory=episode.trajectory.to_json(),
        )

    async def _play(
        self, episode: Episode, policy: Policy, limit: int, grading: Callable[[], None]
    ) -> tuple[dict[str, Any], Verdict, list[dict[str, Any]]]:
        """The agent's turns (up to ``limit``, until it submits), the naive grader's, then the judge's verdict, and
        the conversation a model had (its chat messages: empty for a pool action)."""
        async with episode:
            observation = await episode.reset()
            if observation.status is Status.INFRA_ERROR:
                return {"reward": None, "status": "infra_error", "exit_code": None}, await episode.end(), []
            agent = policy.start(episode)
            messages: list[dict[str, Any]] = getattr(agent, "messages", [])  # a chat model's own conversation
            done = False
            while not done and episode.turns < limit:
                decision = await agent.act(observation)
                if _submits(decision.action):
                    break
                observation, _, done, _ = await episode.step(decision.action, record=decision.record)
            if done:  # a budget ended it before the harness could run: the naive harness never saw it pass
                naive: dict[str, Any] = {"reward": 0.0, "status": None, "exit_code": None}
                return naive, await episode.end(), list(messages)
            # The judge grades the workspace the agent left: the harness runs the agent's code beside the hidden
            # tests, and that code could rewrite /workspace once it has read them.
            await episode.freeze_workspace()
            naive = await _naive(episode)
            if episode.state.value == "done":
                return naive, await episode.end(), list(messages)
            grading()
            _, _, _, info = await episode.step({"name": "submit", "arguments": {}})
            assert info.verdict is not None
            return naive, info.verdict, list(messages)
