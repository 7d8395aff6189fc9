"""What the reference's runs say about each test: flaky, failing, or dependent on a condition of the run.

Each run of the reference has a :class:`Condition`: the order of the tests (seed 0 the tests' own, see
``_variants``), the hash seed (``PYTHONHASHSEED``; the judge's is 0) and the clock (moved by an offset, see
``_clock``). The judge's own condition is the baseline. Within one condition a test's outcome must not change: a
test that passed and failed there is ``flaky``. A run that died (a signal, an exit: the sandbox's status of it, not a
limit's) died in the test it was running (the verdict's ``running``): that test did not pass there, as if it had
failed, so one that kills its own process now and then is ``flaky``, and one that kills it on every run of a
condition fails there. The tests after it never ran, and a run a limit cut short is no finding about the test it was
in (where a limit falls moves with the machine's load). A test that passed on every baseline run and failed on every
run of another condition depends on what that condition changes. Otherwise only what was observed counts: a test
that never reported is neither a pass nor a failure, so a run cut short makes no test failing, flaky or dependent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rollbox.judge import Outcome, Verdict, VerdictStatus

from ._variants import Variant
from ._verdicts import cut_by_a_limit

__all__ = ["BASELINE", "Condition", "RunFindings", "died_in", "read_runs"]


@dataclass(frozen=True, order=True)
class Condition:
    """What one run of the reference varies from the judge's own grading; at most one thing at a time."""

    #: The tests' order: 0 their own, 1 reversed, ``k`` a shuffle drawn from ``k``.
    order: int = 0
    #: ``PYTHONHASHSEED`` (the judge grades under 0).
    hash_seed: int = 0
    #: The clock's offset as libfaketime writes it (``+3750d``); empty: the real clock.
    clock: str = ""

    def describe(self) -> str:
        """The condition in words."""
        if self.clock:
            days = int(self.clock.rstrip("d"))
            return f"the clock moved {abs(days)} days {'ahead' if days > 0 else 'back'} ({self.clock})"
        if self.hash_seed:
            return f"PYTHONHASHSEED={self.hash_seed} (the judge grades under 0)"
        if self.order == 1:
            return "reversed order (seed 1)"
        return f"shuffled order {self.order} (seed {self.order})" if self.order else "the judge's own run"


#: The judge's own grading: the tests' order, hash seed 0, the real clock.
BASELINE = Condition()


@dataclass(frozen=True)
class RunFindings:
    """The tests the reference's runs single out (the original task's ids, sorted)."""

    #: Passed on runs of one condition, and failed, or died (see :func:`died_in`), on others of it.
    flaky: list[str]
    #: Not flaky, and failed on every baseline run that reported it.
    failing: list[str]
    #: Not flaky, passed on every baseline run, and failed on every run of another condition that reported it:
    #: the first such condition.
    dependent: dict[str, Condition]
    #: Expected on a baseline run but never reported on any (the run ended before them).
    missing: list[str]


def died_in(verdict: Verdict) -> str | None:
    """The test a run died in (as the run named it): the one it was running when a signal or an exit ended it; not a
    limit, which says where the limit fell, and none when it died between tests or the runner cannot tell."""
    if verdict.status is VerdictStatus.INFRA_ERROR or cut_by_a_limit(verdict):
        return None
    return verdict.running


def read_runs(runs: Mapping[Condition, Sequence[Verdict]], variants: Sequence[Variant]) -> RunFindings:
    """The findings of ``runs`` (verdicts by condition; ``variants[order]`` maps the ids back), infra errors
    aside."""
    outcomes: dict[str, dict[Condition, list[bool]]] = {}
    expected: set[str] = set()
    for condition, verdicts in runs.items():
        for verdict in verdicts:
            if verdict.status is VerdictStatus.INFRA_ERROR:
                continue
            culprit = died_in(verdict)
            for graded in verdict.tests:
                test = variants[condition.order].original(graded.id)
                if condition == BASELINE:
                    expected.add(test)
                if graded.outcome is Outcome.MISSING and graded.id != culprit:
                    continue  # it never ran (or a limit cut it short): nothing was observed
                ok = graded.outcome is Outcome.PASSED
                outcomes.setdefault(test, {}).setdefault(condition, []).append(ok)
    flaky = sorted(t for t, by in outcomes.items() if any(len(set(seen)) > 1 for seen in by.values()))
    failing = sorted(t for t, by in outcomes.items() if t not in flaky and by.get(BASELINE) and not any(by[BASELINE]))
    dependent: dict[str, Condition] = {}
    for test, by in sorted(outcomes.items()):
        if test not in flaky and by.get(BASELINE) and all(by[BASELINE]):
            bad = sorted(c for c, seen in by.items() if c != BASELINE and not any(seen))
            if bad:
                dependent[test] = bad[0]
    missing = sorted(t for t in expected if BASELINE not in outcomes.get(t, {}))
    return RunFindings(flaky=flaky, failing=failing, dependent=dependent, missing=missing)
