"""Duplicates: the same task twice, under two ids, or the same bug written two ways.

Three fingerprints per task, each a digest:

- ``problem``: the workspace, the tests and the grading (runner and its settings): what the agent meets and how it
  is graded. ``task``: that and the reference. Two tasks that share ``task`` are one task (whatever their ids,
  instructions or limits); two that share only ``problem`` differ in their reference, of which one may be wrong,
  so both are validated, and the later one is a duplicate when both are admitted.
- ``fix``: the tests, the grading, the workspace files the reference leaves alone, and, for each file it changes,
  that file before and after, as Python normalised (:func:`normalised`: ``not a == b`` is ``a != b``, ``a > b`` is
  ``b < a``, ``a == b`` is ``b == a``, ``not not x`` is ``x``, an ``if`` with an ``else`` on a negative comparison
  is the positive one with its branches exchanged, comments and formatting gone). Two tasks that share it ask for
  the same fix of the same bug written two ways, judged by the same tests (a near duplicate).

The first task of a set with a fingerprint is the original; a later one with it is a ``duplicate`` that names it.
Tasks an earlier validation admitted count too (``ValidationCache.original``).
"""

from __future__ import annotations

import ast
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rollbox.tasks import Task

from ._cache import ValidationCache
from ._reasons import Reason, ReasonCode
from ._reference import Reference, read_tree

__all__ = ["Fingerprint", "after_grading", "before_grading", "duplicates", "fingerprint", "normalised"]

#: A comparison negated: ``not (a OP b)`` is ``a INVERSE b``.
_INVERSE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.Gt: ast.LtE,
    ast.LtE: ast.Gt,
}
#: The comparisons an ``if`` with an ``else`` never tests: it tests the inverse, its branches exchanged.
_NEGATIVE = (ast.NotEq, ast.NotIn, ast.IsNot, ast.LtE)
#: Comparisons whose operands may be exchanged.
_SYMMETRIC = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)
#: ``a > b`` written as ``b < a``.
_MIRROR: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Gt: ast.Lt, ast.GtE: ast.LtE}


@dataclass(frozen=True)
class Fingerprint:
    """A task's fingerprints (see the module's docstring)."""

    task: str
    problem: str
    #: ``None``: the task has no reference, so no fix to compare.
    fix: str | None

    def all(self) -> list[str]:
        """Every fingerprint (to remember an admitted task by)."""
        return [k for k in (self.task, self.problem, self.fix) if k is not None]


class _Normalise(ast.NodeTransformer):
    """One canonical way to write what can be written several ways (``visit`` returns the new tree)."""

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        inner = node.operand
        if isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.Not):
            return inner.operand
        if isinstance(inner, ast.Compare) and len(inner.ops) == 1:
            return _inverted(inner)
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.expr:
        self.generic_visit(node)
        return _canonical(node)

    def visit_If(self, node: ast.If) -> ast.If:
        self.generic_visit(node)
        test = node.test
        if not node.orelse:
            return node
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return ast.If(test.operand, node.orelse, node.body)
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], _NEGATIVE):
            return ast.If(_inverted(test), node.orelse, node.body)
        return node


def _canonical(node: ast.Compare) -> ast.Compare:
    """``a > b`` as ``b < a``; the operands of a symmetric comparison in a fixed order."""
    if len(node.ops) != 1:
        return node
    op, left, right = node.ops[0], node.left, node.comparators[0]
    if type(op) in _MIRROR:
        return ast.Compare(right, [_MIRROR[type(op)]()], [left])
    if isinstance(op, _SYMMETRIC) and ast.dump(right) < ast.dump(left):
        return ast.Compare(right, [op], [left])
    return node


def _inverted(node: ast.Compare) -> ast.Compare:
    """``not (a OP b)`` as one comparison, canonical."""
    return _canonical(ast.Compare(node.left, [_INVERSE[type(node.ops[0])]()], node.comparators))


