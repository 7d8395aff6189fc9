"""The ``function`` runner: the candidate's process receives only inputs; outputs are compared outside it."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast, get_args

from rollbox.sandbox import ExecResult, FreshSandboxes, SandboxSource, Status
from rollbox.tasks import FunctionGrading, Task, TaskFormatError
from rollbox.tasks._values import decode, encode

from ._channel import GRADING_ENV, ForgedChannel, read_records
from ._check import run_check
from ._drivers import driver_command, install_driver
from ._report import RunnerReport, merge_reports
from ._verdict import GradedTest, Outcome

_FRESH = FreshSandboxes()

__all__ = ["APPLY", "COMPARE", "Apply", "Compare", "FunctionCase", "load_cases", "run_function"]

_JUDGE_DIR = "/tmp/.rollbox-judge"

#: What the driver may do to a returned value, inside the candidate's process, before it is reported: what
#: ``assert f(x)`` and ``tuple(f(x)) == ...`` do to it there. Only these builtins, taken before the candidate's
#: code runs.
Apply = Literal["bool", "tuple"]
APPLY: tuple[Apply, ...] = get_args(Apply)
#: How a reported value is held against the expected one, outside the candidate's process.
Compare = Literal["==", "is", "close"]
COMPARE: tuple[Compare, ...] = get_args(Compare)


@dataclass(frozen=True)
class FunctionCase:
    """One call of the candidate's function and what its result must be.

    A cases file spells it ``{"args": [...], "kwargs": {...}, "expected": ...}``, optionally with ``"apply"``
    (one of :data:`APPLY`) and ``"compare"``: ``"=="`` (the default), ``"is"`` (``expected`` is ``null``,
    ``true`` or ``false``: the very object) or ``"close"`` with ``"tolerance"`` (``abs(value - expected) <
    tolerance``).
    """

    args: list[Any]
    kwargs: dict[str, Any]
    expected: Any
    apply: Apply | None = None
    compare: Compare = "=="
    tolerance: float | None = None

    def inputs(self) -> dict[str, Any]:
        """What the driver gets of this case: never the expected value."""
        sent = {"args": encode(self.args), "kwargs": encode(self.kwargs)}
        return sent if self.apply is None else {**sent, "apply": self.apply}

    def matches(self, value: Any) -> bool:
        """Whether ``value``, a decoded plain value (so no candidate code runs here), meets the expectation."""
        if self.compare == "is":
            return value is self.expected
        if self.compare == "close":
            assert self.tolerance is not None
            try:
                return bool(abs(value - self.expected) < self.tolerance)
            except (TypeError, ValueError, OverflowError):
                return False
        return bool(value == self.expected)


def _case(record: Any) -> FunctionCase:
    if not isinstance(record, dict):
        raise ValueError("expected an object with args (a list), kwargs (an object) and expected")
    unknown = set(record) - {"args", "kwargs", "expected", "apply", "compare", "tolerance"}
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(sorted(unknown))}: a case has args, kwargs, expected, "
            "and optionally apply, compare and tolerance"
        )
    args, kwargs = decode(record.get("args", [])), decode(record.get("kwargs", {}))
    if not isinstance(args, list) or not isinstance(kwargs, dict) or "expected" not in record:
        raise ValueError("expected an object with args (a list), kwargs (an object) and expected")
    apply, compare, tolerance = record.get("apply"), record.get("compare", "=="), record.get("tolerance")
    expected = decode(record["expected"])
    if apply is not None and apply not in APPLY:
        raise ValueError(f"apply must be one of {', '.join(APPLY)}, not {apply!r}")
    if compare not in COMPARE:
        raise ValueError(f"compare must be one of {', '.join(COMPARE)}, not {compare!r}")
    if compare == "is" and not (expected is None or type(expected) is bool):
        raise ValueError('compare "is" needs expected null, true or false')
    if (compare == "close") != (tolerance is not None):
        raise ValueError('tolerance goes with compare "close", and compare "close" needs one')
    if tolerance is not None and not (type(tolerance) in (int, float) and 0 < tolerance < math.inf):
        raise ValueError(f"tolerance must be a positive number, not {tolerance!r}")
    if compare == "close" and type(expected) not in (int, float, complex):
        raise ValueError(f'compare "close" needs a number expected, not {expected!r}')
    return FunctionCase(args, kwargs, expected, cast(Apply | None, apply), cast(Compare, compare), tolerance)


def load_cases(path: Path) -> list[FunctionCase]:
    """Read a function cases file: one case a line (see :class:`FunctionCase`).

    Raises:
        TaskFormatError: the file cannot be read as UTF-8 text, or a line is not such an object.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:  # changed since the task was loaded, which checked it
        raise TaskFormatError(path, f"cannot read the cases: {exc}") from None
    cases: list[FunctionCase] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            cases.append(_case(json.loads(line)))
        except (ValueError, RecursionError) as exc:
            raise TaskFormatError(path, f"line {number}: {exc}") from None
    if not cases:
        raise TaskFormatError(path, "no cases: a function task needs at least one")
    return cases


def _cases(path: Path) -> tuple[list[FunctionCase], str]:
    """The cases of ``path`` and the inputs the driver gets, read once per version of the file (a task is graded
    many times)."""
    st = path.stat()
    return _read_cases(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=1024)
def _read_cases(path: str, _mtime_ns: int, _size: int) -> tuple[list[FunctionCase], str]:
    cases = load_cases(Path(path))
    return cases, json.dumps([case.inputs() for case in cases])


def _outcomes(stdout: str, cases: list[FunctionCase], *, truncated: bool) -> tuple[list[Outcome], bool, str | None]:
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
    task: Task, grading: FunctionGrading, tree: Path, sandboxes: SandboxSource = _FRESH
) -> RunnerReport:
    """Grade the candidate's function in a fresh sandbox built from ``tree`` (the pristine task plus its changes)."""
    cases, inputs = _cases(task.tests / grading.cases) if grading.cases else ([], "[]")
    reports: list[RunnerReport] = []
    if grading.check:  # in sandboxes of its own, from the tree as it is before any of the candidate's code ran
        reports.append(await run_check(tree, task, grading, sandboxes))
    if cases:
        async with sandboxes.sandbox(limits=task.limits, network=task.network) as sb:
            await sb.write_tree(tree)
            driver = await install_driver(sb, _JUDGE_DIR, "_function_driver.py")
            command, warm = driver_command(sb, driver, f"/workspace/{grading.module}", grading.entry_point)
            result = await sb.exec(command, stdin=inputs, env=GRADING_ENV, warm_python=warm)
        reports.append(_cases_report(grading, cases, result))
    return merge_reports(reports)


def _cases_report(grading: FunctionGrading, cases: list[FunctionCase], result: ExecResult) -> RunnerReport:
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
