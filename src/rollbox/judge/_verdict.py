"""Verdicts: what grading concluded, test by test, and the reward a trainer may learn from."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rollbox.sandbox import Status
from rollbox.tasks import RewardKind, RewardSpec

__all__ = ["GradedTest", "Outcome", "Verdict", "VerdictStatus", "compute_reward"]


class VerdictStatus(str, enum.Enum):
    """The conclusion of grading. Exactly one per verdict."""

    #: Every graded test passed.
    PASSED = "passed"
    #: At least one graded test did not pass.
    FAILED = "failed"
    #: The candidate's code could not even be run (it crashed at import, exited before any test, ...).
    ERROR = "error"
    #: The grading run hit its wall-clock or CPU limit before every test had an outcome.
    TIMEOUT = "timeout"
    #: The grading run hit its memory limit.
    MEMORY_LIMIT = "memory_limit"
    #: The grading machinery was subverted (a must-fail canary passed, a forged report), or the candidate's changes
    #: carry a hack signature the judge penalizes (``frame_walk``, ``always_equal``) and earned a reward; the reward
    #: is the tamper penalty.
    TAMPERED = "tampered"
    #: rollbox or the host failed; the reward is ``None`` so that a trainer masks it instead of learning a zero.
    INFRA_ERROR = "infra_error"


class Outcome(str, enum.Enum):
    """What happened to one graded test. Only ``passed`` counts as passing."""

    PASSED = "passed"
    FAILED = "failed"
    #: The test raised before its assertion (or the candidate's code raised).
    ERROR = "error"
    SKIPPED = "skipped"
    XFAILED = "xfailed"
    XPASSED = "xpassed"
    #: The test never reported: the run died, exited early, or the test was deselected.
    MISSING = "missing"


@dataclass(frozen=True)
class GradedTest:
    """One graded test and its outcome."""

    id: str
    outcome: Outcome

    def to_json(self) -> dict[str, str]:
        """As ``{"id": ..., "outcome": ...}``."""
        return {"id": self.id, "outcome": self.outcome.value}


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """The judge's answer for one candidate on one task (the ``rollbox grade --json`` contract)."""

    task_id: str
    status: VerdictStatus
    #: ``None`` for ``infra_error``: there is nothing a trainer should learn.
    reward: float | None
    tests: tuple[GradedTest, ...] = ()
    #: Findings about the candidate's changes (dropped protected files, hack signatures). They inform, but for the
    #: signatures that make the verdict ``tampered`` (a ``tampered`` flag then says which).
    flags: tuple[dict[str, str], ...] = ()
    duration_s: float = 0.0
    #: For ``infra_error``: what failed and what to do about it.
    error: str | None = None
    #: The digest of the image grading ran on (``sha256:...``), or ``None``: the host's system directories.
    image: str | None = None
    #: How the grading run itself ended, in the sandbox's taxonomy (:class:`rollbox.sandbox.Status`): ``signaled``
    #: for a run a signal killed (a test that kills its own process, a segfault), ``nonzero_exit`` or ``ok`` for one
    #: that exited, a limit's status for one a limit cut short; the worst of them for a grading of several runs.
    #: ``None`` when no run took place (the candidate's changes were refused, or rollbox failed before the run).
    run_status: Status | None = None
    #: The test that had started and never reported when the run ended (the one the signal, the exit or the limit
    #: fell on); ``None`` when the run ended between tests, or the runner cannot tell (only the pytest runner can).
    #: The other tests that never reported did not run at all.
    running: str | None = None

    @property
    def passed(self) -> int:
        """How many graded tests passed."""
        return sum(t.outcome is Outcome.PASSED for t in self.tests)

    @property
    def total(self) -> int:
        """How many tests were graded."""
        return len(self.tests)

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``rollbox grade --json`` prints."""
        return {
            "task_id": self.task_id,
            "status": self.status.value,
            "reward": self.reward,
            "tests": [t.to_json() for t in self.tests],
            "passed": self.passed,
            "total": self.total,
            "flags": list(self.flags),
            "duration_s": round(self.duration_s, 6),
            "error": self.error,
            **({"image": self.image} if self.image is not None else {}),
            "run_status": self.run_status.value if self.run_status is not None else None,
            "running": self.running,
        }


def _rate(tests: Sequence[GradedTest]) -> float:
    return sum(t.outcome is Outcome.PASSED for t in tests) / len(tests) if tests else 1.0


def compute_reward(
    spec: RewardSpec,
    tests: Sequence[GradedTest],
    *,
    fail_to_pass: Sequence[str] = (),
    efficiency: tuple[float, float] = (1.0, 1.0),
) -> float:
    """The reward for these outcomes: binary, pass rate, or weighted fail_to_pass / pass_to_pass rates.

    ``efficiency`` is the candidate's (CPU, memory) ratio to the reference, each in (0, 1]: with efficiency
    weights the correctness score is scaled by ``1 - w_cpu - w_mem + w_cpu * r_cpu + w_mem * r_mem``, so that a
    wrong answer earns nothing however fast it is. With no graded test at all the reward is 0.0.
    """
    if not tests:
        return 0.0
    scale = 1 - spec.cpu_weight - spec.memory_weight
    scale += spec.cpu_weight * efficiency[0] + spec.memory_weight * efficiency[1]
    return _correctness(spec, tests, fail_to_pass) * scale


def _correctness(spec: RewardSpec, tests: Sequence[GradedTest], fail_to_pass: Sequence[str]) -> float:
    if spec.kind is RewardKind.BINARY:
        return 1.0 if all(t.outcome is Outcome.PASSED for t in tests) else 0.0
    if spec.kind is RewardKind.PASS_RATE:
        return _rate(tests)
    f2p_ids = set(fail_to_pass)
    f2p = [t for t in tests if t.id in f2p_ids]
    p2p = [t for t in tests if t.id not in f2p_ids]
    if not f2p or not p2p:
        return _rate(tests)
    return spec.f2p_weight * _rate(f2p) + (1 - spec.f2p_weight) * _rate(p2p)
