"""The task's workspace as an episode sees it: scanned once (its listing, its visible tests, its size), and the
agent's workspace handed to the judge at the end.

The agent's /workspace itself is the sandbox's: a copy-on-write overlay of the task's workspace/ (or a copy, where
the kernel cannot overlay it), which the sandbox lays in as it starts (``workspace=`` of a sandbox source).
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox import Limits, Sandbox
from rollbox.tasks import Task

__all__ = ["WorkspaceScan", "final_workspace", "scan_workspace"]

#: Left out of the listing and of the search for visible tests (never out of the sizes).
_IGNORED = frozenset({"__pycache__", ".git"})
#: How many entries the agent may add to its workspace beyond the task's, for the export at the end.
_MAX_NEW_FILES = 20_000


@dataclass(frozen=True)
class WorkspaceScan:
    """What one walk of a task's workspace/ finds."""

    #: Workspace-relative paths, sorted; directories end in ``/``; nothing under ``.git`` or ``__pycache__``.
    paths: tuple[str, ...]
    #: Every entry (directories, files, links), ``.git`` included: what a copy of the tree holds.
    entries: int
    #: The bytes of all its regular files.
    bytes: int

    def listing(self, *, limit: int = 200) -> str:
        """The workspace as the agent first sees it: one path a line, at most ``limit`` of them."""
        shown = self.paths[:limit]
        more = f"\n... and {len(self.paths) - limit} more" if len(self.paths) > limit else ""
        return "\n".join(shown) + more if shown else "(the workspace is empty)"

    def visible_tests(self) -> tuple[list[str], list[str]]:
        """The visible tests (files named ``test_*.py`` or ``*_test.py``, as the judge names them) and the files
        they need beside them: the ``conftest.py`` and ``__init__.py`` files of their directories and those above.
        Paths are workspace-relative."""
        files = [p for p in self.paths if not p.endswith("/")]
        tests = [p for p in files if _is_test(p)]
        folders = {""} | {"/".join(t.split("/")[:i]) for t in tests for i in range(1, t.count("/") + 1)}
        support = [
            p
            for p in files
            if p.rsplit("/", 1)[-1] in ("conftest.py", "__init__.py") and (p.rpartition("/")[0] in folders)
        ]
        return tests, support


def _is_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def _walk(root: Path) -> WorkspaceScan:
    paths: list[str] = []
    entries = size = 0
    stack: list[tuple[str, bool]] = [("", True)]  # (directory, listed: outside .git and __pycache__)
    while stack:
        rel, listed = stack.pop()
        with os.scandir(root / rel if rel else root) as found:
            for entry in found:
                child = f"{rel}/{entry.name}" if rel else entry.name
                shown = listed and entry.name not in _IGNORED
                info = entry.stat(follow_symlinks=False)
                entries += 1
                if stat.S_ISDIR(info.st_mode):
                    stack.append((child, shown))
                    child += "/"
                elif stat.S_ISREG(info.st_mode):
                    size += info.st_size
                if shown:
                    paths.append(child)
    return WorkspaceScan(paths=tuple(sorted(paths)), entries=entries, bytes=size)


@functools.lru_cache(maxsize=64)
def _recorded(root: str, sha256: str) -> WorkspaceScan:
    return _walk(Path(root))


def scan_workspace(task: Task) -> WorkspaceScan:
    """Walk ``task``'s workspace/. A task that records its workspace's sha256 (which :func:`rollbox.tasks.load_task`
    checked) is walked once per process; any other, at every call.

    Raises:
        OSError: the workspace cannot be read.
    """
    if task.workspace_sha256 is not None:
        return _recorded(os.path.realpath(task.workspace), task.workspace_sha256)
    return _walk(task.workspace)


@contextlib.asynccontextmanager
async def final_workspace(sandbox: Sandbox, limits: Limits, task: WorkspaceScan) -> AsyncIterator[Path]:
    """The agent's workspace copied out to a host directory for the judge, while the block runs.

    The copy never follows a link and takes at most what the sandbox can hold: the task's workspace (``task``,
    overlaid or copied in, which the disk limit does not count) and what the sandbox's disk could hold besides,
    in at most 20,000 entries more than the task's.

    Raises:
        TreeTooLarge: the agent's workspace holds more than that (the agent's doing).
        OSError: the copy failed on the host.
    """
    root = os.environ.get("ROLLBOX_SCRATCH_DIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None)
    with tempfile.TemporaryDirectory(prefix="rollbox-episode-", dir=root) as scratch:
        workspace = Path(scratch) / "workspace"
        await sandbox.read_tree(
            workspace, max_bytes=task.bytes + limits.disk_bytes, max_files=task.entries + _MAX_NEW_FILES
        )
        yield workspace
