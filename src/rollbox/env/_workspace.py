"""The task's workspace as an episode sees it (its listing, its visible tests: one walk, reused while none of its
directories changes), and the agent's workspace handed to the judge at the end.

The agent's /workspace itself is the sandbox's: a copy-on-write overlay of the task's workspace/ (or a copy, where
the kernel cannot overlay it), which the sandbox lays in as it starts (``workspace=`` of a sandbox source).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox import Limits, Sandbox, WorkspaceChanges, scratch_directory
from rollbox.tasks import Task

__all__ = ["WorkspaceScan", "final_workspace", "scan_workspace"]

#: Left out of the listing and of the search for visible tests.
_IGNORED = frozenset({"__pycache__", ".git"})
#: A directory changed this recently is not trusted to show its next change in its times (a change in the same
#: tick of the file system's clock keeps them): a walk that met one is not kept.
_RACY_NS = 2_000_000_000
#: How many workspaces' walks a process keeps.
_KEPT_SCANS = 64
#: How many entries the agent's changes may hold (files, links, directories, removals), for the export at the end.
_MAX_NEW_FILES = 20_000


@dataclass(frozen=True)
class WorkspaceScan:
    """What one walk of a task's workspace/ finds: its paths, and what says whether they changed since."""

    #: Workspace-relative paths, sorted; directories end in ``/``; nothing under ``.git`` or ``__pycache__``.
    paths: tuple[str, ...]
    #: The visible tests: files named ``test_*.py`` or ``*_test.py``, as the judge names them.
    tests: tuple[str, ...]
    #: The files they need beside them: the ``conftest.py`` and ``__init__.py`` of their directories and those above.
    support: tuple[str, ...]
    #: Each directory walked (relative; ``""``: the root) and its (inode, mtime, ctime) before it was read.
    directories: tuple[tuple[str, tuple[int, int, int]], ...]
    #: Whether a directory changed so recently (within 2 s of the walk) that a later change could keep its times.
    racy: bool

    def listing(self, *, limit: int = 200) -> str:
        """The workspace as the agent first sees it: one path a line, at most ``limit`` of them."""
        shown = self.paths[:limit]
        more = f"\n... and {len(self.paths) - limit} more" if len(self.paths) > limit else ""
        return "\n".join(shown) + more if shown else "(the workspace is empty)"

    def unchanged(self, root: str) -> bool:
        """Whether ``root``'s directories are as this walk found them, so that its paths are too: a name added,
        removed or renamed changes its directory's ctime, which no program can set back."""
        for rel, signature in self.directories:
            try:
                if _signature(os.stat(os.path.join(root, rel), follow_symlinks=False)) != signature:
                    return False
            except OSError:
                return False
        return True


def _is_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _visible(paths: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    files = [p for p in paths if not p.endswith("/")]
    tests = [p for p in files if _is_test(p)]
    folders = {""} | {"/".join(t.split("/")[:i]) for t in tests for i in range(1, t.count("/") + 1)}
    support = [
        p for p in files if p.rsplit("/", 1)[-1] in ("conftest.py", "__init__.py") and (p.rpartition("/")[0] in folders)
    ]
    return tuple(tests), tuple(support)


def _signature(info: os.stat_result) -> tuple[int, int, int]:
    return info.st_ino, info.st_mtime_ns, info.st_ctime_ns


def _walk(root: str) -> WorkspaceScan:
    paths: list[str] = []
    directories: list[tuple[str, tuple[int, int, int]]] = []
    racy = False
    stack = [""]
    while stack:
        rel = stack.pop()
        where = os.path.join(root, rel)
        info = os.stat(where, follow_symlinks=False)  # before reading it: a change meanwhile shows next time
        directories.append((rel, _signature(info)))
        racy = racy or info.st_ctime_ns > time.time_ns() - _RACY_NS
        with os.scandir(where) as entries:
            for entry in entries:
                if entry.name in _IGNORED:
                    continue
                child = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_dir(follow_symlinks=False):
                    stack.append(child)
                    child += "/"
                paths.append(child)
    paths.sort()
    tests, support = _visible(paths)
    return WorkspaceScan(paths=tuple(paths), tests=tests, support=support, directories=tuple(directories), racy=racy)


_scans: OrderedDict[str, WorkspaceScan] = OrderedDict()
_scans_lock = threading.Lock()


def scan_workspace(task: Task) -> WorkspaceScan:
    """Walk ``task``'s workspace/, or reuse the last walk of it in this process when none of its directories
    changed since (a check of one ``stat`` a directory: the start of an episode on a repository of 10,000 files
    need not walk them all).

    Raises:
        OSError: the workspace cannot be read.
    """
    root = os.path.realpath(task.workspace)
    with _scans_lock:
        known = _scans.get(root)
    if known is not None and known.unchanged(root):
        return known
    scan = _walk(root)
    if not scan.racy:
        with _scans_lock:
            _scans[root] = scan
            _scans.move_to_end(root)
            while len(_scans) > _KEPT_SCANS:
                _scans.popitem(last=False)
    return scan


@contextlib.asynccontextmanager
async def final_workspace(sandbox: Sandbox, limits: Limits) -> AsyncIterator[WorkspaceChanges]:
    """What the agent changed in its workspace, copied out to a host directory for the judge, while the block runs.

    Only the changes come out (on a copy-on-write workspace, the overlay's upper layer: an episode's end on a
    100 MB repository costs what its changes cost; elsewhere, the whole workspace), never following a link, and at
    most what the sandbox's disk could hold, in at most 20,000 entries.

    Raises:
        TreeTooLarge: the changes hold more than that (the agent's doing).
        OSError: the copy failed on the host.
    """
    with scratch_directory("rollbox-episode-") as scratch:
        yield await sandbox.read_changes(
            Path(scratch) / "workspace", max_bytes=limits.disk_bytes, max_files=_MAX_NEW_FILES
        )
