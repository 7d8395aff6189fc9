"""Sandbox uids: which host uid each live sandbox runs as, and which rollbox process owns it, on one lock file.

Each sandbox runs as a host uid of its own, ``UID_BASE + n``. Byte ``n`` of ``<state>/uids.lock`` is locked by the
process whose sandbox runs as that uid, with an open file description lock (``F_OFD_SETLK``): the kernel drops it
when that process dies, however it dies, and every rollbox process on the host sees it. One descriptor holds all
of a process's uids (a lock file per uid cost a descriptor per sandbox, and with thousands open, descriptors run
out). A sandbox's directory records its uid, so the same lock says whether its owner lives (see ``_state``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import struct
import threading
from collections.abc import Iterator
from pathlib import Path

from rollbox.sandbox._errors import SandboxError

__all__ = ["UID_BASE", "UID_COUNT", "UidLocks"]

#: Host uids of sandboxes are UID_BASE + n: far above any login or system account.
UID_BASE = 1_100_000
UID_COUNT = 65_536
#: struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for an open file description lock), padding.
_FLOCK = struct.Struct("@hhqqi4x")


def _lock(fd: int, kind: int, n: int) -> bool:
    """Set (or with ``F_UNLCK`` clear) the lock on byte ``n``; False when another description holds it."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, n, 1, 0))
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class UidLocks:
    """This process's sandbox uids, all held through one descriptor of the lock file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd: int | None = None
        self._held: set[int] = set()  # the lock file does not keep our own locks from each other
        self._mutex = threading.Lock()

    def take(self) -> int:
        """Reserve a uid no live sandbox of any process uses; returns it.

        Raises:
            SandboxError: all of them are in use.
            OSError: the lock file cannot be opened or locked (out of descriptors, say).
        """
        with self._mutex:
            if self._fd is None:
                self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            start = secrets.randbelow(UID_COUNT)  # not the random module's: that state is the user's
            for i in range(UID_COUNT):
                n = (start + i) % UID_COUNT
                if n not in self._held and _lock(self._fd, fcntl.F_WRLCK, n):
                    self._held.add(n)
                    return UID_BASE + n
        raise SandboxError(
            f"all {UID_COUNT} sandbox uids ({UID_BASE}-{UID_BASE + UID_COUNT - 1}) are in use by live sandboxes "
            "on this host: close some"
        )

    def release(self, uid: int) -> None:
        """Free ``uid`` (taken with :meth:`take`) for any process's next sandbox."""
        n = uid - UID_BASE
        with self._mutex:
            if n in self._held and self._fd is not None:
                _lock(self._fd, fcntl.F_UNLCK, n)
                self._held.discard(n)

    @contextlib.contextmanager
    def abandoned(self, uid: int) -> Iterator[bool]:
        """Whether no process holds ``uid`` (its owner died), holding it meanwhile (through a description of its
        own, which this process's own locks keep out too) so that no new sandbox takes it while a reaper clears
        what the dead one left."""
        n = uid - UID_BASE
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            yield 0 <= n < UID_COUNT and _lock(fd, fcntl.F_WRLCK, n)
        finally:
            os.close(fd)  # its lock goes with it