def normalised(source: str) -> str:
    """``source`` as one canonical dump of its normalised tree; the text itself when it is no Python."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    return ast.dump(_Normalise().visit(tree), annotate_fields=False, include_attributes=False)


def _digest(root: Path, skip: frozenset[str] = frozenset()) -> bytes:
    digest = hashlib.sha256()
    for path, data in sorted(read_tree(root).items()):
        if path not in skip:
            digest.update(f"{path}\0{len(data)}\0".encode() + data)
    return digest.digest()


def _tests_digest(task: Task) -> bytes:
    digest = hashlib.sha256()
    for path in sorted(task.tests.resolve().rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            relative = path.relative_to(task.tests.resolve()).as_posix()
            digest.update(f"{relative}\0{os.path.getsize(path)}\0".encode() + path.read_bytes())
    return digest.digest()


def fingerprint(task: Task, reference: Reference | None) -> Fingerprint:
    """The task's fingerprints."""
    grading = repr(task.grading).encode()
    tests = _tests_digest(task)
    problem = hashlib.sha256(b"problem\0" + grading + tests + _digest(task.workspace)).hexdigest()
    solution = _digest(task.solution) if task.solution is not None else b""
    whole = hashlib.sha256(b"task\0" + problem.encode() + solution).hexdigest()
    if reference is None:
        return Fingerprint(whole, problem, None)
    workspace = read_tree(task.workspace)
    changed = sorted(p for p, data in reference.files.items() if workspace.get(p) != data)
    fix = hashlib.sha256(b"fix\0" + grading + tests + _digest(task.workspace, frozenset(changed)))
    for path in changed:
        before, after = workspace.get(path, b""), reference.files[path]
        for side in (before, after):
            text = side.decode("utf-8", errors="surrogateescape")
            fix.update(f"{path}\0".encode() + normalised(text).encode("utf-8", errors="surrogateescape") + b"\0")
    return Fingerprint(whole, problem, fix.hexdigest())


#: A fingerprint, and how a task that shares it is the same as the original (the start of a sentence).
Key = tuple[str | None, str]


def before_grading(prints: Fingerprint) -> list[Key]:
    """What makes a task a duplicate whatever its validation would find: the whole task, or the same fix."""
    return [(prints.task, SAME_TASK), (prints.fix, SAME_FIX)]


def after_grading(prints: Fingerprint) -> list[Key]:
    """What makes an admitted task a duplicate of another admitted one: the same problem, another reference."""
    return [(prints.problem, SAME_PROBLEM)]


def duplicates(
    tasks: Sequence[Task],
    keys: Sequence[Sequence[Key]],
    cache: ValidationCache | None,
    eligible: Sequence[bool] | None = None,
) -> dict[int, tuple[str, Reason]]:
    """The tasks (by index) that share one of their ``keys`` with an earlier one of ``tasks`` or one a validation
    before admitted (as ``cache`` remembers; one with the same id is the task itself, validated again): the
    original (``id (path)``) and the ``duplicate`` reason naming it. A task not ``eligible`` is left out: neither
    a duplicate nor an original."""
    first: dict[str, int] = {}
    found: dict[int, tuple[str, Reason]] = {}
    for index, task in enumerate(tasks):
        if eligible is not None and not eligible[index]:
            continue
        for key, how in keys[index]:
            if key is None:
                continue
            if key in first:
                other = tasks[first[key]]
                original, where = f"{other.id} ({other.path})", "in this set"
            else:
                before = cache.original(key) if cache is not None else None
                if before is None or before[0] == task.id:
                    continue
                original, where = f"{before[0]} ({before[1]})", "validated before"
            found[index] = (original, Reason(ReasonCode.DUPLICATE, f"{how} {original}, {where}"))
            break
        if index not in found:
            for key, _ in keys[index]:
                if key is not None:
                    first.setdefault(key, index)
    return found


SAME_TASK = "the same workspace, tests, grading and reference as"
SAME_FIX = "the same fix (normalised: the same bug, written another way) for the same tests as"
SAME_PROBLEM = "the same workspace, tests and grading (another reference) as"
