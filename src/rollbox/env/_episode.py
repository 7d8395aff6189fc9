"""An episode: one agent solving one task with tools in a sandbox of its own, judged at the end.

    async with rollbox.make("tasks/calc") as env:
        obs = await env.reset()
        obs, reward, done, info = await env.step({"name": "bash", "arguments": {"command": "pytest -q"}})
        ...
        obs, reward, done, info = await env.step({"name": "submit", "arguments": {}})
        print(info["verdict"].status, reward)

The final reward never comes from the agent's sandbox: the judge grades the agent's final workspace in a fresh
sandbox of its own, from the pristine task plus the agent's allowed changes.

Whatever the agent sends is its own turn: an action that is malformed, huge, nested deep or not text at all is an
error observation that counts a turn, never an exception and never ``infra_error``. An episode takes one step at
a time: calls that come together (two requests of a remote trainer) wait their turn, in order, and each counts
against the budget; a step that finds the episode ended meanwhile raises :class:`EpisodeStateError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

from rollbox import telemetry
from rollbox.judge import Verdict, VerdictStatus, grade, sandboxes_image, task_sandboxes
from rollbox.sandbox import (
    ExecResult,
    FreshSandboxes,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxSource,
    Status,
    TreeTooLarge,
    WorkspaceChanges,
)
from rollbox.sandbox.images import ImageError
from rollbox.sandbox.runtime import LayerBuildError, PythonNotFound
from rollbox.tasks import Task, load_task

from ._budget import Budget
from ._errors import EpisodeStateError
from ._toolbox import Outcome, Toolbox
from ._tools import TOOLS, ActionError, ToolCall, parse_action, show
from ._trajectory import Trajectory, Turn
from ._types import EndReason, EpisodeState, Observation, StepInfo, StepResult
from ._visible import VisibleTests
from ._workspace import WorkspaceScan, final_workspace, scan_workspace

__all__ = ["Episode", "make"]


def make(
    task: Task | str | os.PathLike[str],
    *,
    sandboxes: SandboxSource | None = None,
    judge_sandboxes: SandboxSource | None = None,
    shaped_rewards: bool = False,
    episode_id: str | None = None,
    policy: str | None = None,
    **budget: Any,
) -> Episode:
    """An episode of ``task`` (a :class:`~rollbox.tasks.Task`, or a task directory to load).

    Args:
        sandboxes: Where the agent's sandbox comes from (default: a fresh one; or warm pools,
            :class:`rollbox.sandbox.WarmSandboxes`, which keep a pool per runtime layer and workspace). It is asked
            for one with the task's runtime layer, variables and workspace.
        judge_sandboxes: Where the judge's sandboxes come from (default: fresh ones).
        shaped_rewards: Give each ``run_tests`` step the change in the visible tests' pass rate, graded by the
            judge, as its reward (off by default: the reward is 0.0 until the last step's verdict).
        episode_id: The trajectory's id (default: a new random one).
        policy: The policy's name, recorded in the trajectory.
        **budget: Overrides of the task's :class:`Budget` (``max_turns``, ``wall_s``, ``command_timeout_s``,
            ``output_bytes``, ``observation_bytes``).

    Raises:
        TaskFormatError: the task directory is not a valid task, or its budget table is malformed.
        ValueError: a budget override is not a budget.
    """
    loaded = task if isinstance(task, Task) else load_task(Path(task))
    return Episode(
        loaded,
        budget=Budget.for_task(loaded, **budget),
        sandboxes=sandboxes,
        judge_sandboxes=judge_sandboxes,
        shaped_rewards=shaped_rewards,
        episode_id=episode_id,
        policy=policy,
    )


class Episode:
    """One episode of a task: a single-use async context manager (see :func:`rollbox.make`).

    :meth:`reset` opens the agent's sandbox: the task's runtime layer (built on first use, as the judge builds it)
    and variables, over a copy-on-write /workspace of the task's workspace/. :meth:`step` runs one tool call; the
    episode ends when the agent submits or a budget runs out, and is judged then. Its :attr:`trajectory` records
    every turn. :meth:`close` (idempotent) releases the sandbox.
    """

    def __init__(
        self,
        task: Task,
        *,
        budget: Budget,
        sandboxes: SandboxSource | None = None,
        judge_sandboxes: SandboxSource | None = None,
        shaped_rewards: bool = False,
        episode_id: str | None = None,
        policy: str | None = None,
    ) -> None:
        self.task = task
        self.budget = budget
        self.shaped_rewards = shaped_rewards
        self.state = EpisodeState.NEW
        self._sandboxes = sandboxes or FreshSandboxes()
        self._judge_sandboxes = judge_sandboxes
        self._limits = dataclasses.replace(task.limits, timeout_s=budget.command_timeout_s or task.limits.timeout_s)
        self._stack = contextlib.AsyncExitStack()
        #: Held by reset, step, end and close: one of them at a time, the others waiting in order.
        self._turn = asyncio.Lock()
        self._toolbox: Toolbox | None = None
        self._scan: WorkspaceScan | None = None
        self._visible: VisibleTests | None = None
        #: Why the episode cannot run (the task's runtime could not be had), once reset found out.
        self._broken: str | None = None
        self._started = 0.0
        self._output = 0
        self._pass_rate: float | None = None
        self._verdict: Verdict | None = None
        #: What the judge grades once :meth:`freeze_workspace` fixed it: the workspace then, or why it could not be had.
        self._frozen: WorkspaceChanges | TreeTooLarge | OSError | None = None
        self.trajectory = Trajectory(
            episode_id=episode_id or uuid.uuid4().hex,
            task_id=task.id,
            task_path=str(task.path),
            policy=policy,
            runtime=None if task.environment.is_default else task.environment.layer_key,
            budget=budget.to_json(),
        )

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function-calling schemas, to pass as a chat completion's ``tools``."""
        return copy.deepcopy(TOOLS)

    @property
    def visible_tests(self) -> list[str]:
        """The task's visible tests (workspace paths), which ``run_tests`` runs."""
        return list(self._visible_tests().tests)

    def _visible_tests(self) -> VisibleTests:
        if self._visible is None:
            self._scan = self._scan or scan_workspace(self.task)
            self._visible = VisibleTests(self.task, self._scan)
        return self._visible

    @property
    def workspace_mode(self) -> str | None:
        """How the agent's /workspace holds the task's workspace while the episode runs: ``"overlay"`` (copy-on-write
        over the task's directory, which is never written) or ``"copy"`` (copied in, where the kernel cannot
        overlay it); None before reset or without a sandbox."""
        return self._toolbox.sandbox.workspace_mode if self._toolbox is not None else None

    @property
    def turns(self) -> int:
        """Turns taken so far."""
        return len(self.trajectory.turns)

    async def __aenter__(self) -> Episode:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _require(self, state: EpisodeState, what: str) -> None:
        if self.state is not state:
            hint = {
                EpisodeState.NEW: "call 'await env.reset()' first",
                EpisodeState.RUNNING: "it was reset already; make a new episode with rollbox.make(...)",
                EpisodeState.DONE: "it has ended; make a new episode with rollbox.make(...)",
                EpisodeState.CLOSED: "it is closed; make a new episode with rollbox.make(...)",
            }[self.state]
            raise EpisodeStateError(f"cannot {what}: this episode is {self.state.value}; {hint}")

    async def reset(self) -> Observation:
        """Open the agent's sandbox (the task's runtime, over its workspace) and return the first observation:
        the instruction and the workspace's listing.

        When the task's runtime layer cannot be had (its build failed, its Python is not installed here), the
        agent's sandbox could not be started (``SandboxError``: the host ran short of something, say) or the task's
        workspace could not be read, the observation says so with status ``infra_error``, nothing runs, and the
        next :meth:`step` (or :meth:`end`) ends the episode with an ``infra_error`` verdict and reward ``None``:
        the task's or the machine's failure, to be masked, never the agent's (and never an exception in the
        trainer's rollout).

        Raises:
            EpisodeStateError: the episode was reset before (episodes are single-use).
            IsolationUnavailable: this machine cannot isolate a sandbox at all (no episode can run here).
        """
        async with self._turn:
            return await self._reset()

    async def _reset(self) -> Observation:
        self._require(EpisodeState.NEW, "reset")
        self.state = EpisodeState.RUNNING
        try:
            # The workspace's walk (its listing, its visible tests) overlaps the sandbox's start.
            scan, sandbox = await asyncio.gather(
                asyncio.to_thread(scan_workspace, self.task), self._open(), return_exceptions=True
            )
            if isinstance(sandbox, BaseException):
                raise sandbox
            if isinstance(scan, OSError):
                self._broken = f"the task's workspace could not be read: {scan}"
            elif isinstance(scan, BaseException):
                raise scan
            else:
                self._scan = scan
            if sandbox is not None and self._broken is None:
                visible = self._visible_tests()
                self._toolbox = Toolbox(sandbox, visible)
                if self.shaped_rewards and visible:
                    self._pass_rate = visible.pass_rate(
                        await grade(visible.grading_task(), {}, sandboxes=self._judge_sandboxes)
                    )
        except BaseException:
            await self._close()
            raise
        self._started = time.monotonic()
        self.trajectory.started_at = time.time()
        observation = self._first_observation()
        self.trajectory.reset = observation
        return observation

    async def _open(self) -> Sandbox | None:
        """The agent's sandbox, from the task's sandboxes (:func:`rollbox.judge.task_sandboxes`, the judge's own
        rule for a task's runtime), over a copy-on-write /workspace of the task's workspace/; None, with
        ``_broken`` set, when the task's runtime cannot be had or the sandbox could not be started."""
        try:
            sandboxes = await task_sandboxes(self.task, self._sandboxes)
            image = sandboxes_image(sandboxes)  # the one the agent's sandbox runs on
        except (LayerBuildError, PythonNotFound, ImageError) as exc:
            self._broken = f"the task's runtime could not be prepared: {exc}"
            return None
        self.trajectory.image = image.digest if image is not None else None
        try:
            return await self._stack.enter_async_context(
                sandboxes.sandbox(
                    SandboxConfig(limits=self._limits, network=self.task.network, workspace=self.task.workspace)
                )
            )
        except SandboxError as exc:
            self._broken = f"the agent's sandbox could not be started: {exc}"
            return None

    def _first_observation(self) -> Observation:
        if self._broken is not None:
            text = (
                f"rollbox cannot run this episode: {self._broken}\n\nNothing will run; the episode ends at the next "
                "step, unjudged (infra_error, no reward)."
            )
            observation = Observation(text=text, error=True, status=Status.INFRA_ERROR, full_bytes=len(text.encode()))
            return self._cut(observation)
        assert self._scan is not None and self._visible is not None
        tests = (
            f"The visible tests ({', '.join(self._visible.tests)}) run with run_tests(); grading uses hidden tests."
            if self._visible
            else "The task has no visible tests; grading uses hidden tests."
        )
        text = (
            f"{self.task.instruction.strip() or 'Solve the task in /workspace.'}\n\n"
            f"Your workspace, /workspace:\n{self._scan.listing()}\n\n"
            f"Tools: {', '.join(t['function']['name'] for t in TOOLS)}. {tests} Call submit() when you are done; "
            f"you have {self.budget.max_turns} turns."
        )
        return self._cut(Observation(text=text, full_bytes=len(text.encode())))

    def _wall_left(self) -> float:
        return self.budget.wall_s - (time.monotonic() - self._started)

    async def step(self, action: object, *, record: Mapping[str, Any] | None = None) -> StepResult:
        """Carry out one action (a tool call) and return ``(observation, reward, done, info)``.

        Any action gets an observation and counts a turn: a malformed one (of any size, depth or type) an error
        observation. The tool call ends by its deadline: the command timeout, or what is left of the wall
        budget, whichever comes first. On the last step ``done`` is true, ``info.verdict`` holds the judge's
        verdict and ``reward`` its reward (``None`` when rollbox or the host failed: mask the episode).
        ``record`` is kept with the turn in the trajectory (a policy's tokens). A step called while another
        runs waits for it.

        Raises:
            EpisodeStateError: the episode was not reset, or has ended (also while this step waited its turn).
        """
        async with self._turn:
            return await self._step(action, record)

    async def _step(self, action: object, record: Mapping[str, Any] | None) -> StepResult:
        self._require(EpisodeState.RUNNING, "step")
        begin = time.monotonic()
        number = self.turns + 1
        end: EndReason | None = None
        result: ExecResult | None = None
        try:
            call: ToolCall | None = parse_action(action)
        except ActionError as exc:
            call, outcome = None, Outcome(f"Error: {exc}", error=True)
        left = self._wall_left()
        if self._toolbox is None:
            outcome = Outcome(f"Not carried out: {self._broken}", error=True)
            end = EndReason.INFRA_ERROR
        elif call is None:
            pass
        elif left <= 0:
            outcome, end = (
                Outcome("The episode's wall-time budget ran out; the workspace is graded as it is."),
                EndReason.WALL_TIME,
            )
        elif call.name == "submit":
            outcome, end = Outcome("Submitted: the workspace is graded as it is."), EndReason.SUBMITTED
        else:
            outcome = await self._toolbox.run(call, begin + min(self._limits.timeout_s, left))
            result = outcome.result
        observation = self._cut(outcome.observation(call.name if call else None))
        if end is None:
            end = self._budget_end(result, number)
        shaped = await self._shape(call) if self.shaped_rewards else None
        verdict = await self._finish(end, result) if end else None
        reward: float | None = verdict.reward if verdict else (shaped or 0.0)
        info = StepInfo(
            turn=number,
            tool=call.name if call else None,
            wall_s=time.monotonic() - begin,
            shaped_reward=shaped,
            end_reason=end,
            verdict=verdict,
        )
        self._record(
            number=number,
            action=action,
            observation=observation,
            result=result,
            begin=begin,
            reward=reward,
            shaped=shaped,
            record=record,
        )
        telemetry.emit(
            "episode.turn",
            episode_id=self.trajectory.episode_id,
            task_id=self.task.id,
            turn=number,
            tool=info.tool,
            error=observation.error,
            status=observation.status.value if observation.status else None,
            truncated=observation.truncated,
            bytes=observation.full_bytes,
            wall_s=info.wall_s,
        )
        if end is not None and verdict is not None:
            self._end(end, verdict)
        return StepResult(observation, reward, verdict is not None, info)

    async def freeze_workspace(self) -> None:
        """Fix what the judge grades: the agent's workspace as it stands now. Steps after this still run in the
        agent's sandbox (a harness's own checks, say), but whatever they change, the verdict is this workspace's.
        The changes are copied out now, which the end then does not do again.

        Raises:
            EpisodeStateError: the episode is not running, or its workspace was frozen already.
        """
        async with self._turn:
            self._require(EpisodeState.RUNNING, "freeze the workspace")
            if self._frozen is not None:
                raise EpisodeStateError("cannot freeze the workspace: it was frozen already")
            if self._toolbox is None:
                return  # no sandbox, no workspace: the end is infra_error whatever happens
            try:
                self._frozen = await self._stack.enter_async_context(
                    final_workspace(self._toolbox.sandbox, self._limits)
                )
            except (TreeTooLarge, OSError) as exc:  # judged at the end, as then
                self._frozen = exc

    @contextlib.asynccontextmanager
    async def _judged_workspace(self, sandbox: Sandbox) -> AsyncIterator[WorkspaceChanges]:
        """The workspace the judge grades: the frozen one, else the sandbox's as it stands."""
        if isinstance(self._frozen, Exception):
            raise self._frozen
        if self._frozen is not None:
            yield self._frozen
            return
        async with final_workspace(sandbox, self._limits) as workspace:
            yield workspace

    async def end(self) -> Verdict:
        """End the episode now, without a turn, and judge the workspace as it stands (what a trainer does when its
        own turn limit comes first). Returns the verdict; an episode that has ended already returns its own.

        Raises:
            EpisodeStateError: the episode was never reset, or was closed before its end.
        """
        async with self._turn:
            return await self._end_now()

    async def _end_now(self) -> Verdict:
        if self.state is EpisodeState.DONE or (self.state is EpisodeState.CLOSED and self._verdict is not None):
            assert self._verdict is not None
            return self._verdict
        self._require(EpisodeState.RUNNING, "end")
        end = EndReason.STOPPED if self._toolbox is not None else EndReason.INFRA_ERROR
        verdict = await self._finish(end, None)
        self._end(end, verdict)
        return verdict

    def _budget_end(self, result: ExecResult | None, number: int) -> EndReason | None:
        if result is not None and result.status is Status.INFRA_ERROR:
            return EndReason.INFRA_ERROR
        if self._output >= self.budget.output_bytes:
            return EndReason.OUTPUT
        if number >= self.budget.max_turns:
            return EndReason.MAX_TURNS
        if self._wall_left() <= 0:
            return EndReason.WALL_TIME
        return None

    async def _shape(self, call: ToolCall | None) -> float:
        """The change in the visible tests' pass rate, graded by the judge, after a ``run_tests`` turn."""
        if call is None or call.name != "run_tests" or not self._visible or self._toolbox is None:
            return 0.0
        try:
            async with final_workspace(self._toolbox.sandbox, self._limits) as workspace:
                verdict = await grade(self._visible.grading_task(), workspace, sandboxes=self._judge_sandboxes)
        except (TreeTooLarge, OSError):
            return 0.0  # no grading, so no signal: the final verdict says what is wrong with the workspace
        rate = self._visible.pass_rate(verdict)
        if rate is None or self._pass_rate is None:
            return 0.0  # rollbox failed to grade: no signal rather than a false one
        delta, self._pass_rate = rate - self._pass_rate, rate
        return delta

    async def _finish(self, end: EndReason, result: ExecResult | None) -> Verdict:
        """Judge the agent's workspace as it stands (or, when rollbox failed, an ``infra_error`` verdict), then
        release the agent's sandbox."""
        try:
            if end is EndReason.INFRA_ERROR or self._toolbox is None:
                error = self._broken or (result.error if result and result.error else None)
                return Verdict(
                    task_id=self.task.id,
                    status=VerdictStatus.INFRA_ERROR,
                    reward=None,
                    error=error or "the agent's sandbox failed",
                )
            try:
                async with self._judged_workspace(self._toolbox.sandbox) as workspace:
                    return await grade(self.task, workspace, sandboxes=self._judge_sandboxes)
            except TreeTooLarge as exc:  # what the agent wrote: its failure, never a masked infra_error
                flag = {"code": "workspace_refused", "path": "", "detail": str(exc)}
                return Verdict(task_id=self.task.id, status=VerdictStatus.ERROR, reward=0.0, flags=(flag,))
            except OSError as exc:
                return Verdict(
                    task_id=self.task.id,
                    status=VerdictStatus.INFRA_ERROR,
                    reward=None,
                    error=f"exporting the agent's workspace failed: {exc}",
                )
        finally:
            with contextlib.suppress(Exception):  # the verdict stands whatever closing the sandbox does
                await self._stack.aclose()

    def _end(self, end: EndReason, verdict: Verdict) -> None:
        self.state = EpisodeState.DONE
        self._verdict = verdict
        self.trajectory.end_reason = end.value
        self.trajectory.verdict = verdict.to_json()
        self.trajectory.reward = verdict.reward
        self.trajectory.wall_s = time.monotonic() - self._started
        if self._visible is not None:
            self._visible.close()
        telemetry.emit(
            "episode.end",
            episode_id=self.trajectory.episode_id,
            task_id=self.task.id,
            turns=self.turns,
            end_reason=end.value,
            status=verdict.status.value,
            reward=verdict.reward,
            wall_s=self.trajectory.wall_s,
            tests_passed=verdict.passed,
            tests_total=verdict.total,
            error=verdict.error,
            image=self.trajectory.image,
        )

    def _cut(self, observation: Observation) -> Observation:
        """The observation within ``observation_bytes``, and within what ``output_bytes`` leaves."""
        data = observation.text.encode("utf-8")
        room = min(self.budget.observation_bytes, max(self.budget.output_bytes - self._output, 0))
        self._output += min(len(data), room)
        if len(data) <= room:
            return dataclasses.replace(observation, full_bytes=len(data))
        marker = f"\n[... cut: {len(data) - room} of {len(data)} bytes not shown ...]\n"
        head = room * 2 // 3
        tail = room - head
        text = data[:head].decode("utf-8", "ignore") + marker + (data[-tail:].decode("utf-8", "ignore") if tail else "")
        return dataclasses.replace(observation, text=text, truncated=True, full_bytes=len(data))

    def _record(
        self,
        *,
        number: int,
        action: object,
        observation: Observation,
        result: ExecResult | None,
        begin: float,
        reward: float | None,
        shaped: float | None,
        record: Mapping[str, Any] | None,
    ) -> None:
        self.trajectory.turns.append(
            Turn(
                turn=number,
                action=_plain(action),
                observation=observation,
                started_s=begin - self._started,
                wall_s=time.monotonic() - begin,
                cpu_s=result.cpu_s if result else None,
                peak_memory_bytes=result.peak_memory_bytes if result else None,
                reward=reward,
                shaped_reward=shaped,
                policy=dict(record or {}),
            )
        )

    async def close(self) -> None:
        """Release the agent's sandbox and the episode's files (idempotent), once a step under way has finished.
        An episode closed before its end is not judged."""
        async with self._turn:
            await self._close()

    async def _close(self) -> None:
        try:
            await self._stack.aclose()
        finally:
            if self._visible is not None:
                self._visible.close()
            self.state = EpisodeState.CLOSED


#: The deepest action a trajectory keeps as JSON: every reader and writer of trajectories (the service's answers
#: among them) can then nest it in a few levels of their own without reaching Python's recursion limit.
_MAX_NESTING = 100


def _plain(action: object) -> Any:
    """The action as strict JSON can hold it, for the trajectory: a ToolCall as its dict; an action JSON cannot
    hold (a float NaN, an object, an integer of thousands of digits, nesting deeper than 100) as its short text."""
    if isinstance(action, ToolCall):
        action = {"name": action.name, "arguments": dict(action.arguments)}
    try:
        if _nesting(action) > _MAX_NESTING:
            raise ValueError("nested too deeply")
        json.dumps(action, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return show(action, limit=4096)
    return action


def _nesting(value: object) -> int:
    """How deep lists and dicts nest in ``value`` (0 for a scalar), found without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list | tuple) else None
        if children is not None:
            deepest = max(deepest, level)
            if level <= _MAX_NESTING:
                stack.extend((child, level + 1) for child in children)
    return deepest
