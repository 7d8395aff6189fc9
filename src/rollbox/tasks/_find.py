"""Tasks named on a command line: task directories, or directories of them."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ._errors import TaskFormatError
from ._load import load_task
from ._model import Task

__all__ = ["find_tasks", "load_tasks"]


def find_tasks(paths: Iterable[Path]) -> list[Path]:
    """The task directories ``paths`` name: each one with a task.toml, and the children with one of the others.

    Raises:
        TaskFormatError: a path is neither.
    """
    found: list[Path] = []
    for path in paths:
        if (path / "task.toml").is_file():
            found.append(path)
            continue
        if not path.exists():
            raise TaskFormatError(path, "does not exist: give task directories (with task.toml) or directories of them")
        children = sorted(p for p in path.iterdir() if (p / "task.toml").is_file()) if path.is_dir() else []
        if not children:
            raise TaskFormatError(path, "neither a task directory (with task.toml) nor a directory of them")
        found += children
    return found


def load_tasks(paths: Iterable[Path]) -> list[Task]:
    """The tasks :func:`find_tasks` finds, loaded, sorted by id.

    Raises:
        TaskFormatError: a path holds no task, a task is malformed, or two tasks share an id.
    """
    found: dict[str, Task] = {}
    for path in find_tasks(paths):
        task = load_task(path)
        if task.id in found and found[task.id].path != task.path:
            raise TaskFormatError(path, f"two tasks have the id {task.id!r}: {found[task.id].path} and {task.path}")
        found[task.id] = task
    return sorted(found.values(), key=lambda t: t.id)
