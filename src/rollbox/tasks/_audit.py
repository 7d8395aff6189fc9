"""Auditing a task for answers in its workspace: the reference solution's added lines, or the hidden tests'.

What is looked for (the needles), for each file of solution/ and of tests/:

- its added lines: the lines (stripped of surrounding whitespace) it has that the workspace's file at the same
  path has not, keeping only non-trivial ones (at least 10 characters, with a letter or digit): what the
  reference adds, or what the hidden tests say beyond what the agent already sees;
- its exact content, as a git blob id: a copy anywhere in the repository's object store.

Where (the haystack): every file of the workspace, .git's own files included (but not its object store, which is
compressed), and every object of the workspace's git repository, blobs decompressed (``git cat-file
--batch-all-objects``): so a copy of the fix in a later commit, a branch, a tag, the stash, a reflog-only commit
or a dangling blob is found, as a copied file is.

A place is reported when it holds one source file's content exactly, or at least ``min(3, N)`` of that file's
N added lines: a single common line (``return result``) elsewhere in a repository is no leak, a copy of a fix is.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._digest import tree_entries
from ._git import GitError, environment, git_command
from ._load import load_task
from ._model import Task

__all__ = ["AuditFinding", "AuditReport", "audit_task"]

_MIN_LENGTH = 10
_MIN_MATCHES = 3
_MEANINGFUL = re.compile(rb"[A-Za-z0-9]")


@dataclass(frozen=True)
class AuditFinding:
    """A place in the workspace that holds an answer."""

    #: ``workspace/PATH``, or ``git object SHA (TYPE)``.
    where: str
    #: The file whose content was found: ``solution/PATH`` or ``tests/PATH``.
    source: str
    #: How many of the source's added lines the place holds, of how many.
    matched: int
    total: int
    #: Whether the place holds the source's exact content.
    identical: bool

    def __str__(self) -> str:
        what = "an exact copy of" if self.identical else f"{self.matched} of the {self.total} added lines of"
        return f"{self.where} holds {what} {self.source}"

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "source": self.source,
            "matched": self.matched,
            "total": self.total,
            "identical": self.identical,
        }


@dataclass(frozen=True)
class AuditReport:
    """What an audit looked for and found."""

    task_id: str
    #: The source files (of solution/ and tests/) and their needle counts.
    sources: dict[str, int]
    #: Workspace files and git objects read.
    files_read: int
    objects_read: int
    findings: tuple[AuditFinding, ...]

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "clean": self.clean,
            "sources": self.sources,
            "files_read": self.files_read,
            "objects_read": self.objects_read,
            "findings": [f.to_json() for f in self.findings],
        }


@dataclass(frozen=True)
class _Source:
    name: str
    lines: frozenset[bytes]
    blob_id: str
    content: bytes


def _lines(data: bytes) -> set[bytes]:
    return {line.strip() for line in data.splitlines()}


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _sources(task: Task) -> list[_Source]:
    sources: list[_Source] = []
    for label, root in (("solution", task.solution), ("tests", task.tests)):
        if root is None:
            continue
        for relative, st in tree_entries(root):
            if not stat.S_ISREG(st.st_mode):
                continue
            content = (root / os.fsdecode(relative)).read_bytes()
            base = task.workspace / os.fsdecode(relative)
            known = _lines(base.read_bytes()) if base.is_file() and not base.is_symlink() else set()
            added = {
                line
                for line in _lines(content) - known
                if len(line) >= _MIN_LENGTH and _MEANINGFUL.search(line) is not None
            }
            name = f"{label}/{os.fsdecode(relative)}"
            sources.append(_Source(name, frozenset(added), _blob_id(content), content))
    return sources


def _check(where: str, data: bytes, sources: list[_Source]) -> list[AuditFinding]:
    found: list[AuditFinding] = []
    lines: set[bytes] | None = None
    for source in sources:
        identical = bool(source.content) and data == source.content
        if source.lines and lines is None:
            lines = _lines(data)
        matched = len(source.lines & lines) if source.lines and lines is not None else 0
        if identical or (source.lines and matched >= min(_MIN_MATCHES, len(source.lines))):
            found.append(AuditFinding(where, source.name, matched, len(source.lines), identical))
    return found


def _workspace_files(workspace: Path) -> Iterator[tuple[str, bytes]]:
    objects = os.path.join(b".git", b"objects")
    for relative, st in tree_entries(workspace):
        if stat.S_ISREG(st.st_mode) and not (relative == objects or relative.startswith(objects + b"/")):
            name = os.fsdecode(relative)
            yield name, (workspace / name).read_bytes()


def _git_objects(workspace: Path) -> Iterator[tuple[str, str, bytes]]:
    """Every object of the workspace's repository: (id, type, content), blobs decompressed.

    Raises:
        GitError: git failed.
    """
    if not (workspace / ".git").is_dir():
        return
    argv = git_command("cat-file", "--batch-all-objects", "--batch", "--unordered")
    with (
        tempfile.TemporaryFile() as errors,
        subprocess.Popen(argv, cwd=workspace, stdout=subprocess.PIPE, stderr=errors, env=environment()) as git,
    ):
        assert git.stdout is not None
        while header := git.stdout.readline():
            object_id, kind, size = header.decode().split()
            content = git.stdout.read(int(size))
            git.stdout.read(1)  # the newline after each object
            yield object_id, kind, content
        if git.wait() != 0:
            errors.seek(0)
            message = errors.read().decode("utf-8", "replace")[-500:]
            raise GitError(f"git cat-file in {workspace} failed with exit status {git.returncode}: {message}")


def audit_task(task: Task | str | os.PathLike[str]) -> AuditReport:
    """Look for the task's answers in its workspace and its git objects (see the module's docstring).

    Raises:
        TaskFormatError: ``task`` is a path to a directory that is not a valid task.
        GitError: the workspace's repository cannot be read.
    """
    task = task if isinstance(task, Task) else load_task(task, verify=False)
    sources = _sources(task)
    findings: list[AuditFinding] = []
    files = objects = 0
    for name, data in _workspace_files(task.workspace):
        files += 1
        findings += _check(f"workspace/{name}", data, sources)
    by_blob_id = {s.blob_id: s for s in sources if s.content}
    for object_id, kind, content in _git_objects(task.workspace):
        objects += 1
        where = f"git object {object_id} ({kind})"
        if object_id in by_blob_id and kind == "blob":
            source = by_blob_id[object_id]
            findings.append(AuditFinding(where, source.name, len(source.lines), len(source.lines), True))
            continue
        findings += _check(where, content, sources)
    return AuditReport(
        task_id=task.id,
        sources={s.name: len(s.lines) for s in sources},
        files_read=files,
        objects_read=objects,
        findings=tuple(findings),
    )
