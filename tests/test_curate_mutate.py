"""Mutation operators: each makes the bug it names, in place, with the rest of the module as it was."""

from __future__ import annotations

import ast

from rollbox.curate import Operator, mutants
from rollbox.curate._mutate import sample_mutants

SOURCE = '''"""A module."""

LIMIT = 3  # a comment that must survive


def window(xs, n):
    """Sum of the first n items, if there are enough."""
    total = 0
    for i in range(n):
        if i < len(xs) and xs[i] > 0:
            total += xs[i]
    return total - LIMIT


class Box:
    def fits(self, size):
        return size <= LIMIT
'''


def by(operator: Operator, **kwargs: object) -> list[str]:
    return [m.description for m in mutants(SOURCE, operators=[operator], **kwargs)]  # type: ignore[arg-type]


def test_every_operator_makes_its_kind_of_bug() -> None:
    assert "`i < len(xs)` became `i <= len(xs)`" in by(Operator.COMPARISON_FLIP)
    assert "`xs[i] > 0` became `xs[i] < 0`" in by(Operator.COMPARISON_FLIP)
    assert "`n` became `n + 1`" in by(Operator.OFF_BY_ONE)
    assert "`i` became `i - 1`" in by(Operator.OFF_BY_ONE)
    assert "`total - LIMIT` became `LIMIT - total`" in by(Operator.SWAPPED_ARGUMENTS)
    assert "`total += xs[i]` removed" in by(Operator.REMOVED_STATEMENT)
    assert "`3` became `4`" in by(Operator.CHANGED_CONSTANT)
    assert "`i < len(xs) and xs[i] > 0` became `i < len(xs) or xs[i] > 0`" in by(Operator.INVERTED_CONDITION)
    assert "`i < len(xs) and xs[i] > 0` became `not (i < len(xs) and xs[i] > 0)`" in by(Operator.INVERTED_CONDITION)
    assert "`total += xs[i]` became `total -= xs[i]`" in by(Operator.ARITHMETIC)


def test_mutants_keep_formatting_and_compile() -> None:
    found = mutants(SOURCE)
    assert len(found) > 25
    assert len({m.source for m in found}) == len(found)
    for mutant in found:
        compile(mutant.source, "<mutant>", "exec")
        assert "# a comment that must survive" in mutant.source or mutant.line == 3
        changed = [a for a, b in zip(SOURCE.splitlines(), mutant.source.splitlines(), strict=False) if a != b]
        assert len(changed) <= 1 or mutant.operator is Operator.REMOVED_STATEMENT, mutant.description


def test_docstrings_are_never_mutated() -> None:
    for mutant in mutants(SOURCE):
        assert '"""Sum of the first n items, if there are enough."""' in mutant.source
        assert ast.get_docstring(ast.parse(mutant.source)) == "A module."


def test_within_restricts_to_the_named_functions() -> None:
    only = mutants(SOURCE, within={"Box.fits"})
    assert only and {m.function for m in only} == {"Box.fits"}
    assert all(m.line >= 15 for m in only)


def test_precedence_is_kept_with_parentheses() -> None:
    (mutant,) = [m for m in mutants("x = a * b - c\n", operators=[Operator.OFF_BY_ONE])] or [None]
    assert mutant is None  # no index or range here
    found = [m.source for m in mutants("def f(a, i):\n    return a[i * 2]\n", operators=[Operator.OFF_BY_ONE])]
    assert "def f(a, i):\n    return a[i * 2 + 1]\n" in found
    swapped = [m.source for m in mutants("y = k * (a - b)\n", operators=[Operator.SWAPPED_ARGUMENTS])]
    assert "y = k * (b - a)\n" in swapped


def test_sampling_spreads_over_operators_and_is_stable() -> None:
    found = mutants(SOURCE)
    chosen = sample_mutants(found, 7, seed="task")
    assert len(chosen) == 7 and len({m.operator for m in chosen}) == 7
    assert [m.source for m in sample_mutants(found, 7, seed="task")] == [m.source for m in chosen]
