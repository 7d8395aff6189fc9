"""Importing tasks from other formats: one native task directory per task, named after its id, and a report of what
was imported and what was refused, and why.

Each format's reader turns its source into drafts (a task id, where it came from, and how to write it) and
refusals (input that is not even a task: a line that is not JSON, a missing key). A draft is written only when its
turn comes, so a slow one (a repository clone, a reference solution run in a sandbox) fails alone: whatever goes
wrong with one task is a refusal naming the task, its place in the input and what to do, and the rest still
imports.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollbox.sandbox import RollboxError

from ._errors import TaskFormatError
from ._git import GitError
from ._model import Task

__all__ = [
    "Draft",
    "ImportRefused",
    "ImportReport",
    "ImportSourceError",
    "ImportedTask",
    "Refusal",
    "run_import",
    "safe_name",
]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_NAME = 100


class ImportRefused(RollboxError):
    """One task of the input cannot be imported; the message says why and what to do."""


class ImportSourceError(RollboxError):
    """The input itself cannot be read (a missing file, a directory that is not a task set): nothing is imported."""


@dataclass(frozen=True)
class Refusal:
    """A task (or a piece of input) that was not imported."""

    #: The task's id, when the input got that far.
    task_id: str | None
    #: Where in the input: ``FILE:LINE`` or a directory.
    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.task_id + ': ' if self.task_id else ''}{self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.task_id, "where": self.where, "reason": self.reason}


@dataclass(frozen=True)
class ImportedTask:
    """A task written to its directory."""

    task_id: str
    path: Path


@dataclass(frozen=True)
class ImportReport:
    """What an import did: every task of the input is either imported or refused, in input order."""

    format: str
    dest: Path
    imported: tuple[ImportedTask, ...]
    refused: tuple[Refusal, ...]

    @property
    def ok(self) -> bool:
        """Whether nothing was refused."""
        return not self.refused

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "dest": str(self.dest),
            "imported": [{"id": t.task_id, "path": str(t.path)} for t in self.imported],
            "refused": [r.to_json() for r in self.refused],
        }


@dataclass(frozen=True)
class Draft:
    """A task read from the input, not yet written."""

    task_id: str
    where: str
    #: Writes the task at the given directory (replacing what is there when the second argument is true) and
    #: returns it loaded. Raises ImportRefused, TaskFormatError, ValueError, OSError, GitError or ArithmeticError to
    #: refuse it.
    write: Callable[[Path, bool], Task]


#: What a progress display is told after each task: tasks done, tasks in all, the task's id (or its place).
Progress = Callable[[int, int, str], None]


def safe_name(task_id: str) -> str:
    """The directory name of a task: its id with every run of characters other than letters, digits, ``.``, ``_``
    and ``-`` made one ``_``, leading dots and underscores dropped; a long id is cut to 100 characters ending in a
    digest of the whole id, so that ids sharing a long prefix stay apart.

    >>> safe_name("HumanEval/0"), safe_name("django__django-11099"), safe_name("../x y")
    ('HumanEval_0', 'django__django-11099', 'x_y')

    Raises:
        ValueError: the id has no letter or digit.
    """
    name = _UNSAFE.sub("_", task_id).lstrip("._")
    if not re.search(r"[A-Za-z0-9]", name):
        raise ValueError(f"the id {task_id!r} has no letter or digit to name its directory after; give it one")
    if len(name) > _MAX_NAME:
        name = name[: _MAX_NAME - 13] + "-" + hashlib.sha256(task_id.encode()).hexdigest()[:12]
    return name


def run_import(
    format: str,
    items: Sequence[Draft | Refusal],
    dest: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> ImportReport:
    """Write every draft of ``items`` under ``dest`` (one directory each, named by :func:`safe_name`), refusing
    the ones that fail and those whose name another task of this import already took."""
    imported: list[ImportedTask] = []
    refused: list[Refusal] = []
    taken: dict[str, str] = {}
    for done, item in enumerate(items, 1):
        if isinstance(item, Refusal):
            refused.append(item)
        else:
            refusal = _write(item, dest, taken, force)
            if isinstance(refusal, Refusal):
                refused.append(refusal)
            else:
                imported.append(refusal)
        if progress is not None:
            progress(done, len(items), item.task_id or item.where)
    return ImportReport(format=format, dest=dest, imported=tuple(imported), refused=tuple(refused))


def _write(draft: Draft, dest: Path, taken: dict[str, str], force: bool) -> ImportedTask | Refusal:
    try:
        name = safe_name(draft.task_id)
    except ValueError as exc:
        return Refusal(draft.task_id, draft.where, str(exc))
    if name in taken:
        return Refusal(
            draft.task_id,
            draft.where,
            f"its directory name {name!r} is already taken by task {taken[name]!r} of this import; give the tasks "
            "ids that differ in letters or digits",
        )
    taken[name] = draft.task_id
    path = dest / name
    if path.exists() and not force:
        return Refusal(draft.task_id, draft.where, f"{path} exists; remove it, or import with --force to replace it")
    try:
        task = draft.write(path, force)
    except TaskFormatError as exc:
        return Refusal(draft.task_id, draft.where, f"the task it makes does not load: {exc}")
    except (ImportRefused, ValueError, OSError) as exc:
        return Refusal(draft.task_id, draft.where, str(exc))
    except GitError as exc:
        return Refusal(draft.task_id, draft.where, f"{exc}; check its repository (git fsck) and import it again")
    except ArithmeticError as exc:
        # A number of the input that no check caught (an overflowing size) is this task's fault, not the import's.
        reason = f"a number in it is out of range ({type(exc).__name__}: {exc}); check its sizes and limits"
        return Refusal(draft.task_id, draft.where, reason)
    return ImportedTask(task.id, task.path)
