"""Host-side scratch directories: where a workspace's changes are copied out and a grading's tree is built.

They are made in ``$ROLLBOX_SCRATCH_DIR``, else in /dev/shm where the machine has it (such a tree is small and
lives for one grading or one episode's end: on a disk, creating and removing it costs more than the work done in
it), else in the system's temporary directory.

A process killed outright (SIGKILL, the OOM killer) leaves its directories behind, in memory when they are in
/dev/shm. Each directory's name carries its process's id, and the first directory a process makes removes those
whose process is gone, so that what a killed run left is taken back by the next.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import threading

__all__ = ["scratch_directory"]

#: ``rollbox-<purpose>-<pid>-<random>``: what :func:`scratch_directory` names.
_NAME = re.compile(r"rollbox-[a-z]+-(\d+)-")

_swept: set[str] = set()
_sweeping = threading.Lock()


def scratch_directory(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A temporary directory named ``PREFIX<pid>-...``; ``prefix`` is ``rollbox-<purpose>-``."""
    root = os.environ.get("ROLLBOX_SCRATCH_DIR") or (
        "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) else None
    )
    where = root or tempfile.gettempdir()
    if where not in _swept:
        with _sweeping:
            if where not in _swept:
                _sweep(where)
                _swept.add(where)
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=root)


def _sweep(where: str) -> None:
    """Remove the scratch directories in ``where`` whose process has ended."""
    with contextlib.suppress(OSError), os.scandir(where) as entries:
        for entry in entries:
            found = _NAME.match(entry.name)
            if found is None or not entry.is_dir(follow_symlinks=False) or _alive(int(found[1])):
                continue
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether a process with this id exists (one that reused a dead one's id keeps its directories a while)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
