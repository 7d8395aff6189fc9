"""The variants of a task's ``check(candidate)``: the real check and its must-fail canaries (see ``_check``).

A canary is a copy of the check with one expectation changed so that honest code passing the real check fails
it: a literal replaced by another of its type, sign and count of significant digits, a tolerance's target moved
the same way, or else the one opposite assertion. Only assertions that certainly run when the check completes
are mutated. Pure ``ast`` work: nothing here runs anything.
"""

from __future__ import annotations

import ast
import copy
import math
import secrets
import string
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

__all__ = ["CheckVariant", "check_variants", "imported_modules"]

_RANDOM = secrets.SystemRandom()
_CANARIES = 2
#: The most variants :func:`check_variants` gives: the real check and its canaries.
MAX_VARIANTS = 1 + _CANARIES
_TEXT_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits, string.punctuation)


@dataclass(frozen=True)
class CheckVariant:
    """One check module sent to a driver: the task's own check, or a canary derived from it."""

    id: str
    source: str
    canary: bool


# -- deriving canaries ------------------------------------------------------------------------------------------


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


_NOT_LITERAL = object()


def _resembling_number(value: int | float, beyond: float = 0.0) -> int | float | None:
    """A number of ``value``'s type, sign and count of significant digits, in its decade when it can be, more
    than ``beyond`` away from it (``None`` for an infinite or NaN float): 0.33 becomes 0.87, 1e-06 becomes 4e-06."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    count = len(digits) if value else 1
    low, high = 10 ** (count - 1), 10**count - 1
    for shift in range(400):  # up a decade when ``beyond`` leaves no room in this one
        for _ in range(32):
            mantissa = _RANDOM.randint(low, high)
            if count > 1 and mantissa % 10 == 0:
                continue  # a trailing zero would drop a significant digit
            other = type(value)(Decimal(f"{'-' if sign else ''}{mantissa}e{exponent + shift}"))
            if isinstance(other, float) and not math.isfinite(other):
                return None
            if other != value and abs(other - value) > beyond:
                return other
    return None


def _resembling_text(value: str) -> str | None:
    """``value`` with one character replaced by another of its class (a letter of the same case, a digit, ...)."""
    spots = [(at, pool) for at, char in enumerate(value) for pool in _TEXT_CLASSES if char in pool]
    if not spots:
        return None
    at, pool = _RANDOM.choice([s for s in spots if s[1] is not string.punctuation] or spots)
    return value[:at] + _RANDOM.choice([c for c in pool if c != value[at]]) + value[at + 1 :]


def _mutated(value: Any) -> Any:
    """A value of the same type and look that no value equal to ``value`` can equal (or _NOT_LITERAL)."""
    kind = type(value)
    other: Any = None
    if kind is bool:
        other = not value
    elif kind in (int, float):
        other = _resembling_number(value)
    elif kind is str:
        other = _resembling_text(value)
    elif kind in (list, tuple, dict):
        keys = list(value) if kind is dict else list(range(len(value)))
        _RANDOM.shuffle(keys)
        for key in keys:
            item = _mutated(value[key])
            if item is not _NOT_LITERAL:
                return {**value, key: item} if kind is dict else kind([*value[:key], item, *value[key + 1 :]])
    return _NOT_LITERAL if other is None else other


def _literal_node(value: Any) -> ast.expr:
    return ast.parse(repr(value), mode="eval").body


def _expected(node: ast.expr) -> tuple[Any, ast.expr | None]:
    """The literal an expected value is spelled with, and the ``tuple(...)``/``list(...)`` call around it if any."""
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(node, ast.Call) and isinstance(func, ast.Name) and func.id in ("tuple", "list"):
        inner = _literal(node.args[0]) if len(node.args) == 1 and not node.keywords else _NOT_LITERAL
        return (inner, node) if type(inner) in (list, tuple) else (_NOT_LITERAL, None)
    return _literal(node), None


def _respelled(value: Any, call: ast.expr | None) -> ast.expr:
    if call is None:
        return _literal_node(value)
    wrapped = copy.deepcopy(call)
    assert isinstance(wrapped, ast.Call)
    wrapped.args = [_literal_node(value)]
    return wrapped


def _retarget(test: ast.expr) -> ast.expr | None:
    """``test`` with its expected value replaced by one it cannot share (None when it has no literal one)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    # New nodes along the changed path only: the rest is shared with ``test`` (unparsed, never changed).
    if isinstance(op, ast.Eq):
        for node, on_right in ((right, True), (left, False)):
            value, call = _expected(node)
            other = _NOT_LITERAL if value is _NOT_LITERAL else _mutated(value)
            if other is not _NOT_LITERAL:
                spelled = _respelled(other, call)
                sides = (left, spelled) if on_right else (spelled, right)
                return ast.Compare(left=sides[0], ops=test.ops, comparators=[sides[1]])
        return None
    # abs(X - TARGET) < TOL (or TARGET - X): move TARGET by more than three times the tolerance.
    if not (isinstance(op, ast.Lt | ast.LtE) and isinstance(left, ast.Call) and len(left.args) == 1):
        return None
    tolerance, inner = _literal(right), left.args[0]
    if ast.unparse(left.func) not in ("abs", "math.fabs") or type(tolerance) not in (int, float):
        return None
    if not (0 < tolerance < 1e15 and isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub)):
        return None
    for attribute in ("right", "left"):
        target = _literal(getattr(inner, attribute))
        if type(target) in (int, float):
            moved = _resembling_number(target, beyond=3 * tolerance)
            if moved is None:
                return None
            difference = ast.BinOp(left=inner.left, op=inner.op, right=inner.right)
            setattr(difference, attribute, _literal_node(moved))
            call = ast.Call(func=left.func, args=[difference], keywords=left.keywords)
            return ast.Compare(left=call, ops=test.ops, comparators=test.comparators)
    return None


