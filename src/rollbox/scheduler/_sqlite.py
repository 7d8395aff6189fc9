"""The job store in one SQLite file in WAL mode: rollbox's embedded default, nothing to start."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

from ._db import Database
from ._db_errors import damaged, damaged_store, store_error
from ._errors import StoreError
from ._sql import SQLITE

__all__ = ["SqliteDatabase"]


class SqliteDatabase(Database):
    """One connection to the store's SQLite file, shared by the threads of this process (one at a time).

    WAL mode lets readers (``rollbox jobs``, another process) read while a scheduler writes; ``synchronous=FULL``
    makes every committed transaction durable, power loss included. Several processes may write the same file:
    each write transaction takes the database's write lock at its start (``BEGIN IMMEDIATE``).

    Args:
        path: The file (made with its parent directories when missing).
    """

    dialect = SQLITE

    def __init__(self, path: str | Path) -> None:
        self.path = self.file = Path(path)
        self.location = str(self.file)
        self._lock = threading.RLock()
        #: Set once SQLite found the file damaged: nothing more is written to it.
        self._damaged: str | None = None
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False, timeout=60.0)
        except (sqlite3.Error, OSError) as exc:
            raise store_error(exc, self.file) from exc
        try:
            with self._errors():
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
            try:
                self._upgrade()
            except StoreError:
                # A damaged file may read as a schema of something else (its pages read as garbage, not as
                # damage): what it is, when SQLite's check finds it damaged, is that.
                self.verify()
                raise
        except BaseException:
            self._db.close()
            raise

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors():
            if self._damaged is not None:
                raise damaged_store(self.file, self._damaged)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:  # SQLite may have rolled it back itself (a full disk does)
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._errors():
            self._db.execute("BEGIN")
            try:
                yield self._db
            finally:
                if self._db.in_transaction:
                    self._db.execute("COMMIT")

    def verify(self) -> None:
        """Check the whole file (SQLite's ``quick_check``: every page read, about a second per 800,000 jobs), so
        that a damaged store is found before anything is written to it.

        Raises:
            StoreError: the file is damaged.
        """
        with self.read() as db:
            found = [row[0] for row in db.execute("PRAGMA quick_check")]
        if found != ["ok"]:
            self._damaged = f"quick_check: {found[0].splitlines()[0]}"
            raise damaged_store(self.file, self._damaged)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            if damaged(exc):
                self._damaged = str(exc)
            raise store_error(exc, self.file) from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()
