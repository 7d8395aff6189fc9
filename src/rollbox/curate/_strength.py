"""Test strength: which mutants of the reference to grade, and what their survival says.

Two findings, both ``weak_tests``:

- the kill ratio (the share of graded mutants the tests kill) below the threshold;
- a mutant that empties a whole branch (an ``if``'s or ``else``'s body, an ``except`` handler) or removes a
  ``raise`` survives: the statement promises behaviour (an error for bad input, a special case) that no test
  checks. This is a finding on its own, whatever the ratio: a task whose tests check the common path well and
  none of its promised errors has a high ratio and proves nothing about them. Every such mutant of the functions
  the reference changes is graded (up to ``max_mutants`` of them), beside ``max_mutants`` drawn evenly from the
  other operators.

Survivors are reported per function (``TaskReport.survivors``).
"""

from __future__ import annotations

from collections.abc import Sequence

from ._mutate import Mutant, Operator, mutants, sample_mutants
from ._reasons import Reason, ReasonCode
from ._reference import Reference
from ._report import MutantResult

__all__ = ["choose_mutants", "weak_reasons"]

_OTHERS = [operator for operator in Operator if operator is not Operator.REMOVED_BRANCH]


def choose_mutants(reference: Reference, max_mutants: int, *, seed: str) -> list[tuple[str, Mutant]]:
    """(path, mutant) to grade: every branch removal (up to ``max_mutants``, in source order), then up to
    ``max_mutants`` of the other operators' mutants, drawn evenly across them."""
    branches: list[tuple[str, Mutant]] = []
    others: list[tuple[str, Mutant]] = []
    for target in reference.targets:
        within = target.functions or None
        branches += [
            (target.path, m) for m in mutants(target.source, within=within, operators=[Operator.REMOVED_BRANCH])
        ]
        others += [(target.path, m) for m in mutants(target.source, within=within, operators=_OTHERS)]
    paths = {id(m): path for path, m in others}
    drawn = sample_mutants([m for _, m in others], max_mutants, seed=seed)
    return branches[:max_mutants] + [(paths[id(m)], m) for m in drawn]


def _unchecked(results: Sequence[MutantResult], fixed: bool) -> list[MutantResult]:
    """The surviving branch removals (those the written cases kill aside, when ``fixed``)."""
    return [
        m
        for m in results
        if m.operator == Operator.REMOVED_BRANCH.value and not m.killed and not (fixed and m.killed_by_generated)
    ]


def weak_reasons(
    results: Sequence[MutantResult],
    *,
    min_kill_ratio: float,
    kill_ratio_generated: float | None,
    fixed_file: str | None,
) -> list[Reason]:
    """The ``weak_tests`` findings of graded mutants (none when none were graded)."""
    if not results:
        return []
    reasons: list[Reason] = []
    ratio = sum(m.killed for m in results) / len(results)
    if ratio < min_kill_ratio:
        alive = [m for m in results if not m.killed]
        detail = (
            f"the tests kill {ratio:.0%} of {len(results)} mutants of the reference (threshold "
            f"{min_kill_ratio:.0%}); {len(alive)} survive, e.g. {alive[0].location}: {alive[0].description}"
        )
        if fixed_file and kill_ratio_generated is not None:
            if kill_ratio_generated < min_kill_ratio:
                reasons.append(
                    Reason(ReasonCode.WEAK_TESTS, detail + f"; with {fixed_file} {kill_ratio_generated:.0%}")
                )
        elif kill_ratio_generated is not None:
            detail += f"; generated cases would raise it to {kill_ratio_generated:.0%} (--fix writes them)"
            reasons.append(Reason(ReasonCode.WEAK_TESTS, detail))
        else:
            reasons.append(Reason(ReasonCode.WEAK_TESTS, detail))
    unchecked = _unchecked(results, fixed=fixed_file is not None)
    if unchecked:
        branches = sum(m.operator == Operator.REMOVED_BRANCH.value for m in results)
        shown = "; ".join(f"{m.path} {m.location}: {m.description}" for m in unchecked[:4])
        more = f"; and {len(unchecked) - 4} more" if len(unchecked) > 4 else ""
        reasons.append(
            Reason(
                ReasonCode.WEAK_TESTS,
                f"no test checks {len(unchecked)} of {branches} branches and raises of the reference: {shown}{more}",
            )
        )
    return reasons
