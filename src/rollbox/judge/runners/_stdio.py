"""The ``stdio`` runner: each case's input on stdin, the output compared where the candidate cannot reach.

One fresh sandbox per grading holds the grading tree at /workspace and runs the task's command once per case, with
only that case's input on stdin. Expected outputs never enter it. Outputs are compared in the judge's own process
(``exact``, ``whitespace``, ``float``), or by the task's checker program in a second fresh sandbox of its own
(``checker``), in which the candidate's code never ran, so it cannot have replaced or influenced the checker.

Outcomes, test ids ``case-0``, ``case-1``, ...:

- ``passed``: the command exited 0 and its output matches.
- ``failed``: the output does not match, the command exited non-zero, or it hit a limit.
- ``error``: the command was killed by a signal no limit sent, or the checker itself failed on this output.
- ``missing``: the case never ran. A case that hits the wall-clock or CPU time limit ends the grading run (so a
  candidate that hangs costs one timeout, not one per case), as does an infrastructure failure.

The report's ``run_status`` is the worst status of any case (an infrastructure failure of the checker included).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.sandbox import ExecResult, FreshSandboxes, SandboxConfig, SandboxSource, Status
from rollbox.tasks import Comparator, StdioGrading, Task, TaskFormatError
from rollbox.tasks._cases import StdioCase, load_stdio_cases

from ._drivers import judges_own
from ._missing import unless_missing
from ._probe import grading_env
from ._report import RunnerReport
from ._tree import GradingTree

_FRESH = FreshSandboxes()

__all__ = ["outputs_match", "run_stdio"]

_CHECK_DIR = "/tmp/.rollbox-checker"  # in the checker's own sandbox
#: From least to most severe: the report's ``run_status`` is the last of these that any case reached.
_SEVERITY = (
    Status.OK,
    Status.NONZERO_EXIT,
    Status.SIGNALED,
    Status.OUTPUT_LIMIT,
    Status.PIDS_LIMIT,
    Status.DISK_LIMIT,
    Status.MEMORY_LIMIT,
    Status.CPU_TIME_LIMIT,
    Status.TIMEOUT,
    Status.INFRA_ERROR,
)
#: Statuses after which no further case runs.
_STOPS = frozenset({Status.TIMEOUT, Status.CPU_TIME_LIMIT, Status.INFRA_ERROR})


#: A number as programs print one: ASCII digits, an optional fraction and exponent, or inf/infinity/nan. Python's
#: ``float`` alone would also read "1_000" and other scripts' digits (Arabic-Indic, fullwidth) as numbers.
_NUMBER = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE | re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)


def _numbers_match(actual: str, expected: str, tolerance: float) -> bool:
    if not (_NUMBER.fullmatch(actual) and _NUMBER.fullmatch(expected)):
        return actual == expected  # not both numbers: the tokens themselves must be equal
    if _INTEGER.fullmatch(actual) and _INTEGER.fullmatch(expected):
        return int(actual) == int(expected)  # a count off by one is wrong at any size: no relative tolerance
    a, e = float(actual), float(expected)
    if math.isnan(a) or math.isnan(e):
        return math.isnan(a) and math.isnan(e)
    return math.isclose(a, e, rel_tol=tolerance, abs_tol=tolerance)


def outputs_match(comparator: Comparator, actual: bytes, expected: str, *, float_tolerance: float = 1e-6) -> bool:
    """Whether the command's output ``actual`` matches ``expected`` under ``comparator``.

    ``exact``: the bytes equal the UTF-8 encoding of ``expected``. ``whitespace``: the same tokens after splitting
    both on any whitespace. ``float``: the same number of tokens; two integers must be equal, other pairs of
    numbers (ASCII digits, optional fraction and exponent, inf, nan) match within ``float_tolerance``, absolute or
    relative (NaN matches only NaN); any other pair must be equal.

    >>> outputs_match(Comparator.WHITESPACE, b"1  2\\n", "1 2")
    True
    >>> outputs_match(Comparator.FLOAT, b"0.3333", "0.33333333", float_tolerance=1e-3)
    True

    Raises:
        ValueError: ``comparator`` is ``checker``, which needs a sandbox (see :func:`run_stdio`).
    """
    if comparator is Comparator.EXACT:
        return actual == expected.encode()
    tokens, wanted = actual.decode("utf-8", "replace").split(), expected.split()
    if comparator is Comparator.WHITESPACE:
        return tokens == wanted
    if comparator is Comparator.FLOAT:
        return len(tokens) == len(wanted) and all(
            _numbers_match(a, e, float_tolerance) for a, e in zip(tokens, wanted, strict=True)
        )
    raise ValueError(f"the {comparator.value!r} comparator runs a program: use run_stdio")


def _worst(statuses: Iterable[Status]) -> Status:
    return max(statuses, key=_SEVERITY.index, default=Status.OK)


def _ran(result: ExecResult) -> Outcome | None:
    """The outcome of a case from its run alone, or ``None`` when its output must be compared."""
    if result.ok:
        return None
    if result.status is Status.INFRA_ERROR:
        return Outcome.MISSING
    return Outcome.ERROR if result.status is Status.SIGNALED else Outcome.FAILED


async def _run_cases(
    task: Task, grading: StdioGrading, tree: GradingTree, cases: Sequence[StdioCase], sandboxes: SandboxSource
) -> list[ExecResult]:
    """Run the command once per case in one fresh sandbox, stopping after a case that ends the run."""
    results: list[ExecResult] = []
    async with tree.sandbox(sandboxes, limits=task.limits, network=task.network) as sb:
        await tree.lay(sb)
        for case in cases:
            result = await sb.exec(list(grading.command), stdin=case.input, env=grading_env())
            results.append(unless_missing(sb, grading.command, result, runner="stdio"))
            if results[-1].status in _STOPS:
                break
    return results


async def _check(
    task: Task, checker: str, cases: Sequence[StdioCase], outputs: dict[int, bytes], sandboxes: SandboxSource
) -> tuple[dict[int, Outcome], ExecResult | None]:
    """The checker's outcome for each output, from a sandbox of its own; and its infrastructure failure, if any."""
    program = f"/workspace/{checker}"
    direct = not checker.endswith(".py") and bool((task.tests / checker).stat().st_mode & 0o111)
    argv = [program] if direct else ["python3", "-s", program]
    argv += [f"{_CHECK_DIR}/input", f"{_CHECK_DIR}/expected", f"{_CHECK_DIR}/output"]
    outcomes: dict[int, Outcome] = {}
    async with sandboxes.sandbox(SandboxConfig(limits=task.limits)) as sb:
        with judges_own("tests/ directory"):
            await sb.write_tree(task.tests)
        for index, output in outputs.items():
            with judges_own("case"):
                await sb.write_file(f"{_CHECK_DIR}/input", cases[index].input)
                await sb.write_file(f"{_CHECK_DIR}/expected", cases[index].output)
            await sb.write_file(f"{_CHECK_DIR}/output", output)
            result = await sb.exec(argv, env=grading_env())
            if result.status is Status.NONZERO_EXIT and result.exit_code in (126, 127):
                # Not found or not executable (its interpreter missing): the task's checker cannot run, on any
                # output; never the candidate's failure.
                said = result.stderr_text.strip().splitlines()
                result = ExecResult.infra_error(
                    f"the task's checker {checker!r} cannot run (exit status {result.exit_code}"
                    f"{': ' + said[-1][:300] if said else ''}): give it an interpreter the sandbox has, or make it "
                    "executable"
                )
            if result.status is Status.INFRA_ERROR:
                return outcomes, result
            if result.status in (Status.OK, Status.NONZERO_EXIT):
                outcomes[index] = Outcome.PASSED if result.ok else Outcome.FAILED
            else:
                outcomes[index] = Outcome.ERROR  # the checker hung or crashed on this output: never a pass
    return outcomes, None


