"""Literal ``pytest.mark.parametrize`` lists: their cases, the ids pytest gives them, and sealed columns.

A test's parametrize list puts its expected values in the test's locals, and pytest puts them in the test's id
(``test_add[1-2-3]``, which the test can read from ``PYTEST_CURRENT_TEST``). To seal a column, its values become
opaque tokens and every case gets an opaque id; the judge keeps what each token stands for, and the id pytest
would have given each case, worked out here as pytest works it out from literal values: ``str`` of a number,
``None`` or a bool, a printable ASCII string as it is, ``ARGNAME + index`` for anything else, joined with ``-``,
or the case's own id (``pytest.param(..., id=...)``, ``ids=[...]``). A list whose ids this cannot work out for
certain (other strings, duplicate ids, an ``ids`` function, marks on a case, indirect parametrization) is left
alone.

A table kept in a module constant (``@pytest.mark.parametrize("a, b", CASES)``, or ``CASES + MORE``) is written
into each decorator as a literal first (:func:`inline_tables`), and the constant taken out of the module, when
nothing else reads it: tests parametrized so are sealed as those written with a literal list.
"""

from __future__ import annotations

import ast
import copy
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollbox.tasks._constants import UNFOLDABLE, fold

__all__ = ["LiteralCases", "inline_tables", "literal_cases", "seal_columns"]

_PRINTABLE = frozenset(string.printable) - set("\\\t\n\r\x0b\x0c")
_MAX_ID_LENGTH = 100  # pytest's own limit for a string's id; longer ones depend on its configuration


@dataclass(frozen=True)
class LiteralCases:
    """A parametrize list of literal values."""

    argnames: tuple[str, ...]
    #: One tuple of values per case.
    values: tuple[tuple[Any, ...], ...]
    #: The id pytest gives each case.
    ids: tuple[str, ...]


def _is_parametrize(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func).endswith("mark.parametrize")


def _argnames(node: ast.expr) -> tuple[str, ...] | None:
    value = fold(node)
    if isinstance(value, str):
        names = tuple(n.strip() for n in value.split(",") if n.strip())
    elif isinstance(value, list | tuple) and all(isinstance(n, str) for n in value):
        names = tuple(value)
    else:
        return None
    return names if names and all(n.isidentifier() for n in names) else None


def _value_id(value: Any, argname: str, index: int) -> str | None:
    if value is None or type(value) in (bool, int, float, complex):
        return str(value)
    if type(value) is str:
        return _text_id(value)
    if type(value) is bytes:
        return None  # escaped by rules that depend on pytest's configuration
    return f"{argname}{index}"


def _text_id(value: Any) -> str | None:
    if type(value) is not str or not value or len(value) > _MAX_ID_LENGTH or not set(value) <= _PRINTABLE:
        return None
    return value


def _case(node: ast.expr, count: int) -> tuple[tuple[Any, ...], str | None] | None:
    """The values of one case, and its own id: a plain entry, or ``pytest.param(..., id="...")``."""
    own: str | None = None
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("param"):
        if any(k.arg != "id" for k in node.keywords) or any(isinstance(a, ast.Starred) for a in node.args):
            return None
        for keyword in node.keywords:
            own = _text_id(fold(keyword.value))
            if own is None:
                return None
        items = [fold(a) for a in node.args]
    elif count == 1:
        items = [fold(node)]
    elif isinstance(node, ast.Tuple | ast.List):
        items = [fold(e) for e in node.elts]
    else:
        return None
    if len(items) != count or any(i is UNFOLDABLE for i in items):
        return None
    return tuple(items), own


