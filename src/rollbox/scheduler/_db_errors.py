"""What a failure of the job store's file means for its user: SQLite's error (or the system's) as a
:class:`StoreError` that says what happened, where the file is, and what to do."""

from __future__ import annotations

import errno
import os
import sqlite3
import stat
from pathlib import Path

from ._errors import StoreError

__all__ = ["damaged", "damaged_store", "not_a_store", "store_error"]

_DAMAGED = (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


def damaged(exc: BaseException) -> bool:
    """Whether SQLite found the file damaged, or not a database at all."""
    return getattr(exc, "sqlite_errorcode", 0) & 0xFF in _DAMAGED


def damaged_store(path: Path, what: str) -> StoreError:
    """The store's file is damaged (``what``: how SQLite found it so)."""
    return StoreError(
        f"the job store {path} is damaged or is not a job store ({what}); rollbox wrote nothing to it. Move it "
        f"aside ('mv {path} {path}.damaged') to start a new store, or recover its jobs into a new file with "
        f"'sqlite3 {path} .recover | sqlite3 {path.with_name('jobs.recovered.db')}' and move that in its place",
        path=str(path),
    )


#: What a path holds when it is not a regular file, by its type bits.
_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def not_a_store(path: Path) -> StoreError | None:
    """Why the store's file cannot be at ``path`` although something is there (a directory, a named pipe, a
    symbolic link loop, a file this user cannot read and write), or ``None`` when it is a regular file this user
    can use, or nothing (the store is made there). Checked before SQLite opens it: SQLite says only "unable to
    open database file" of a directory or a link loop, and "disk I/O error" of a named pipe."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:  # nothing there, or a symbolic link to nothing: SQLite makes the file
        return None
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            return store_error(exc, path)
        what = "a symbolic link loop, not a SQLite file"
    else:
        if not stat.S_ISREG(mode):
            what = f"{_KINDS.get(stat.S_IFMT(mode), 'neither a file nor a directory')}, not a SQLite file"
        elif os.access(path, os.R_OK | os.W_OK):
            return None
        else:
            return StoreError(
                f"the job store {path} is a file this user (uid {os.geteuid()}) cannot read and write (mode "
                f"{stat.filemode(mode)}); rollbox left it as it is. Give this user access to it (chown, chmod), or "
                "point ROLLBOX_HOME, ROLLBOX_DB or --db at another store",
                path=str(path),
            )
    return StoreError(
        f"the job store {path} is {what}; rollbox left it as it is. Move it aside ('mv {path} {path}.aside'), or "
        "point ROLLBOX_HOME, ROLLBOX_DB or --db at another store",
        path=str(path),
    )


def store_error(exc: sqlite3.Error | OSError, path: Path) -> StoreError:
    """What went wrong with the store's file, where it is and what to do, from SQLite's (or the system's) error."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    number = getattr(exc, "errno", None)
    what = f"{exc}" if isinstance(exc, sqlite3.Error) else f"{exc.strerror or exc}"
    if damaged(exc):
        return damaged_store(path, what)
    if code == sqlite3.SQLITE_FULL or number == errno.ENOSPC or (code == sqlite3.SQLITE_IOERR and _full(path)):
        message = (
            f"the job store {path} could not be written: the disk is full ({what}). What was committed is kept and "
            f"this change was rolled back: free space on the disk that holds {path.parent}, then run again"
        )
    elif code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PERM) or number in (
        errno.EACCES,
        errno.EPERM,
        errno.EROFS,
        errno.ENOTDIR,
        errno.ENOENT,
        errno.EEXIST,
    ):
        message = (
            f"the job store {path} cannot be opened or written ({what}): check that {path.parent} is a writable "
            "directory, or set ROLLBOX_HOME to one"
        )
    elif code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        message = f"the job store {path} stayed locked by another process ({what}); try again when it is done"
    else:  # I/O errors (a failing or full disk among them), and the rest
        message = (
            f"the job store {path} could not be read or written ({what}); nothing committed is lost. Check the disk "
            f"that holds {path.parent} (space, errors), then run again"
        )
    return StoreError(message, path=str(path))


def _full(path: Path) -> bool:
    """Whether the disk that holds ``path`` is (nearly) full: SQLite says only "disk I/O error" when it cannot grow
    its shared-memory file there."""
    try:
        disk = os.statvfs(path.parent)
    except OSError:
        return False
    return disk.f_bavail * disk.f_frsize < 2**20
