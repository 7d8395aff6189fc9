"""What a verdict tells validation: whether it passed, and whether the tests alone let the candidate through.

A verdict is ``tampered`` for one of three causes, which its ``tampered`` flags name: a must-fail canary passed (the
pytest runner draws them per grading, so another draw may miss the candidate), the judge's penalty for a hack
signature (a pattern match, which a disguised variant passes), or the grading machinery was subverted otherwise.
Validation judges a task by what its tests let through, the first two aside.

Only what a run observed counts: a test that never reported (``missing``: the run hit a limit or crashed before it)
neither passed nor failed there. :func:`failures` are the tests a run saw fail, and :func:`endings` names the runs
that ended before every test reported, so that a check says how they ended instead of reading them as failures.
How a run ended is the sandbox's status of it (the verdict's ``run_status``): :func:`cut_by_a_limit` tells a run a
limit cut short (where a limit falls moves with the machine's load) from one that died (a signal, an exit).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from rollbox.judge import Outcome, Verdict, VerdictStatus
from rollbox.judge._grade import SIGNATURE_TAMPERED
from rollbox.sandbox import Status

__all__ = ["LIMITS", "caught_by_a_canary", "cut_by_a_limit", "endings", "failures", "let_through", "passed", "same"]

#: The sandbox statuses of a run a limit cut short, each with how :func:`endings` words it.
LIMITS = {
    Status.TIMEOUT: "hit the time limit",
    Status.CPU_TIME_LIMIT: "hit the CPU time limit",
    Status.MEMORY_LIMIT: "hit the memory limit",
    Status.OUTPUT_LIMIT: "hit the output limit",
    Status.PIDS_LIMIT: "hit the process limit",
    Status.DISK_LIMIT: "hit the disk limit",
}

#: How the ``tampered`` flag of a passing canary begins (``rollbox.judge.runners._pytest``).
_CANARY = "the must-fail canary"


def passed(verdict: Verdict) -> bool:
    """Whether the judge passed it."""
    return verdict.status is VerdictStatus.PASSED


def _tampered_by(verdict: Verdict) -> list[str]:
    """Why the verdict is ``tampered``: its ``tampered`` flags' details."""
    return (
        [f["detail"] for f in verdict.flags if f["code"] == "tampered"]
        if verdict.status is VerdictStatus.TAMPERED
        else []
    )


def _every_test_passed(verdict: Verdict) -> bool:
    return bool(verdict.tests) and all(t.outcome is Outcome.PASSED for t in verdict.tests)


def caught_by_a_canary(verdict: Verdict) -> bool:
    """Every graded test passed, and one of the canaries the pytest runner draws per grading caught it (its detail
    says so): another draw may miss it."""
    return _every_test_passed(verdict) and any(d.startswith(_CANARY) for d in _tampered_by(verdict))


def let_through(verdict: Verdict) -> bool:
    """Whether the tests let the candidate through: it passed, or every test passed and only the judge's penalty for
    a hack signature made it ``tampered``. The scan behind that penalty is a pattern match that a disguised hack
    passes, so a task is judged by its tests without it."""
    if passed(verdict):
        return True
    causes = _tampered_by(verdict)
    return _every_test_passed(verdict) and bool(causes) and all(d.startswith(SIGNATURE_TAMPERED) for d in causes)


def cut_by_a_limit(verdict: Verdict) -> bool:
    """Whether a limit cut the grading run short (any of the sandbox's limits: time, CPU time, memory, output,
    processes, disk), whatever status the verdict took for it (``timeout`` and ``memory_limit`` say so of a verdict
    that keeps no run status, read from an older JSON)."""
    return verdict.run_status in LIMITS or verdict.status in (VerdictStatus.TIMEOUT, VerdictStatus.MEMORY_LIMIT)


def same(first: Verdict, second: Verdict) -> bool:
    """Whether two gradings of one candidate agree: status and outcomes, or only passing when a limit was hit
    (which test a limit cuts short is a race)."""
    if cut_by_a_limit(first) or cut_by_a_limit(second):
        return passed(first) == passed(second)
    return first.status == second.status and _outcomes(first) == _outcomes(second)


def _outcomes(verdict: Verdict) -> list[tuple[str, str]]:
    return sorted((t.id, t.outcome.value) for t in verdict.tests)


def failures(verdict: Verdict) -> set[str]:
    """The tests ``verdict`` saw fail (``failed`` or ``error``); one that never reported is none of them."""
    return {t.id for t in verdict.tests if t.outcome in (Outcome.FAILED, Outcome.ERROR)}


def _ending(verdict: Verdict) -> str | None:
    """How a run ended before every test reported, in words (``None``: every test did, or an infra error)."""
    if verdict.status is VerdictStatus.INFRA_ERROR or (
        verdict.tests and all(t.outcome is not Outcome.MISSING for t in verdict.tests)
    ):
        return None
    if verdict.run_status in LIMITS:
        return LIMITS[verdict.run_status]
    if verdict.run_status is Status.SIGNALED:
        return "was killed by a signal before every test reported"
    if verdict.run_status in (Status.OK, Status.NONZERO_EXIT):
        return "exited before every test reported"
    return "ended before every test reported"  # no run took place (the candidate's changes were refused)


def endings(verdicts: Sequence[Verdict]) -> str:
    """How those of ``verdicts`` that ended before every test reported ended, counted against all of them (infra
    errors aside): ``hit the time limit on 1 of 3 runs``; empty when none did."""
    counted = Counter(e for v in verdicts if (e := _ending(v)) is not None)
    runs = sum(v.status is not VerdictStatus.INFRA_ERROR for v in verdicts)
    return ", ".join(f"{ending} on {count} of {runs} runs" for ending, count in counted.items())
