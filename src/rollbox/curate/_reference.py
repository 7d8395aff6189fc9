"""The reference solution as validation uses it: the files it lays over the workspace, and what of them it changes.

What the reference changes is what a task asks for: trivial and hack candidates replace those functions, mutants
change only them. A ``function`` task's target is its module (the entry point, at least); a ``stdio`` task's is
each Python file its command runs, whole; a ``pytest`` or ``script`` task's, each Python file of ``solution/``
that is not a test, down to the functions whose code differs from the workspace's (the whole module when only
module-level code differs).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from rollbox.tasks import FunctionGrading, StdioGrading, Task

from ._source import functions

__all__ = ["Reference", "Target", "is_test_file", "read_tree"]


def is_test_file(path: str) -> bool:
    """Whether the workspace-relative ``path`` is a pytest module or a conftest."""
    name = path.rsplit("/", 1)[-1]
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (links and caches left out), by relative POSIX path."""
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink() and "__pycache__" not in path.parts:
            files[path.relative_to(root).as_posix()] = path.read_bytes()
    return files


@dataclass(frozen=True)
class Target:
    """One module the reference writes, and the functions of it that the task is about."""

    #: Workspace-relative path.
    path: str
    #: The reference's version of the module.
    source: str
    #: Qualified names (``Class.method``) of the functions the task is about; empty: the whole module.
    functions: tuple[str, ...]


@dataclass(frozen=True)
class Reference:
    """A task's reference solution."""

    #: What ``solution/`` lays over the workspace.
    files: dict[str, bytes]
    targets: tuple[Target, ...]

    @classmethod
    def of(cls, task: Task) -> Reference | None:
        """The task's reference, or ``None`` when it has no ``solution/``."""
        if task.solution is None:
            return None
        files = read_tree(task.solution)
        targets = [_target(task, path, data) for path, data in files.items() if _is_subject(task, path)]
        return cls(files=files, targets=tuple(t for t in targets if t is not None))


def _is_subject(task: Task, path: str) -> bool:
    grading = task.grading
    if isinstance(grading, FunctionGrading):
        return path == grading.module
    if isinstance(grading, StdioGrading):
        return path in {arg.removeprefix("./") for arg in grading.command if arg.endswith(".py")}
    return path.endswith(".py") and not is_test_file(path)


def _target(task: Task, path: str, data: bytes) -> Target | None:
    try:
        source = data.decode()
        tree = ast.parse(source)
    except (UnicodeDecodeError, SyntaxError, ValueError):
        return None
    if isinstance(task.grading, StdioGrading):
        return Target(path, source, ())
    before = _definitions(task.workspace / path)
    after = {span.qualname: ast.dump(span.node) for span in functions(tree)}
    changed = tuple(name for name, shape in after.items() if before.get(name) != shape)
    if isinstance(task.grading, FunctionGrading) and task.grading.entry_point not in changed:
        changed = (*changed, task.grading.entry_point) if task.grading.entry_point in after else changed
    if not changed:
        original = task.workspace / path
        if original.is_file() and original.read_bytes() == data:
            return None  # the reference leaves this module as it is
    return Target(path, source, changed)


def _definitions(path: Path) -> dict[str, str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return {}
    return {span.qualname: ast.dump(span.node) for span in functions(tree)}
