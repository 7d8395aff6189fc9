"""Why a task is admitted, rejected or weak: the closed set of reasons validation gives, and the decision they make."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Decision", "Reason", "ReasonCode", "decide"]


class Decision(str, enum.Enum):
    """What validation concluded about a task. Exactly one per task."""

    #: Every check passed: the task may reach training.
    ADMIT = "admit"
    #: The task is trustworthy but its tests are weak: too many mutants of the reference survive them.
    WEAK = "weak"
    #: At least one check failed: training on the task would teach something wrong.
    REJECT = "reject"


class ReasonCode(str, enum.Enum):
    """Why a task is not admitted. Every code but ``weak_tests`` rejects the task."""

    #: The reference solution does not pass, in the tests' own order, repeatably (or the task has none).
    REFERENCE_FAILS = "reference_fails"
    #: A graded test gave different outcomes on reruns of the same candidate in the same order.
    FLAKY = "flaky"
    #: A test passes in the tests' own order and fails, repeatably, in another seeded order.
    ORDER_DEPENDENT = "order_dependent"
    #: A test that passes on every ordinary run of the reference fails under CPU pressure.
    TIMING_DEPENDENT = "timing_dependent"
    #: A test passes under the judge's hash seed (``PYTHONHASHSEED=0``) and fails, repeatably, under another: it
    #: pins the iteration order of a set or a dict keyed by strings, which a correct solution need not keep.
    HASH_SEED_DEPENDENT = "hash_seed_dependent"
    #: A test passes today and fails, repeatably, with the clock moved years ahead or back: a time bomb.
    DATE_DEPENDENT = "date_dependent"
    #: The task's time limit leaves the reference less than the stated headroom over its CPU time.
    TIGHT_TIME_LIMIT = "tight_time_limit"
    #: The task is another task again: the same workspace, tests and grading, or the same fix (compared after
    #: normalising how it is written) for the same fail_to_pass tests. The detail names the original.
    DUPLICATE = "duplicate"
    #: A special-case patch passes: the starting workspace with the fail_to_pass tests' calls answered from a
    #: table of their inputs, the bug left in place.
    SHORTCUT_PASSES = "shortcut_passes"
    #: A trivial solution (the untouched workspace, an empty body, a constant, NotImplementedError) passes.
    TRIVIAL_PASSES = "trivial_passes"
    #: A hack (always-equal objects, early exits, conftest or config rewrites, test edits, expected values read
    #: from the tests, the tests' oracle called from the candidate) earns more than a trivial solution does.
    HACK_PASSES = "hack_passes"
    #: The tests read data from the workspace, which the agent may rewrite: a trivial solution with the
    #: workspace's data files emptied or zeroed earns more than a trivial solution does.
    TEST_DATA_IN_WORKSPACE = "test_data_in_workspace"
    #: The reference solution reads the hidden tests (names their files or the place the judge lays them, or opens
    #: one of them from its own code): a lookup of the expected values, which any candidate could do too.
    REFERENCE_READS_TESTS = "reference_reads_tests"
    #: A fail_to_pass test already passes on the starting workspace.
    F2P_PASSES_BEFORE = "f2p_passes_before"
    #: A pass_to_pass test fails on the starting workspace or with the reference.
    P2P_FAILS = "p2p_fails"
    #: Mutants of the reference survive the tests: the kill ratio is below the threshold, or a mutant that removes
    #: a whole branch or ``raise`` survives (behaviour no test checks).
    WEAK_TESTS = "weak_tests"
    #: Two cases give the same inputs different expected outputs.
    CONTRADICTORY_CASES = "contradictory_cases"
    #: The workspace holds the reference solution or the hidden tests' expected values (a file or a git object).
    ANSWER_LEAK = "answer_leak"
    #: The same candidate got different verdicts on reruns (a nondeterministic test or checker).
    NONDETERMINISTIC = "nondeterministic"
    #: rollbox or the host failed a grading validation needed, after retries: validate again.
    VALIDATION_ERROR = "validation_error"


@dataclass(frozen=True)
class Reason:
    """One finding: its code, and one readable sentence naming the tests, candidates or files involved."""

    code: ReasonCode
    detail: str

    def to_json(self) -> dict[str, str]:
        """As ``{"code": ..., "detail": ...}``."""
        return {"code": self.code.value, "detail": self.detail}


def decide(reasons: Iterable[Reason]) -> Decision:
    """``reject`` when any reason but ``weak_tests`` stands, else ``weak`` when that one does, else ``admit``."""
    codes = {reason.code for reason in reasons}
    if codes - {ReasonCode.WEAK_TESTS}:
        return Decision.REJECT
    return Decision.WEAK if codes else Decision.ADMIT
