"""Constant expressions of test code, folded without running anything: literals, arithmetic on them, ``not``,
and the calls of builtins a caller allows (by default the empty containers ``set()``, ``frozenset()``, ``list()``,
``tuple()``, ``dict()``; ``str`` of a number where asked). Sizes are bounded, so that a hostile expression
(``9 ** 9 ** 9``) costs nothing.

One folder serves the judge (what a sealed assertion expects) and the HumanEval importer (which assertions become
cases): a constant means the same to both."""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["EMPTY_CONTAINERS", "UNFOLDABLE", "WITH_STR", "fold"]

#: What :func:`fold` returns for an expression that is not constant (``None`` is a constant).
UNFOLDABLE: Any = type("Unfoldable", (), {"__repr__": lambda self: "UNFOLDABLE"})()

_MAX_INT_BITS = 4096
_MAX_LENGTH = 100_000
_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_EMPTY = {"set": set, "frozenset": frozenset, "list": list, "tuple": tuple, "dict": dict}
#: The builtins :func:`fold` may call, by default: their names must mean the builtins where the expression is.
EMPTY_CONTAINERS = frozenset(_EMPTY)
#: ``str(NUMBER)`` beside them, for a caller that checked ``str`` is the builtin.
WITH_STR = EMPTY_CONTAINERS | {"str"}


def _small(value: Any) -> bool:
    if type(value) is int:
        return value.bit_length() <= _MAX_INT_BITS
    if type(value) in (str, bytes, list, tuple):
        return len(value) <= _MAX_LENGTH
    return type(value) in (float, complex)


def _arithmetic(op: type[ast.operator], left: Any, right: Any) -> Any:
    numbers = (int, float, complex)
    if type(left) in numbers and type(right) in numbers:
        if op is ast.Pow and (
            abs(right) > 64 or (type(left) is int and left.bit_length() * abs(right) > _MAX_INT_BITS)
        ):
            return UNFOLDABLE
        too_long = type(left) is int and type(right) is int and left.bit_length() + right.bit_length() > _MAX_INT_BITS
        if op is ast.Mult and too_long:
            return UNFOLDABLE
    elif op is ast.Add and type(left) is type(right) and type(left) in (str, bytes, list, tuple):
        pass
    elif op is ast.Mult and {type(left), type(right)} in ({str, int}, {bytes, int}, {list, int}, {tuple, int}):
        count = left if type(left) is int else right
        sequence = right if type(left) is int else left
        if len(sequence) * max(count, 0) > _MAX_LENGTH:
            return UNFOLDABLE
    else:
        return UNFOLDABLE
    try:
        value = _BINARY[op](left, right)
    except (ArithmeticError, ValueError, TypeError):
        return UNFOLDABLE
    return value if _small(value) else UNFOLDABLE


def fold(node: ast.expr, calls: frozenset[str] = EMPTY_CONTAINERS) -> Any:
    """The value of a constant expression, or :data:`UNFOLDABLE`; ``calls``: the builtins it may call
    (:data:`EMPTY_CONTAINERS` or :data:`WITH_STR`), which the caller has checked are not rebound.

    >>> fold(ast.parse("10 ** 6 + 1", mode="eval").body), fold(ast.parse("x + 1", mode="eval").body)
    (1000001, UNFOLDABLE)
    """
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = fold(node.left, calls), fold(node.right, calls)
        if left is UNFOLDABLE or right is UNFOLDABLE:
            return UNFOLDABLE
        return _arithmetic(type(node.op), left, right)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        operand = fold(node.operand, calls)
        return UNFOLDABLE if operand is UNFOLDABLE else not operand
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        operand = fold(node.operand, calls)
        if type(operand) not in (int, float, complex):
            return UNFOLDABLE
        return _UNARY[type(node.op)](operand)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in calls and not node.keywords:
        if node.func.id == "str":
            number = fold(node.args[0], calls) if len(node.args) == 1 else UNFOLDABLE
            return str(number) if type(number) in (int, float, bool) else UNFOLDABLE
        return _EMPTY[node.func.id]() if not node.args else UNFOLDABLE
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [fold(e, calls) for e in node.elts]
        if any(i is UNFOLDABLE for i in items) or any(isinstance(e, ast.Starred) for e in node.elts):
            return UNFOLDABLE
        kind: Callable[[list[Any]], Any] = {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)]
        try:
            return kind(items)
        except TypeError:  # an unhashable member of a set
            return UNFOLDABLE
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            return UNFOLDABLE
        keys = [fold(k, calls) for k in node.keys if k is not None]
        values = [fold(v, calls) for v in node.values]
        if any(x is UNFOLDABLE for x in (*keys, *values)):
            return UNFOLDABLE
        try:
            return dict(zip(keys, values, strict=True))
        except TypeError:
            return UNFOLDABLE
    if isinstance(node, ast.Constant) and node.value is not Ellipsis:
        return node.value
    return UNFOLDABLE
