"""Editing Python source by AST position, so that everything but the edit keeps its formatting and comments.

AST columns count UTF-8 bytes, so edits are made on the encoded source. An edit that has to become an expression
is checked by parsing the result: where the text alone would parse to something else (operator precedence), it
is wrapped in parentheses.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Edit", "FunctionSpan", "apply_edits", "functions", "segment", "unparse_in_place"]


@dataclass(frozen=True)
class Edit:
    """Replace the source from (``line``, ``col``) to (``end_line``, ``end_col``) with ``text``. Lines count from
    1, columns are UTF-8 byte offsets from 0, as :mod:`ast` gives them."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str

    @classmethod
    def of(cls, node: ast.AST, text: str) -> Edit:
        """Replace what ``node`` spans."""
        return cls(node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0, text)  # type: ignore[attr-defined]


def _offsets(lines: Sequence[bytes]) -> list[int]:
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return starts


def apply_edits(source: str, edits: Sequence[Edit]) -> str:
    """``source`` with every edit made; edits must not overlap."""
    data = source.encode()
    starts = _offsets(data.splitlines(keepends=True))
    spans = sorted(
        ((starts[e.line - 1] + e.col, starts[e.end_line - 1] + e.end_col, e.text) for e in edits), reverse=True
    )
    for start, end, text in spans:
        data = data[:start] + text.encode() + data[end:]
    return data.decode()


def segment(source: str, node: ast.AST) -> str:
    """The exact source text ``node`` spans."""
    data = source.encode()
    starts = _offsets(data.splitlines(keepends=True))
    start = starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
    end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
    return data[start:end].decode()


def _shape(tree: ast.AST) -> str:
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def unparse_in_place(source: str, tree: ast.Module, node: ast.expr, replacement: ast.expr) -> str | None:
    """``source`` with the expression ``node`` (a node of ``tree``, the parse of ``source``) replaced by
    ``replacement``, written as :func:`ast.unparse` writes it, parenthesized where the context needs it; ``None``
    when the result would not be the module with that one node replaced (or does not parse)."""
    expected = _replaced(tree, node, replacement)
    text = ast.unparse(replacement)
    for candidate in (text, f"({text})"):
        edited = apply_edits(source, [Edit.of(node, candidate)])
        try:
            if _shape(ast.parse(edited)) == expected:
                return edited
        except SyntaxError:
            continue
    return None


def _replaced(tree: ast.Module, node: ast.AST, replacement: ast.AST) -> str:
    """The shape of ``tree`` with ``node`` swapped for ``replacement`` (the tree itself is left as it was)."""
    return _shape(_clone(tree, node, replacement))


def _clone(tree: ast.Module, node: ast.AST, replacement: ast.AST) -> ast.AST:
    """A copy of ``tree`` in which ``node`` is ``replacement`` (a deep copy loses identity, so the swap is made
    while copying)."""

    def copy_node(current: ast.AST) -> ast.AST:
        if current is node:
            return replacement
        fields: dict[str, Any] = {}
        for name, value in ast.iter_fields(current):
            if isinstance(value, ast.AST):
                fields[name] = copy_node(value)
            elif isinstance(value, list):
                fields[name] = [copy_node(v) if isinstance(v, ast.AST) else v for v in value]
            else:
                fields[name] = value
        return type(current)(**fields)

    return copy_node(tree)


@dataclass(frozen=True)
class FunctionSpan:
    """A function of a module: its qualified name (``Class.method``) and its definition node."""

    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef


def functions(tree: ast.Module) -> Iterator[FunctionSpan]:
    """The module's top-level functions and the methods of its top-level classes (and of classes nested in them)."""

    def walk(body: list[ast.stmt], prefix: str) -> Iterator[FunctionSpan]:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield FunctionSpan(prefix + node.name, node)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, f"{prefix}{node.name}.")

    yield from walk(tree.body, "")
