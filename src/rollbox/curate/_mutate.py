"""Mutants: small, plausible bugs made by AST operators, written back into the source with its formatting kept.

The same operators measure a task's test strength (mutants of the reference its tests must kill) and make new
tasks (bugs injected into real packages). Each mutant changes one place of one module and still compiles.

    >>> [m.description for m in mutants("def f(a, b):\\n    return a < b\\n", operators=[Operator.COMPARISON_FLIP])]
    ['`a < b` became `a <= b`', '`a < b` became `a > b`']
"""

from __future__ import annotations

import ast
import enum
import random
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from ._source import Edit, apply_edits, functions, segment, unparse_in_place

__all__ = ["Mutant", "Operator", "mutants", "sample_mutants"]


class Operator(str, enum.Enum):
    """How a mutant differs from the original."""

    #: A comparison made non-strict or strict, reversed, or negated (``<`` -> ``<=``, ``>``; ``==`` -> ``!=``).
    COMPARISON_FLIP = "comparison_flip"
    #: An index, slice bound or ``range`` argument one higher or lower.
    OFF_BY_ONE = "off_by_one"
    #: A call's first two arguments, or a non-commutative operator's operands, swapped.
    SWAPPED_ARGUMENTS = "swapped_arguments"
    #: A statement removed (or replaced by ``pass`` when it was the only one).
    REMOVED_STATEMENT = "removed_statement"
    #: A number one higher or lower, a boolean flipped, a string emptied.
    CHANGED_CONSTANT = "changed_constant"
    #: An ``if``, ``while`` or conditional expression's test negated, or ``and`` and ``or`` exchanged.
    INVERTED_CONDITION = "inverted_condition"
    #: An arithmetic operator exchanged for its counterpart (``+`` and ``-``, ``*`` and ``//``, ...).
    ARITHMETIC = "arithmetic"
    #: A whole branch emptied (an ``if``'s or ``else``'s body, an ``except`` handler's), or a ``raise`` removed:
    #: behaviour a statement promises, which a test that checks it notices.
    REMOVED_BRANCH = "removed_branch"


@dataclass(frozen=True)
class Mutant:
    """One mutant of one module."""

    operator: Operator
    #: The line of the change (1-based).
    line: int
    #: The function the change is in (``Class.method``), or ``""`` at module level.
    function: str
    #: What changed, in one phrase.
    description: str
    #: The whole mutated module.
    source: str

    @property
    def location(self) -> str:
        """``line N`` with the function's name, when there is one."""
        return f"line {self.line}" + (f" in {self.function}" if self.function else "")


_FLIPS: dict[type[ast.cmpop], tuple[type[ast.cmpop], ...]] = {
    ast.Lt: (ast.LtE, ast.Gt),
    ast.LtE: (ast.Lt, ast.GtE),
    ast.Gt: (ast.GtE, ast.Lt),
    ast.GtE: (ast.Gt, ast.LtE),
    ast.Eq: (ast.NotEq,),
    ast.NotEq: (ast.Eq,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
}
_ARITHMETIC: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}
_NON_COMMUTATIVE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift, ast.MatMult)
#: Builtins whose first two arguments may be swapped without changing anything.
_SYMMETRIC_CALLS = frozenset({"max", "min", "print", "set", "frozenset"})
_SKIPPED_STATEMENTS = (ast.Pass, ast.Global, ast.Nonlocal, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)

#: A site: its operator, line, description, and how to make the mutated source (``None``: it cannot be made).
_Site = tuple[Operator, int, str, Callable[[], str | None]]


def _short(source: str, node: ast.AST, limit: int = 60) -> str:
    text = " ".join(segment(source, node).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: int | float, delta: int) -> ast.expr:
    result = value + delta
    return ast.UnaryOp(ast.USub(), ast.Constant(-result)) if result < 0 else ast.Constant(result)