_OPPOSITE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
}


def _flipped(test: ast.expr) -> ast.expr:
    """The one opposite of ``test``: ``is True``/``is False``, then the opposite operator, else negation."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and type(right.value) is bool:
            return ast.Compare(left=test.left, ops=[op], comparators=[ast.Constant(not right.value)])
        if type(op) in _OPPOSITE:
            return ast.Compare(left=test.left, ops=[_OPPOSITE[type(op)]()], comparators=test.comparators)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _names(nodes: Iterable[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _tainted(function: ast.FunctionDef) -> set[str]:
    """The candidate's parameter, and every name the check assigns (or mutates) from a value that uses one."""
    flows: list[tuple[set[str], ast.AST]] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            flows.append((_names(node.targets), node.value))
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            flows.append((_names([node.target]), node.value))
        elif isinstance(node, ast.For | ast.comprehension):
            flows.append((_names([node.target]), node.iter))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # results.append(...)
            flows.append((_names([node.func.value]), node))
    tainted = {function.args.args[0].arg}
    grown = True
    while grown:
        grown = False
        for targets, value in flows:
            if not targets <= tainted and _names([value]) & tainted:
                tainted |= targets
                grown = True
    return tainted


def _jumps(nodes: Sequence[ast.stmt], kinds: tuple[type, ...]) -> bool:
    """Whether any of ``kinds`` occurs in ``nodes`` outside nested functions and classes."""
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, kinds):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _nonempty_range(node: ast.expr) -> bool:
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "range" and not node.keywords):
        return False
    bounds = [_literal(a) for a in node.args]
    if not 1 <= len(bounds) <= 3 or any(type(b) is not int for b in bounds):
        return False
    try:
        return len(range(*bounds)) > 0
    except ValueError:  # a zero step
        return False


def _certain_asserts(body: Sequence[ast.stmt], tainted: set[str]) -> Iterator[ast.Assert]:
    """Assertions that use the candidate's results and surely run whenever the check completes."""
    for statement in body:
        if isinstance(statement, ast.Assert):
            if _names([statement.test]) & tainted:
                yield statement
        elif (
            isinstance(statement, ast.For)
            and _nonempty_range(statement.iter)
            and not _jumps(statement.body, (ast.Break, ast.Continue, ast.Return))
        ):
            yield from _certain_asserts(statement.body, tainted)
        if _jumps([statement], (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
            return


def _canaries(tree: ast.Module) -> list[str]:
    """Up to two distinct canary sources: retargeted expectations where there are any, else flipped assertions."""
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks or not checks[-1].args.args:
        return []
    spots = list(_certain_asserts(checks[-1].body, _tainted(checks[-1])))
    retargetable = [s for s in spots if _retarget(s.test) is not None]
    if retargetable:
        tries = [(s, _retarget(s.test)) for s in _RANDOM.choices(retargetable, k=4 * _CANARIES)]
    else:
        tries = [(s, _flipped(s.test)) for s in _RANDOM.sample(spots, min(_CANARIES, len(spots)))]
    real, canaries = ast.unparse(tree), list[str]()
    for spot, test in tries:
        if test is None or len(canaries) == _CANARIES:
            continue
        original, spot.test = spot.test, test
        canary = ast.unparse(tree)
        spot.test = original
        if canary != real and canary not in canaries:
            canaries.append(canary)
    return canaries


def check_variants(source: str) -> list[CheckVariant]:
    """The task's check and its must-fail canaries, each under a fresh random id, in random order.

    All variants are printed by :func:`ast.unparse` alike, so that only the changed expectation tells them
    apart. A source that does not parse gives the real check alone (it will fail to load: an error); so does a
    check without an assertion that surely runs and uses the candidate's results.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [CheckVariant(secrets.token_hex(8), source, canary=False)]
    variants = [CheckVariant(secrets.token_hex(8), ast.unparse(tree), canary=False)]
    variants += [CheckVariant(secrets.token_hex(8), c, canary=True) for c in _canaries(tree)]
    _RANDOM.shuffle(variants)
    return variants


def imported_modules(source: str) -> list[str]:
    """The absolute modules a check imports anywhere (the driver imports and watches them before the candidate)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return sorted(names)


# -- running them -----------------------------------------------------------------------------------------------

#: Lists the regular files under the working directory (/workspace) with their modes, and its symbolic links with
#: their targets, as JSON on stdout. It runs before any of the candidate's code, and isolated from it (-I: neither
#: the working directory nor PYTHON* variables), so its answer is rollbox's own.
