"""What the reference's runs say about each test: flaky, failing, or dependent on the order.

Runs are grouped by order (seed 0 the tests' own, see ``_variants``). Within one order a test's outcome must not
change: a test that passed and failed there is ``flaky``. Validation keeps running the reference in the tests' own
order while every run passed, up to ``steady_runs`` runs in all, so a test that fails a share ``p`` of its runs
goes unseen with probability ``(1 - p) ** steady_runs``; the first failure ends that, and the order it failed in
is run again to tell these apart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rollbox.judge import Outcome, Verdict, VerdictStatus

from ._variants import Variant

__all__ = ["RunFindings", "read_runs"]


@dataclass(frozen=True)
class RunFindings:
    """The tests the reference's runs single out (the original task's ids, sorted)."""

    #: Passed and failed on runs in one order.
    flaky: list[str]
    #: Not flaky, and failed on every run in the tests' own order.
    failing: list[str]
    #: Not flaky, passed on every run in the tests' own order, and failed on every run of another: that order's seed.
    order_dependent: dict[str, int]


def read_runs(runs: Mapping[int, Sequence[Verdict]], variants: Sequence[Variant]) -> RunFindings:
    """The findings of ``runs`` (verdicts by seed; ``variants[seed]`` maps the ids back), infra errors aside."""
    outcomes: dict[str, dict[int, list[bool]]] = {}
    for seed, verdicts in runs.items():
        for verdict in verdicts:
            if verdict.status is VerdictStatus.INFRA_ERROR:
                continue
            for graded in verdict.tests:
                ok = graded.outcome is Outcome.PASSED
                outcomes.setdefault(variants[seed].original(graded.id), {}).setdefault(seed, []).append(ok)
    flaky = sorted(t for t, by_seed in outcomes.items() if any(len(set(p)) > 1 for p in by_seed.values()))
    failing = sorted(t for t, s in outcomes.items() if t not in flaky and s.get(0) and not any(s[0]))
    order: dict[str, int] = {}
    for test, by_seed in sorted(outcomes.items()):
        if test not in flaky and by_seed.get(0) and all(by_seed[0]):
            bad = [seed for seed, passes in by_seed.items() if seed and not any(passes)]
            if bad:
                order[test] = bad[0]
    return RunFindings(flaky=flaky, failing=failing, order_dependent=order)
