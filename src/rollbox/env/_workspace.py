"""The agent's workspace: seeded from the task, listed for the agent, handed to the judge at the end, and the
task's visible tests.

Seeding and export are one function each, so that they can move to copy-on-write workspaces without touching the
episode.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from rollbox.sandbox import Limits, Sandbox
from rollbox.tasks import Task

__all__ = ["final_workspace", "listing", "seed_workspace", "visible_tests"]

_IGNORED = frozenset({"__pycache__", ".git"})
_MAX_FILES = 20_000


async def seed_workspace(sandbox: Sandbox, task: Task) -> None:
    """Lay the task's workspace into the sandbox's /workspace."""
    await sandbox.write_tree(task.workspace)


@contextlib.asynccontextmanager
async def final_workspace(sandbox: Sandbox, limits: Limits) -> AsyncIterator[Path]:
    """The agent's workspace copied out to a host directory for the judge, while the block runs.

    The copy never follows a link and takes at most what the sandbox's disk could hold (and 20,000 entries).

    Raises:
        TreeTooLarge: the agent's workspace holds more than that (the agent's doing).
        OSError: the copy failed on the host.
    """
    root = os.environ.get("ROLLBOX_SCRATCH_DIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK | os.X_OK) else None)
    with tempfile.TemporaryDirectory(prefix="rollbox-episode-", dir=root) as scratch:
        workspace = Path(scratch) / "workspace"
        await sandbox.read_tree(workspace, max_bytes=limits.disk_bytes, max_files=_MAX_FILES)
        yield workspace


def _walk(root: Path) -> list[str]:
    found: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as entries:
            for entry in entries:
                if entry.name in _IGNORED:
                    continue
                child = f"{rel}/{entry.name}" if rel else entry.name
                if entry.is_dir(follow_symlinks=False):
                    stack.append(child)
                    found.append(child + "/")
                else:
                    found.append(child)
    return sorted(found)


def listing(task: Task, *, limit: int = 200) -> str:
    """The task's workspace as the agent first sees it: one path a line (directories end in ``/``)."""
    paths = _walk(task.workspace)
    shown = paths[:limit]
    more = f"\n... and {len(paths) - limit} more" if len(paths) > limit else ""
    return "\n".join(shown) + more if shown else "(the workspace is empty)"


def _is_test(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def visible_tests(task: Task) -> tuple[list[str], list[str]]:
    """The task's visible tests (workspace files named ``test_*.py`` or ``*_test.py``, as the judge names them)
    and the files they need beside them: the ``conftest.py`` and ``__init__.py`` files of their directories and
    those above. Paths are workspace-relative."""
    paths = [p for p in _walk(task.workspace) if not p.endswith("/")]
    tests = [p for p in paths if _is_test(p)]
    folders = {""} | {"/".join(t.split("/")[:i]) for t in tests for i in range(1, t.count("/") + 1)}
    support = [
        p for p in paths if p.rsplit("/", 1)[-1] in ("conftest.py", "__init__.py") and (p.rpartition("/")[0] in folders)
    ]
    return tests, support
