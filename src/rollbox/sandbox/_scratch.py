"""rollbox's temporary directories on the host, and what a killed process left of them.

A scratch directory (:func:`scratch_directory`) is where a workspace's changes are copied out and a grading's tree
is built. It is made in ``$ROLLBOX_SCRATCH_DIR``, else in /dev/shm where the machine has it (such a tree is small
and lives for one grading or one episode's end: on a disk, creating and removing it costs more than the work done
in it), else in the system's temporary directory. Other temporary trees (a package checked out for synthesis, a
task set being validated, a ``process`` sandbox's root) may be large and go to the system's temporary directory
(:func:`temporary_directory`, :func:`make_temporary_directory`).

A process killed outright (SIGKILL, the OOM killer) leaves its directories behind, in memory when they are in
/dev/shm. Each directory's name carries its process's id, and the first directory a process makes in a place
removes those there whose process is gone, so that what a killed run left is taken back by the next.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path

__all__ = ["make_temporary_directory", "remove_tree", "scratch_directory", "temporary_directory"]

#: ``rollbox-<purpose>-<pid>-<random>``: what the functions below name (``prefix`` is ``rollbox-<purpose>-``).
_NAME = re.compile(r"rollbox-[a-z]+-(\d+)-")

_swept: set[str] = set()
_sweeping = threading.Lock()


def scratch_directory(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory named ``PREFIX<pid>-...``, in memory where the machine has it."""
    root = os.environ.get("ROLLBOX_SCRATCH_DIR") or (
        "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) else None
    )
    _sweep_once(root or tempfile.gettempdir())
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=root)


def temporary_directory(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory named ``PREFIX<pid>-...`` in the system's temporary directory (on disk)."""
    _sweep_once(tempfile.gettempdir())
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-")


def make_temporary_directory(prefix: str) -> Path:
    """The same, for a directory its maker removes itself (with :func:`remove_tree`)."""
    _sweep_once(tempfile.gettempdir())
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def remove_tree(path: str | os.PathLike[str]) -> None:
    """Remove a tree a program wrote: ``rm`` walks any depth without recursing (Python's rmtree would overflow)."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", os.fspath(path)], check=False, stdin=subprocess.DEVNULL)


def _sweep_once(where: str) -> None:
    if where not in _swept:
        with _sweeping:
            if where not in _swept:
                _sweep(where)
                _swept.add(where)


def _sweep(where: str) -> None:
    """Remove the scratch directories in ``where`` whose process has ended."""
    with contextlib.suppress(OSError), os.scandir(where) as entries:
        for entry in entries:
            found = _NAME.match(entry.name)
            if found is None or not entry.is_dir(follow_symlinks=False) or _alive(int(found[1])):
                continue
            remove_tree(entry.path)


def _alive(pid: int) -> bool:
    """Whether a process with this id exists (one that reused a dead one's id keeps its directories a while)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
