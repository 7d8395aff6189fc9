"""The assertions a test function makes that sealing can take over (see :mod:`._seal`): what each compares, and
which of its sides is the expectation, the one side that can be sealed. Pure ``ast`` work."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from rollbox.tasks._constants import UNFOLDABLE, fold

__all__ = ["Assertion", "Sealable", "assertions"]

_OPERATORS: dict[type[ast.cmpop], str] = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}
#: The comparison with its sides swapped (``E < V`` is ``V > E``; ``E in V`` is ``V contains E``).
_SWAPPED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "in": "contains", "not in": "not contains"}
_EQUAL = ["assertEqual", "assertEquals", "assertListEqual", "assertTupleEqual", "assertDictEqual", "assertSetEqual"]
_UNITTEST = {
    **dict.fromkeys([*_EQUAL, "assertMultiLineEqual"], "=="),
    **dict.fromkeys(["assertNotEqual", "assertNotEquals"], "!="),
    "assertIs": "is",
    "assertIsNot": "is not",
    "assertIn": "in",
    "assertNotIn": "not in",
    "assertGreater": ">",
    "assertGreaterEqual": ">=",
    "assertLess": "<",
    "assertLessEqual": "<=",
    "assertAlmostEqual": "almost",
    "assertNotAlmostEqual": "not almost",
    "assertCountEqual": "count",
}


@dataclass
class Assertion:
    """An assertion that could be sealed: the value the test computed, the comparison, the expectation."""

    statement: ast.stmt
    value: ast.expr
    compare: str
    expected: ast.expr
    #: ``rel``/``abs`` of ``pytest.approx``, ``places``/``delta`` of ``assertAlmostEqual``: folded constants, kept
    #: exactly as written (an ``int`` stays one).
    options: dict[str, Any] = field(default_factory=dict)
    certain: bool = False


def _approx(node: ast.expr) -> tuple[ast.expr, dict[str, Any]] | None:
    """``E`` and the options of ``pytest.approx(E, rel=.., abs=..)`` with constant options, or None."""
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) in ("pytest.approx", "approx")):
        return None
    if len(node.args) != 1 or any(k.arg not in ("rel", "abs") for k in node.keywords):
        return None
    options = {str(k.arg): fold(k.value) for k in node.keywords}
    if not all(type(v) in (int, float) and v >= 0 for v in options.values()):
        return None
    return node.args[0], options


class Sealable:
    """Whether an expression can be sealed: a constant, or one of the names known to hold only one."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def __call__(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.names
        return fold(node) is not UNFOLDABLE


def _sides(first: ast.expr, second: ast.expr, compare: str, sealable: Sealable) -> Assertion | None:
    """The assertion with its expectation the one side that can be sealed, or None when not exactly one can."""
    if compare == "==":
        for value, other in ((first, second), (second, first)):
            approx = _approx(other)
            if approx is not None and sealable(approx[0]) and not sealable(value):
                return Assertion(ast.Pass(), value, "approx", approx[0], approx[1])
    if sealable(first) == sealable(second):
        return None
    if sealable(second):
        return Assertion(ast.Pass(), first, compare, second)
    return Assertion(ast.Pass(), second, _SWAPPED.get(compare, compare), first)


def _unittest(call: ast.Call, sealable: Sealable) -> Assertion | None:
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self"):
        return None
    compare = _UNITTEST.get(func.attr)
    if compare is None or len(call.args) < 2 or any(k.arg not in ("msg", "places", "delta") for k in call.keywords):
        return None
    found = _sides(call.args[0], call.args[1], compare, sealable)
    if found is None or compare not in ("almost", "not almost"):
        return found
    options = {str(k.arg): fold(k.value) for k in call.keywords if k.arg != "msg"}
    if len(call.args) > 2:
        options["places"] = fold(call.args[2])
    if not all(type(v) in (int, float) for v in options.values()):
        return None
    found.options = options
    return found


def _assertion(statement: ast.stmt, sealable: Sealable) -> Assertion | None:
    """The sealable comparison an assertion statement makes, or None."""
    found = None
    if isinstance(statement, ast.Assert) and isinstance(statement.test, ast.Compare):
        test = statement.test
        if len(test.ops) == 1 and type(test.ops[0]) in _OPERATORS:
            found = _sides(test.left, test.comparators[0], _OPERATORS[type(test.ops[0])], sealable)
    elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Call):
        found = _unittest(statement.value, sealable)
    if found is None or (found.compare in ("is", "is not") and not _singleton(found.expected)):
        return None
    found.statement = statement
    return found


def _singleton(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and (node.value is None or type(node.value) is bool)


def assertions(body: list[ast.stmt], sealable: Sealable, *, certain: bool = True) -> Iterator[Assertion]:
    """The sealable assertions of a test's body and its blocks (never ``try`` blocks, nested functions or
    classes), each marked certain when it is at the top of the body, where it runs whenever the test completes."""
    for statement in body:
        found = _assertion(statement, sealable)
        if found is not None:
            found.certain = certain
            yield found
        elif isinstance(statement, ast.If | ast.For | ast.AsyncFor | ast.While | ast.With | ast.AsyncWith):
            for block in (statement.body, getattr(statement, "orelse", [])):
                yield from assertions(block, sealable, certain=False)
