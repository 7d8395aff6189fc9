"""What a runner hands back to the judge: every expected test with its outcome, and how the run itself went."""

from __future__ import annotations

from dataclasses import dataclass

from rollbox.sandbox import Status

from ._verdict import GradedTest

__all__ = ["RunnerReport"]


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
    #: Findings of the runner itself (``{"code", "path", "detail"}``), reported with the verdict's flags.
    flags: tuple[dict[str, str], ...] = ()
