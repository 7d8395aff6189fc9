"""What a runner hands back to the judge: every expected test with its outcome, and how the run itself went."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rollbox.judge._verdict import GradedTest
from rollbox.sandbox import Status

__all__ = ["RunnerReport", "merge_reports"]


@dataclass(frozen=True, kw_only=True)
class RunnerReport:
    """The raw result of one grading run, before statuses and rewards are decided."""

    #: Every expected test, in a stable order, each with its outcome (``missing`` when it never reported).
    tests: tuple[GradedTest, ...]
    #: The sandbox status of the grading run.
    run_status: Status
    #: True when the candidate's code could not be run at all (it failed at import, or exited first).
    crashed: bool = False
    #: True when the grading machinery was subverted: a canary passed, or the result channel was forged.
    tampered: bool = False
    #: Why, when ``tampered``; or the infrastructure error, when ``run_status`` is ``infra_error``.
    detail: str | None = None
    #: The fail_to_pass test ids, for the ``f2p_p2p`` reward.
    fail_to_pass: tuple[str, ...] = ()
    #: CPU seconds of the graded runs, summed; and their peak memory, for efficiency terms of the reward.
    cpu_s: float = 0.0
    peak_memory_bytes: int = 0
    #: CPU seconds of the longest single run under the task's limits (each case of a stdio task runs under them
    #: alone); ``None``: ``cpu_s``, one run.
    longest_run_cpu_s: float | None = None
    #: The expected test that had started and never reported when the run ended (``None``: the run ended between
    #: tests, or the runner cannot tell).
    running: str | None = None
    #: Findings of the runner itself (``{"code", "path", "detail"}``), reported with the verdict's flags.
    flags: tuple[dict[str, str], ...] = ()

    def longest_cpu_s(self) -> float:
        """CPU seconds of the longest single run under the task's limits."""
        return self.cpu_s if self.longest_run_cpu_s is None else self.longest_run_cpu_s


def merge_reports(reports: Sequence[RunnerReport]) -> RunnerReport:
    """One report for several runs in one grading (cases, then a check): every test, and the worst of each run.

    The run status is ``infra_error`` if any run had it, else the first status that is neither ``ok`` nor
    ``nonzero_exit``, else ``nonzero_exit`` if any, else ``ok``.
    """
    if not reports:
        raise ValueError("merge_reports needs at least one report")
    statuses = [r.run_status for r in reports]
    if Status.INFRA_ERROR in statuses:
        status = Status.INFRA_ERROR
    else:
        worse = [s for s in statuses if s not in (Status.OK, Status.NONZERO_EXIT)]
        status = worse[0] if worse else (Status.NONZERO_EXIT if Status.NONZERO_EXIT in statuses else Status.OK)
    infra = [r.detail for r in reports if r.run_status is Status.INFRA_ERROR and r.detail]
    tampered = [r.detail for r in reports if r.tampered and r.detail]
    details: list[str | None] = [*infra, *tampered, None]
    return RunnerReport(
        tests=tuple(t for r in reports for t in r.tests),
        run_status=status,
        crashed=any(r.crashed for r in reports),
        tampered=any(r.tampered for r in reports),
        detail=details[0],
        fail_to_pass=tuple(t for r in reports for t in r.fail_to_pass),
        flags=tuple(f for r in reports for f in r.flags),
        running=next((r.running for r in reports if r.running is not None), None),
        cpu_s=sum(r.cpu_s for r in reports),
        longest_run_cpu_s=max(r.longest_cpu_s() for r in reports),
        peak_memory_bytes=max(r.peak_memory_bytes for r in reports),
    )