def literal_cases(decorator: ast.expr) -> LiteralCases | None:
    """The cases of ``@pytest.mark.parametrize(NAMES, VALUES[, ids=[...]])`` when everything in it is literal and its
    ids can be worked out for certain (see the module docstring); otherwise None."""
    if not _is_parametrize(decorator):
        return None
    assert isinstance(decorator, ast.Call)
    if len(decorator.args) != 2 or any(k.arg != "ids" for k in decorator.keywords):
        return None
    argnames = _argnames(decorator.args[0])
    listed = decorator.args[1]
    if argnames is None or not isinstance(listed, ast.List | ast.Tuple) or not listed.elts:
        return None
    given: list[Any] = []
    for keyword in decorator.keywords:
        given = fold(keyword.value)
        if not isinstance(given, list | tuple) or not all(i is None or _text_id(i) for i in given):
            return None
    values: list[tuple[Any, ...]] = []
    ids: list[str] = []
    for index, entry in enumerate(listed.elts):
        case = _case(entry, len(argnames))
        if case is None:
            return None
        items, own = case
        explicit = own if own is not None else (given[index] if index < len(given) else None)
        parts = [_value_id(v, n, index) for v, n in zip(items, argnames, strict=True)]
        if explicit is None and any(p is None for p in parts):
            return None
        values.append(items)
        ids.append(explicit if explicit is not None else "-".join(p for p in parts if p is not None))
    if len(set(ids)) != len(ids):
        return None  # pytest would add suffixes, or refuse them, depending on its configuration
    return LiteralCases(argnames, tuple(values), tuple(ids))


def inline_tables(tree: ast.Module, constants: Mapping[str, Any], keep: frozenset[str]) -> set[str]:
    """Write into each parametrize decorator of ``tree`` the literal value of the module constants (name ->
    value) its list is made of, where every read of each such constant is in such a list; return the constants
    inlined so, which nothing reads any more. Names in ``keep`` (other modules import them) are left alone."""
    reads: dict[str, list[ast.Name]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            reads.setdefault(node.id, []).append(node)
    tables: list[tuple[ast.Call, set[str], Any]] = []
    for node in ast.walk(tree):
        decorators = node.decorator_list if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else []
        for decorator in decorators:
            if not isinstance(decorator, ast.Call) or not _is_parametrize(decorator) or len(decorator.args) != 2:
                continue
            names = {n.id for n in ast.walk(decorator.args[1]) if isinstance(n, ast.Name)}
            if not names or not names <= set(constants) - keep:
                continue
            value = fold(_Substitute(constants).visit(copy.deepcopy(decorator.args[1])))
            if isinstance(value, list | tuple):
                tables.append((decorator, names, value))
    # A constant is inlined only where every read of it is in a table that is inlined; drop the others until none
    # is left half-read.
    inlined = {name for _, names, _ in tables for name in names}
    while True:
        inside = {id(n) for d, names, _ in tables if names <= inlined for n in ast.walk(d.args[1])}
        kept = {name for name in inlined if all(id(n) in inside for n in reads.get(name, ()))}
        if kept == inlined:
            break
        inlined = kept
    for decorator, names, value in tables:
        if names <= inlined:
            decorator.args[1] = _literal(value)
    return inlined


class _Substitute(ast.NodeTransformer):
    """Names of constants replaced by their literal values."""

    def __init__(self, constants: Mapping[str, Any]) -> None:
        self.constants = constants

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return _literal(self.constants[node.id]) if node.id in self.constants else node


def seal_columns(decorator: ast.Call, cases: LiteralCases, tokens: Mapping[int, list[str]]) -> dict[str, str]:
    """Put ``tokens`` (column index -> one token per case) in place of those columns' values in ``decorator``,
    rebuilt as a plain list of tuples with an opaque id per case; return each opaque id with the id pytest gives
    the case."""
    rows: list[ast.expr] = []
    for row, items in enumerate(cases.values):
        cells: list[ast.expr] = [
            ast.Constant(tokens[column][row]) if column in tokens else _literal(value)
            for column, value in enumerate(items)
        ]
        rows.append(cells[0] if len(cells) == 1 else ast.Tuple(cells, ast.Load()))
    opaque = [f"c{secrets.token_hex(6)}" for _ in cases.values]
    decorator.args[1] = ast.List(rows, ast.Load())
    decorator.keywords = [ast.keyword("ids", ast.List([ast.Constant(i) for i in opaque], ast.Load()))]
    return dict(zip(opaque, cases.ids, strict=True))


def _literal(value: Any) -> ast.expr:
    """An expression of ``value``, a value :func:`~._constants.fold` made."""
    if isinstance(value, list | tuple):
        return (ast.List if isinstance(value, list) else ast.Tuple)([_literal(v) for v in value], ast.Load())
    if isinstance(value, dict):
        return ast.Dict([_literal(k) for k in value], [_literal(v) for v in value.values()])
    if isinstance(value, set | frozenset):
        if not value:
            return ast.Call(ast.Name(type(value).__name__, ast.Load()), [], [])
        return ast.Set([_literal(v) for v in value])
    return ast.Constant(value)