async def run_stdio(
    task: Task, grading: StdioGrading, tree: GradingTree, sandboxes: SandboxSource = _FRESH
) -> RunnerReport:
    """Grade the candidate's command in a fresh sandbox built from ``tree`` (the pristine task plus its changes).

    Raises:
        TaskFormatError: the cases file is malformed, or the ``checker`` comparator names no program in tests/.
    """
    cases = load_stdio_cases(task.tests / grading.cases)
    if grading.comparator is Comparator.CHECKER and not (grading.checker and (task.tests / grading.checker).is_file()):
        raise TaskFormatError(
            task.path / "task.toml",
            f"[grading] comparator 'checker' needs a checker program in tests/, got {grading.checker!r}",
        )
    results = await _run_cases(task, grading, tree, cases, sandboxes)
    outcomes = [Outcome.MISSING] * len(cases)
    unchecked: dict[int, bytes] = {}
    for index, result in enumerate(results):
        outcome = _ran(result)
        if outcome is not None:
            outcomes[index] = outcome
        elif grading.comparator is Comparator.CHECKER:
            unchecked[index] = result.stdout
        else:
            matched = outputs_match(
                grading.comparator, result.stdout, cases[index].output, float_tolerance=grading.float_tolerance
            )
            outcomes[index] = Outcome.PASSED if matched else Outcome.FAILED
    failure = next((r for r in results if r.status is Status.INFRA_ERROR), None)
    if failure is None and unchecked and grading.checker:
        checked, failure = await _check(task, grading.checker, cases, unchecked, sandboxes)
        for index, outcome in checked.items():
            outcomes[index] = outcome
    statuses = [r.status for r in results] + ([failure.status] if failure else [])
    return RunnerReport(
        tests=tuple(GradedTest(f"case-{i}", o) for i, o in enumerate(outcomes)),
        run_status=_worst(statuses),
        crashed=not any(r.ok for r in results),
        detail=failure.error if failure else None,
        cpu_s=sum(r.cpu_s for r in results),
        longest_run_cpu_s=max((r.cpu_s for r in results), default=0.0),
        peak_memory_bytes=max((r.peak_memory_bytes or 0 for r in results), default=0),
    )
