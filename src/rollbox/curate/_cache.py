"""The validation cache: one report per task content, options and validator code, under ``$ROLLBOX_HOME``.

A report is reused only for the same task files (every byte, tests/ followed through links), the same options,
and the same code of rollbox's judge, tasks and curate packages: re-validating an unchanged task set is instant,
and any change to the task or to how it is judged validates it again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from rollbox.sandbox.runtime import rollbox_home
from rollbox.tasks import Task

from ._report import TaskReport

__all__ = ["ValidationCache", "content_hash"]


def _digest_tree(digest: hashlib._Hash, root: Path, prefix: str) -> None:
    for path in sorted(root.rglob("*")):
        relative = f"{prefix}/{path.relative_to(root).as_posix()}"
        if "__pycache__" in path.parts:
            continue
        if path.is_symlink():
            digest.update(f"link {relative} {os.readlink(path)}\0".encode())
        elif path.is_file():
            digest.update(f"file {relative} {path.stat().st_mode & 0o111}\0".encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())


def content_hash(task: Task) -> str:
    """The digest of every file of the task (its tests/ read through links)."""
    digest = hashlib.sha256()
    _digest_tree(digest, task.path, "")
    _digest_tree(digest, task.tests.resolve(), "tests")
    return digest.hexdigest()


@functools.cache
def _code_version() -> str:
    """The digest of the code that decides a validation: rollbox's judge, tasks and curate packages."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent.parent  # the rollbox package
    for package in ("judge", "tasks", "curate", "sandbox"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


class ValidationCache:
    """Reports by key, one JSON file each under ``root`` (default ``$ROLLBOX_HOME/validate``); and under
    ``root/seen``, the tasks validations admitted, by fingerprint (``_duplicates``), for later ones to compare with."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or rollbox_home() / "validate"

    def key(self, content: str, options: str) -> str:
        """The key of a task's report: its content hash, the options' fingerprint, and the validator's code."""
        return hashlib.sha256(f"{content}\0{options}\0{_code_version()}".encode()).hexdigest()

    def get(self, key: str) -> TaskReport | None:
        """The report stored under ``key``, marked cached; ``None`` when there is none (or it is unreadable)."""
        try:
            data = json.loads((self.root / f"{key}.json").read_text(encoding="utf-8"))
            report = TaskReport.from_json(data)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return TaskReport.from_json({**report.to_json(), "cached": True})

    def put(self, key: str, report: TaskReport) -> None:
        """Store ``report`` under ``key`` (atomically: a reader never sees half a file)."""
        _write(self.root / f"{key}.json", report.to_json())

    def original(self, fingerprint: str) -> tuple[str, str] | None:
        """The task (its id and directory) that a validation before admitted with ``fingerprint``, if any."""
        try:
            data = json.loads((self.root / "seen" / f"{fingerprint}.json").read_text(encoding="utf-8"))
            return str(data["task_id"]), str(data["path"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def remember(self, fingerprint: str, task_id: str, path: str) -> None:
        """Keep the task with ``fingerprint`` as the original later validations compare with (the first kept stays)."""
        if self.original(fingerprint) is None:
            _write(self.root / "seen" / f"{fingerprint}.json", {"task_id": task_id, "path": path})


def _write(path: Path, data: object) -> None:
    """``data`` as JSON at ``path``, atomically: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(data, file)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
