"""Answer leaks: a workspace that hands the agent the reference solution or the hidden tests' expected values.

The task layer's audit (:func:`rollbox.tasks.audit_task`) reads every file of the workspace and every object of
its git repository, and reports a copy of a file of solution/ or tests/, or a place holding their added lines;
validation counts those of solution/ files the reference changes, and exact copies of tests/ files that hold
something to check (see :func:`_counts`). It adds two checks of the workspace's files that a line match misses:

- a function, in Python source, whose code equals one the reference changes (its ``ast``, names included);
- most of the hidden cases' distinctive expected values in one file (at least three, and at least 60% of them:
  a docstring's example or two is no leak).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from rollbox.tasks import FunctionGrading, GitError, StdioGrading, Task, TaskFormatError, audit_task
from rollbox.tasks._cases import load_function_cases, load_stdio_cases
from rollbox.tasks._values import encode

from ._reasons import Reason, ReasonCode
from ._reference import Reference
from ._source import functions

__all__ = ["find_leaks"]

_MAX_FILE_BYTES = 8 * 1024 * 1024
_MIN_VALUES = 3
_VALUE_SHARE = 0.6


def _files(workspace: Path) -> list[tuple[str, bytes]]:
    found = []
    for path in sorted(workspace.rglob("*")):
        relative = path.relative_to(workspace)
        if path.is_symlink() or not path.is_file() or ".git" in relative.parts:
            continue
        if path.stat().st_size <= _MAX_FILE_BYTES:
            found.append((relative.as_posix(), path.read_bytes()))
    return found


def _expected_values(task: Task) -> list[str]:
    """The hidden cases' distinctive expected values, each as the texts it would be written as."""
    grading = task.grading
    values: set[str] = set()
    try:
        if isinstance(grading, FunctionGrading) and grading.cases:
            for case in load_function_cases(task.tests / grading.cases):
                text = json.dumps(encode(case.expected))
                if len(text) >= 4:
                    values.add(text)
        elif isinstance(grading, StdioGrading):
            for stdio_case in load_stdio_cases(task.tests / grading.cases):
                output = stdio_case.output.strip()
                if len(output) >= 4 and output not in stdio_case.input:
                    values.add(output)
    except TaskFormatError:
        return []
    return sorted(values)


def _counts(task: Task, source: str, identical: bool) -> bool:
    """Whether an audit finding is a leak here: a file of solution/ that the workspace already holds as it is gives
    nothing away, and hidden tests often share helpers with the workspace (HumanEval's checks begin with the
    prompt's own functions), so of tests/ only an exact copy counts, and only of a file that checks something."""
    kind, _, path = source.partition("/")
    if kind == "tests":
        return identical and _checks_something(task.tests / path)
    original = task.workspace / path
    solution = task.solution / path if task.solution is not None else None
    unchanged = solution is not None and original.is_file() and original.read_bytes() == solution.read_bytes()
    return not unchanged


def _checks_something(path: Path) -> bool:
    """Whether a file of tests/ may hold expectations: any file but Python source, and Python source that defines
    a test, asserts, or keeps literal data in a module constant. A support module the tests import and the
    workspace holds too (semver's tests carry copies of its docs' examples) gives nothing away."""
    if path.suffix != ".py":
        return True
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return True
    for statement in tree.body:
        if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            dunder = all(isinstance(t, ast.Name) and t.id.startswith("__") for t in targets)  # __all__ and kin
            if not dunder and _literal(statement.value):
                return True
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            return True
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            return True
    return False


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def _shapes(reference: Reference | None) -> dict[str, str]:
    """The functions the reference changes, by ``ast.dump``."""
    shapes: dict[str, str] = {}
    for target in reference.targets if reference is not None else ():
        for span in functions(ast.parse(target.source)):
            if span.qualname in target.functions:
                shapes[ast.dump(span.node)] = f"the reference's {span.qualname} ({target.path})"
    return shapes


async def find_leaks(task: Task, reference: Reference | None) -> list[Reason]:
    """Every answer leak in the task's workspace, as ``answer_leak`` reasons (``validation_error`` when its
    repository cannot be read)."""
    found: list[Reason] = []
    try:
        audit = audit_task(task)
    except GitError as exc:
        return [Reason(ReasonCode.VALIDATION_ERROR, f"the workspace's git repository cannot be audited: {exc}")]
    found += [Reason(ReasonCode.ANSWER_LEAK, str(f)) for f in audit.findings if _counts(task, f.source, f.identical)]
    shapes = _shapes(reference)
    values = _expected_values(task)
    for where, data in _files(task.workspace):
        leaked = _shape_leak(data, shapes) if where.endswith(".py") or b"def " in data else None
        if leaked is not None:
            found.append(Reason(ReasonCode.ANSWER_LEAK, f"workspace/{where} holds {leaked}"))
            continue
        if len(values) >= _MIN_VALUES:
            text = data.decode("utf-8", "replace")
            hits = sum(value in text for value in values)
            if hits >= _MIN_VALUES and hits >= _VALUE_SHARE * len(values):
                found.append(
                    Reason(
                        ReasonCode.ANSWER_LEAK,
                        f"workspace/{where} holds {hits} of the {len(values)} hidden cases' distinctive "
                        "expected values",
                    )
                )
    return found


def _shape_leak(data: bytes, shapes: dict[str, str]) -> str | None:
    if not shapes:
        return None
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            leaked = shapes.get(ast.dump(node))
            if leaked is not None:
                return leaked
    return None
