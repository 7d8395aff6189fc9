"""The constant folder the judge's seals and the HumanEval importer share: what it folds is what Python evaluates,
and a hostile expression is refused before it is computed."""

from __future__ import annotations

import ast
import math
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from rollbox.tasks._constants import EMPTY_CONTAINERS, UNFOLDABLE, WITH_STR, fold

_ATOMS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(repr),
    st.floats(allow_nan=False).map(repr),
    st.sampled_from(["1e999", "-1e999", "0.1", "-0.0", "2j", "True", "False", "None"]),
    st.text(max_size=5).map(repr),
    st.binary(max_size=5).map(repr),
    st.sampled_from(["set()", "list()", "tuple()", "dict()", "frozenset()", "str(7)", "str(-0.5)", "str(True)"]),
)


def _expressions(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    binary = st.tuples(children, st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]), children)
    return st.one_of(
        binary.map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        children.map(lambda c: f"(-{c})"),
        children.map(lambda c: f"(not {c})"),
        st.lists(children, max_size=3).map(lambda items: f"[{', '.join(items)}]"),
        st.lists(children, min_size=1, max_size=3).map(lambda items: f"({', '.join(items)},)"),
    )


EXPRESSIONS = st.recursive(_ATOMS, _expressions, max_leaves=8)


def _same(folded: Any, evaluated: Any) -> bool:
    if type(folded) is not type(evaluated):
        return False
    if isinstance(folded, float):
        return repr(folded) == repr(evaluated) or (math.isnan(folded) and math.isnan(evaluated))
    if isinstance(folded, complex):  # each part as a float: nan is never equal to itself (1e999 * 2j)
        return _same(folded.real, evaluated.real) and _same(folded.imag, evaluated.imag)
    if isinstance(folded, list | tuple):
        return len(folded) == len(evaluated) and all(_same(a, b) for a, b in zip(folded, evaluated, strict=True))
    return bool(folded == evaluated)


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS)
@example("(1e999 * 2j)")  # a complex with a nan part
def test_what_is_folded_is_what_python_evaluates(source: str) -> None:
    node = ast.parse(source, mode="eval").body
    folded = fold(node, WITH_STR)
    if folded is UNFOLDABLE:
        return  # refused: the expression stays in the test, to be run where it was written
    assert _same(folded, eval(source)), (source, folded)  # constants the strategy wrote


def test_only_the_calls_a_caller_allows_are_folded() -> None:
    node = ast.parse("str(7)", mode="eval").body
    assert fold(node, WITH_STR) == "7" and fold(node, EMPTY_CONTAINERS) is UNFOLDABLE and fold(node) is UNFOLDABLE
    for source in ("str('x')", "str(7, 8)", "str(x=7)", "set([1])", "len('ab')", "x + 1", "str(f())"):
        assert fold(ast.parse(source, mode="eval").body, WITH_STR) is UNFOLDABLE, source


def test_a_hostile_expression_is_refused_before_it_is_computed() -> None:
    # Computed, any of these would hold the test past its timeout (or fill the memory).
    for source in ("9 ** 9 ** 9", "'x' * 10 ** 12", "[0] * 10 ** 9", "(2 ** 4000) * (2 ** 4000)", "10 ** 5000"):
        assert fold(ast.parse(source, mode="eval").body, WITH_STR) is UNFOLDABLE, source