def _plus(node: ast.expr, delta: int) -> ast.expr:
    """``node + 1`` or ``node - 1``; a number directly."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return _number(node.value, delta)
    return ast.BinOp(node, ast.Add() if delta > 0 else ast.Sub(), ast.Constant(abs(delta)))


class _Sites(ast.NodeVisitor):
    """Every place an operator applies, within the chosen functions (all of the module when none are chosen)."""

    def __init__(self, source: str, tree: ast.Module, within: Collection[str] | None) -> None:
        self.source, self.tree = source, tree
        self.sites: list[_Site] = []
        self.spans: dict[int, str] = {}
        self.function = ""
        self.active = within is None
        self.within = within
        self.skip: set[int] = set()  # ids of nodes never mutated: docstrings, annotations, f-string parts

    def run(self) -> list[_Site]:
        self.spans = {id(span.node): span.qualname for span in functions(self.tree)}
        self._mark_skipped(self.tree)
        self.visit(self.tree)
        return self.sites

    def _mark_skipped(self, tree: ast.AST) -> None:
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body:
                first = body[0]
                if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                    self.skip.update(id(n) for n in ast.walk(first))
            annotations: list[ast.AST | None] = []
            if isinstance(node, ast.arg):
                annotations.append(node.annotation)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                annotations.append(node.returns)
                annotations += node.decorator_list
            elif isinstance(node, ast.AnnAssign):
                annotations.append(node.annotation)
            elif isinstance(node, ast.ClassDef):
                annotations += node.decorator_list
            elif isinstance(node, ast.JoinedStr):
                annotations.append(node)
            for annotation in annotations:
                if annotation is not None:
                    self.skip.update(id(n) for n in ast.walk(annotation))

    def visit(self, node: ast.AST) -> None:
        if id(node) in self.skip:
            return
        qualname = self.spans.get(id(node))
        if qualname is None:
            if self.active:
                self._sites(node)
            super().generic_visit(node)
            return
        outer = (self.function, self.active)
        self.function = qualname
        self.active = self.within is None or qualname in self.within
        if self.active:
            self._sites(node)
        super().generic_visit(node)
        self.function, self.active = outer

    def _add(self, operator: Operator, node: ast.AST, description: str, make: Callable[[], str | None]) -> None:
        self.sites.append((operator, node.lineno, description, make))  # type: ignore[attr-defined]

    def _expression(self, operator: Operator, node: ast.expr, replacement: ast.expr) -> None:
        before, after = _short(self.source, node), ast.unparse(replacement)
        if before != after:
            self._add(
                operator,
                node,
                f"`{before}` became `{after}`",
                lambda: unparse_in_place(self.source, self.tree, node, replacement),
            )

    def _sites(self, node: ast.AST) -> None:
        if isinstance(node, ast.Compare):
            for index, op in enumerate(node.ops):
                for flipped in _FLIPS.get(type(op), ()):
                    ops = list(node.ops)
                    ops[index] = flipped()
                    self._expression(Operator.COMPARISON_FLIP, node, ast.Compare(node.left, ops, node.comparators))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            bounds = [node.slice] if not isinstance(node.slice, ast.Slice) else [node.slice.lower, node.slice.upper]
            for bound in bounds:
                if bound is not None and not isinstance(bound, ast.Tuple) and id(bound) not in self.skip:
                    for delta in (1, -1):
                        self._expression(Operator.OFF_BY_ONE, bound, _plus(bound, delta))
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "range":
                for argument in node.args:
                    if not isinstance(argument, ast.Starred):
                        for delta in (1, -1):
                            self._expression(Operator.OFF_BY_ONE, argument, _plus(argument, delta))
            positional = node.args
            symmetric = isinstance(node.func, ast.Name) and node.func.id in _SYMMETRIC_CALLS
            if len(positional) >= 2 and not symmetric and not any(isinstance(a, ast.Starred) for a in positional[:2]):
                first, second = positional[0], positional[1]
                if segment(self.source, first) != segment(self.source, second):
                    self._swap(node, first, second)
        elif isinstance(node, ast.BinOp):
            if isinstance(node.op, _NON_COMMUTATIVE) and ast.dump(node.left) != ast.dump(node.right):
                self._expression(Operator.SWAPPED_ARGUMENTS, node, ast.BinOp(node.right, node.op, node.left))
            counterpart = _ARITHMETIC.get(type(node.op))
            if counterpart is not None:
                self._expression(Operator.ARITHMETIC, node, ast.BinOp(node.left, counterpart(), node.right))
        elif isinstance(node, ast.AugAssign):
            counterpart = _ARITHMETIC.get(type(node.op))
            if counterpart is not None:
                mutated = ast.AugAssign(node.target, counterpart(), node.value)
                text = ast.unparse(mutated)
                self._add(
                    Operator.ARITHMETIC,
                    node,
                    f"`{_short(self.source, node)}` became `{text}`",
                    lambda: apply_edits(self.source, [Edit.of(node, text)]),
                )
        elif isinstance(node, ast.Constant):
            self._constant(node)
        elif isinstance(node, ast.If | ast.While | ast.IfExp):
            test = node.test
            inverted = test.operand if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) else None
            self._expression(Operator.INVERTED_CONDITION, test, inverted or ast.UnaryOp(ast.Not(), test))
        elif isinstance(node, ast.BoolOp):
            other = ast.Or() if isinstance(node.op, ast.And) else ast.And()
            self._expression(Operator.INVERTED_CONDITION, node, ast.BoolOp(other, node.values))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.For | ast.While | ast.If | ast.With | ast.Try):
            for body in (getattr(node, "body", []), getattr(node, "orelse", []), getattr(node, "finalbody", [])):
                self._removals(body)
        self._branches(node)

    def _branches(self, node: ast.AST) -> None:
        if isinstance(node, ast.If):
            test = _short(self.source, node.test)
            self._emptied(node.body, f"the branch `if {test}:` emptied")
            if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):  # not an elif
                self._emptied(node.orelse, f"the `else` of `if {test}:` emptied")
        elif isinstance(node, ast.ExceptHandler):
            caught = f" {_short(self.source, node.type)}" if node.type is not None else ""
            self._emptied(node.body, f"the handler `except{caught}:` emptied")
        elif isinstance(node, ast.Raise):
            self._add(
                Operator.REMOVED_BRANCH,
                node,
                f"`{_short(self.source, node)}` removed",
                lambda: apply_edits(self.source, [Edit.of(node, "pass")]),
            )

    def _emptied(self, body: list[ast.stmt], description: str) -> None:
        if not body or all(isinstance(s, ast.Pass) for s in body):
            return
        first, last = body[0], body[-1]
        edit = Edit(first.lineno, first.col_offset, last.end_lineno or last.lineno, last.end_col_offset or 0, "pass")
        self.sites.append(
            (Operator.REMOVED_BRANCH, first.lineno, description, lambda: apply_edits(self.source, [edit]))
        )

    def _constant(self, node: ast.Constant) -> None:
        value = node.value
        if type(value) is bool:
            self._expression(Operator.CHANGED_CONSTANT, node, ast.Constant(not value))
        elif type(value) is int:
            for delta in (1, -1):
                self._expression(Operator.CHANGED_CONSTANT, node, _number(value, delta))
        elif type(value) is float:
            self._expression(Operator.CHANGED_CONSTANT, node, _number(value, 1))
        elif type(value) is str:
            self._expression(Operator.CHANGED_CONSTANT, node, ast.Constant("" if value else "x"))

    def _swap(self, call: ast.Call, first: ast.expr, second: ast.expr) -> None:
        a, b = segment(self.source, first), segment(self.source, second)
        description = f"`{_short(self.source, call)}`: its first two arguments swapped"
        self._add(
            Operator.SWAPPED_ARGUMENTS,
            call,
            description,
            lambda: apply_edits(self.source, [Edit.of(first, b), Edit.of(second, a)]),
        )

    def _removals(self, body: list[ast.stmt]) -> None:
        statements = [s for s in body if id(s) not in self.skip and not isinstance(s, _SKIPPED_STATEMENTS)]
        for statement in statements:
            only = len([s for s in body if id(s) not in self.skip]) == 1
            self._add(
                Operator.REMOVED_STATEMENT,
                statement,
                f"`{_short(self.source, statement)}` removed",
                lambda s=statement, only=only: apply_edits(self.source, [_removal(self.source, s, only)]),  # type: ignore[misc]
            )


def _removal(source: str, statement: ast.stmt, only: bool) -> Edit:
    """The edit that removes ``statement``: its whole lines when nothing else is on them, else its text."""
    if only:
        return Edit.of(statement, "pass")
    lines = source.encode().splitlines(keepends=True)
    start, end = statement.lineno, statement.end_lineno or statement.lineno
    before = lines[start - 1][: statement.col_offset]
    after = lines[end - 1][statement.end_col_offset or 0 :]
    if not before.strip() and (not after.strip() or after.strip().startswith(b"#")):
        return Edit(start, 0, end, len(lines[end - 1]), "")
    return Edit.of(statement, "pass")


def mutants(
    source: str, *, within: Collection[str] | None = None, operators: Sequence[Operator] | None = None
) -> list[Mutant]:
    """Every mutant of the module ``source``, in source order; only in the functions named in ``within``
    (qualified names, ``Class.method``) when given. Mutants that do not compile, or that give the same module as
    another, are left out. A module that does not parse has none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    chosen = set(operators or Operator)
    seen = {source}
    found: list[Mutant] = []
    sites = _Sites(source, tree, within)
    for operator, line, description, make in sites.run():
        if operator not in chosen:
            continue
        mutated = make()
        if mutated is None or mutated in seen:
            continue
        try:
            compile(mutated, "<mutant>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        seen.add(mutated)
        found.append(Mutant(operator, line, _function_at(tree, line), description, mutated))
    return found


def _function_at(tree: ast.Module, line: int) -> str:
    best = ""
    for span in functions(tree):
        if span.node.lineno <= line <= (span.node.end_lineno or span.node.lineno):
            best = span.qualname  # later spans are nested deeper (methods after their class's earlier ones)
    return best


def sample_mutants(found: Sequence[Mutant], limit: int, *, seed: str) -> list[Mutant]:
    """At most ``limit`` of ``found``, spread over the operators (round robin, each operator's mutants in a
    random order drawn from ``seed``), in a stable order."""
    rng = random.Random(seed)
    by_operator: dict[Operator, list[Mutant]] = {}
    for mutant in found:
        by_operator.setdefault(mutant.operator, []).append(mutant)
    queues = [rng.sample(group, len(group)) for _, group in sorted(by_operator.items())]
    chosen: list[Mutant] = []
    while len(chosen) < limit and any(queues):
        for queue in queues:
            if queue and len(chosen) < limit:
                chosen.append(queue.pop())
    return chosen
