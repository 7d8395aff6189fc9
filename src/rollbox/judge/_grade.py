"""Grading: the pristine task plus the candidate's allowed changes, run by the task's runner, turned into a verdict."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from rollbox.sandbox import FreshSandboxes, RollboxError, SandboxSource, Status, WorkspaceChanges, scratch_directory
from rollbox.tasks import FunctionGrading, PytestGrading, ScriptGrading, StdioGrading, Task

from ._runtime import sandboxes_image, task_sandboxes
from ._verdict import Outcome, Verdict, VerdictStatus, compute_reward
from .integrity._scan import PENALIZED, scan_changes
from .integrity._workspace import (
    Candidate,
    Changes,
    Flag,
    WorkspaceError,
    build_grading_tree,
    diff_workspace,
    removals,
    stage_changes,
    workspace_size,
)
from .runners._function import run_function
from .runners._probe import record_cpu
from .runners._pytest import run_pytest
from .runners._report import RunnerReport
from .runners._script import run_script
from .runners._stdio import run_stdio
from .runners._tree import GradingTree, TreeTooLarge

__all__ = ["Solution", "grade"]

#: A candidate as the judge takes it: its workspace directory; only its files (workspace-relative paths to
#: contents; text is UTF-8), which stand for the task's workspace with those files written over it; or what it
#: changed in a sandbox that started on the task's workspace (:meth:`rollbox.Sandbox.read_changes`).
Solution = str | os.PathLike[str] | Mapping[str, str | bytes] | WorkspaceChanges

Runner = Callable[[Task, Any, GradingTree, SandboxSource], Awaitable[RunnerReport]]

#: A task workspace with more entries or bytes than these is not copied into a grading sandbox: the sandbox starts
#: over it (copy-on-write) and only the candidate's changes are laid in. Below them, copying costs less than the
#: restart an overlaid pooled sandbox needs after each grading, and any task's pooled sandbox can serve.
_COPY_MAX_ENTRIES = 256
_COPY_MAX_BYTES = 4 * 1024 * 1024


def _overlaid(task: Task) -> bool:
    entries, size = workspace_size(task.workspace)
    return entries > _COPY_MAX_ENTRIES or size > _COPY_MAX_BYTES


def _grading_tree(task: Task, candidate: Candidate, dest: Path, changes: Changes) -> GradingTree:
    """The pristine workspace plus ``changes``, as the runner lays it: staged in ``dest`` whole, or only the
    changes over the task's workspace.

    Raises:
        WorkspaceError: the candidate's files changed since the diff.
        RollboxError, OSError: the host could not write ``dest`` or read the task's workspace.
    """
    if _overlaid(task):
        stage_changes(candidate, dest, changes)
        return GradingTree(dest, base=task.workspace, removed=removals(task.workspace, changes))
    build_grading_tree(task.workspace, candidate, dest, changes)
    return GradingTree(dest)


_RUNNERS: dict[type, Runner] = {
    FunctionGrading: run_function,
    PytestGrading: run_pytest,
    StdioGrading: run_stdio,
    ScriptGrading: run_script,
}


def _status(report: RunnerReport) -> VerdictStatus:
    if report.run_status is Status.INFRA_ERROR:
        return VerdictStatus.INFRA_ERROR
    if report.tampered:
        return VerdictStatus.TAMPERED
    if report.tests and all(t.outcome is Outcome.PASSED for t in report.tests):
        return VerdictStatus.PASSED
    if report.run_status in (Status.TIMEOUT, Status.CPU_TIME_LIMIT):
        return VerdictStatus.TIMEOUT
    if report.run_status is Status.MEMORY_LIMIT:
        return VerdictStatus.MEMORY_LIMIT
    if report.crashed:
        return VerdictStatus.ERROR
    return VerdictStatus.FAILED


_references: dict[str, tuple[float, int] | None] = {}


def _fingerprint(task: Task) -> str:
    digest = hashlib.sha256(str(task.path).encode())
    for path in sorted(task.path.rglob("*")):
        if path.is_file():
            st = path.stat()
            digest.update(f"{path}:{st.st_size}:{st.st_mtime_ns}".encode())
    return digest.hexdigest()


async def _reference_usage(task: Task, runner: Runner, sandboxes: SandboxSource) -> tuple[float, int] | None:
    """(CPU seconds, peak memory) of the reference solution's grading run, once per task content; ``None`` when
    it does not pass, which turns the efficiency terms off.

    Raises:
        RollboxError: rollbox or the host failed that run. Nothing is remembered, so the next grading runs it
            again (as the script runner does with its canary).
        OSError: the reference's tree could not be made.
    """
    key = _fingerprint(task)
    if key not in _references and task.solution is not None:
        if _overlaid(task):  # the solution's files laid over the workspace, as the task format says
            report = await runner(task, task.grading, GradingTree(task.solution, base=task.workspace), sandboxes)
        else:
            with scratch_directory("rollbox-reference-") as tree:
                shutil.copytree(task.workspace, tree, dirs_exist_ok=True, symlinks=True)
                shutil.copytree(task.solution, tree, dirs_exist_ok=True, symlinks=True)
                report = await runner(task, task.grading, GradingTree(Path(tree)), sandboxes)
        if report.run_status is Status.INFRA_ERROR:
            raise RollboxError(report.detail or "its run ended in infra_error")
        passed = _status(report) is VerdictStatus.PASSED
        _references[key] = (report.cpu_s, report.peak_memory_bytes) if passed else None
    return _references.get(key)


def _ratio(reference: float, candidate: float) -> float:
    """min(1, reference / candidate), in steps of 0.05 so that measurement noise rarely changes a reward."""
    return round(min(1.0, reference / max(candidate, 1e-9)) * 20) / 20 if reference > 0 else 1.0


#: How the ``tampered`` flag that a penalized hack signature adds begins (validation tells it from a canary's).
SIGNATURE_TAMPERED = "hack signature"


def _signature_detail(flag: Flag) -> str:
    return f"{SIGNATURE_TAMPERED} {flag.code} in {flag.path}: {flag.detail}"


def _infra(task: Task, start: float, error: str) -> Verdict:
    """The verdict when rollbox or the host failed: no reward, so that a trainer masks it."""
    return Verdict(
        task_id=task.id, status=VerdictStatus.INFRA_ERROR, reward=None, error=error, duration_s=time.monotonic() - start
    )


def _refused(task: Task, start: float, code: str, detail: str) -> Verdict:
    """The verdict for a candidate whose changes could not even be set up for grading."""
    flag = {"code": code, "path": "", "detail": detail}
    return Verdict(
        task_id=task.id, status=VerdictStatus.ERROR, reward=0.0, flags=(flag,), duration_s=time.monotonic() - start
    )


async def grade(task: Task, solution: Solution, *, sandboxes: SandboxSource | None = None) -> Verdict:
    """Grade the candidate's ``solution`` against ``task``.

    ``solution`` is the candidate's workspace directory; or only its files: a mapping of workspace-relative paths
    to contents (text is UTF-8), which stand for the task's workspace with those files written over it
    (``{"solution.py": completion}``; nothing is deleted); or what the candidate changed in a sandbox that started
    on the task's workspace (:meth:`rollbox.Sandbox.read_changes`), which costs what the changes hold however large
    the workspace. The candidate contributes only its changes to the
    task's workspace, minus protected paths (dropped and reported in ``flags``). Grading runs in a fresh sandbox; a
    failure of rollbox or the host gives status ``infra_error`` with reward ``None``, never a score.
    ``sandboxes`` says where grading sandboxes come from: fresh ones by default, or warm ones
    (:class:`rollbox.sandbox.WarmSandboxes`), reset between uses.
    """
    source: SandboxSource = sandboxes or FreshSandboxes()
    start = time.monotonic()
    runner = _RUNNERS[type(task.grading)]
    try:
        source = await task_sandboxes(task, source)  # the task's runtime layer (built on first use), its variables
        image = sandboxes_image(source)  # the one graded on
    except (RollboxError, OSError) as exc:
        # The task's layer and image are the machine's to make: a full disk there is never the candidate's.
        return _infra(task, start, str(exc))
    try:
        guard = isinstance(task.grading, PytestGrading | ScriptGrading)  # a test framework runs over the tree
        # surrogatepass: text with a lone surrogate is no valid source, and fails as Python would say.
        candidate: Candidate = (
            {p: t.encode("utf-8", "surrogatepass") if isinstance(t, str) else t for p, t in solution.items()}
            if isinstance(solution, Mapping)
            else solution
            if isinstance(solution, WorkspaceChanges)
            else Path(solution)
        )
        # The host's work on the candidate's tree runs in worker threads: its cost is the candidate's to choose
        # (thousands of files, paths hundreds of directories deep) and it must not hold the event loop.
        changes = await asyncio.to_thread(
            diff_workspace, task.workspace, candidate, guard=guard, max_total_bytes=task.limits.disk_bytes
        )
        scanned = await asyncio.to_thread(
            scan_changes, candidate, [*changes.added, *changes.modified], pristine=task.workspace
        )
        flags = changes.flags + scanned
        with scratch_directory("rollbox-grade-") as tree:
            laid = await asyncio.to_thread(_grading_tree, task, candidate, Path(tree), changes)
            report = await runner(task, task.grading, laid, source)
        record_cpu(report.longest_cpu_s())
    except WorkspaceError as exc:
        # The candidate's tree itself is unacceptable (too many files, a huge file, unreadable): its failure,
        # never a masked infra_error it could learn to provoke.
        return _refused(task, start, "workspace_refused", str(exc))
    except TreeTooLarge as exc:
        # A write inside the grading sandbox's own disk limit found it reached: the tree fits the byte limit but
        # not the sandbox (its blocks, its inodes).
        return _refused(task, start, "workspace_too_large", str(exc))
    except OSError as exc:
        # The host's own writes (the grading tree staged in its scratch, ...): a full disk there is the machine's.
        return _infra(task, start, f"{type(exc).__name__}: {exc}")
    except RollboxError as exc:
        return _infra(task, start, str(exc))
    status = _status(report)
    found = [f.to_json() for f in flags] + list(report.flags)
    if status is VerdictStatus.TAMPERED:
        found.append({"code": "tampered", "path": "", "detail": report.detail or "the grading machinery was subverted"})
    if status is VerdictStatus.INFRA_ERROR:
        reward = None
    elif status is VerdictStatus.TAMPERED:
        reward = task.reward.tamper_penalty
    else:
        efficiency = (1.0, 1.0)
        if (task.reward.cpu_weight or task.reward.memory_weight) and status is VerdictStatus.PASSED:
            try:
                reference = await _reference_usage(task, runner, source)
            except (RollboxError, OSError) as exc:
                # The reward depends on the reference: without it there is no reward to give, only rollbox's failure.
                return _infra(task, start, f"the reference solution's grading run failed: {exc}")
            if reference is None:
                found.append({"code": "reference_failed", "path": "solution/", "detail": "efficiency terms off"})
            else:
                efficiency = (_ratio(reference[0], report.cpu_s), _ratio(reference[1], report.peak_memory_bytes))
        reward = compute_reward(task.reward, report.tests, fail_to_pass=report.fail_to_pass, efficiency=efficiency)
        signature = next((f for f in scanned if f.code in PENALIZED), None)
        if signature is not None and reward > 0:
            # A hack on the tests' values, in the form a policy finds first, earned something: it costs what
            # subverting the grader costs, so that using it never pays whatever the tests let through. One that
            # earned nothing keeps its status (the flag shows the attempt), so a failure still reads as one.
            status, reward = VerdictStatus.TAMPERED, task.reward.tamper_penalty
            found.append({"code": "tampered", "path": signature.path, "detail": _signature_detail(signature)})
    return Verdict(
        task_id=task.id,
        status=status,
        reward=reward,
        tests=report.tests,
        flags=tuple(found),
        duration_s=time.monotonic() - start,
        error=report.detail if status is VerdictStatus.INFRA_ERROR else None,
        image=image.digest if image is not None else None,
        run_status=report.run_status,
        running=report.running,
    )
