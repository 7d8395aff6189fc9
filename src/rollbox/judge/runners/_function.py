"""The ``function`` runner: the candidate's process receives only inputs; outputs are compared outside it."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.sandbox import ExecResult, FreshSandboxes, SandboxSource, Status
from rollbox.tasks import FunctionGrading, Task
from rollbox.tasks._cases import FunctionCase, load_function_cases
from rollbox.tasks._values import decode

from ._channel import ForgedChannel, read_records
from ._check import run_check
from ._drivers import driver_command, install_driver
from ._missing import unless_missing
from ._probe import grading_env
from ._report import RunnerReport, merge_reports
from ._tree import GradingTree, candidates_room

_FRESH = FreshSandboxes()

__all__ = ["run_function"]

_JUDGE_DIR = "/tmp/.rollbox-judge"


def _cases(path: Path) -> tuple[tuple[FunctionCase, ...], str]:
    """The cases of ``path`` and the inputs the driver gets (never the expected values), read once per version of
    the file (a task is graded many times)."""
    st = path.stat()
    return _read_cases(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=1024)
def _read_cases(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[FunctionCase, ...], str]:
    cases = load_function_cases(Path(path))
    return cases, json.dumps([case.inputs() for case in cases])


def _outcomes(stdout: str, cases: Sequence[FunctionCase], *, truncated: bool) -> tuple[list[Outcome], bool, str | None]:
    """Per-case outcomes from the driver's reports, whether the module failed to load, and any forgery."""
    outcomes = [Outcome.MISSING] * len(cases)
    seen: set[int] = set()
    import_failed = False
    try:
        records = read_records(stdout, truncated=truncated)
    except ForgedChannel as exc:
        return outcomes, import_failed, str(exc)
    for record in records:
        if "import_error" in record:
            import_failed = True
            continue
        index = record.get("case")
        if not isinstance(index, int) or not 0 <= index < len(cases) or index in seen:
            return outcomes, import_failed, f"the result channel carried a forged or repeated report for case {index!r}"
        seen.add(index)
        if "value" in record:
            try:
                value = decode(record["value"])
            except ValueError:  # malformed, or nested too deeply: no value the function returned
                outcomes[index] = Outcome.ERROR
                continue
            # Both sides are plain builtin values now, so no comparison runs any of the candidate's code.
            outcomes[index] = Outcome.PASSED if cases[index].matches(value) else Outcome.FAILED
        else:
            outcomes[index] = Outcome.ERROR
    return outcomes, import_failed, None


async def run_function(
    task: Task, grading: FunctionGrading, tree: GradingTree, sandboxes: SandboxSource = _FRESH
) -> RunnerReport:
    """Grade the candidate's function in a fresh sandbox built from ``tree`` (the pristine task plus its changes)."""
    cases, inputs = _cases(task.tests / grading.cases) if grading.cases else ((), "[]")
    reports: list[RunnerReport] = []
    if grading.check:  # in sandboxes of its own, from the tree as it is before any of the candidate's code ran
        reports.append(await run_check(tree, task, grading, sandboxes))
    if cases:
        async with tree.sandbox(sandboxes, limits=task.limits, network=task.network, forks=True) as sb:
            await tree.lay(sb)
            with candidates_room(sb):  # laid after the tree, in the room it left
                driver = await install_driver(sb, _JUDGE_DIR, "_function_driver.py")
            command, warm = driver_command(sb, driver, f"/workspace/{grading.module}", grading.entry_point)
            result = await sb.exec(command, stdin=inputs, env=grading_env(), warm_python=warm)
            result = unless_missing(sb, command, result, runner="function")
        reports.append(_cases_report(grading, cases, result))
    return merge_reports(reports)


def _cases_report(grading: FunctionGrading, cases: Sequence[FunctionCase], result: ExecResult) -> RunnerReport:
    ids = [f"{grading.entry_point}[{i}]" for i in range(len(cases))]
    if result.status is Status.INFRA_ERROR:
        tests = tuple(GradedTest(i, Outcome.MISSING) for i in ids)
        return RunnerReport(tests=tests, run_status=result.status, detail=result.error)
    outcomes, import_failed, forged = _outcomes(result.stdout_text, cases, truncated=result.stdout_truncated)
    return RunnerReport(
        tests=tuple(GradedTest(i, o) for i, o in zip(ids, outcomes, strict=True)),
        run_status=result.status,
        crashed=import_failed or all(o is Outcome.MISSING for o in outcomes),
        tampered=forged is not None,
        detail=forged,
        cpu_s=result.cpu_s,
        peak_memory_bytes=result.peak_memory_bytes or 0,
    )
