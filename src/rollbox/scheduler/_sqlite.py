"""The job store in one SQLite file in WAL mode: rollbox's embedded default, nothing to start."""

from __future__ import annotations

import contextlib
import itertools
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ._db import Database
from ._db_errors import damaged, damaged_store, not_a_store, store_error
from ._errors import StoreError
from ._sql import PLAIN_INSERT, SQLITE, Rows

__all__ = ["SqliteDatabase"]


#: An update of the rows named by a key (``UPDATE t SET ... WHERE k = ? AND ...``), and only while some columns
#: are still unset (``... AND c IS NULL``), whose every ``?`` is a value.
_KEYED_UPDATE = re.compile(
    r"UPDATE (\w+) SET ([^'?]*(?:\?[^'?]*)*) WHERE (\w+ = \?(?: AND \w+ = \?)*)((?: AND \w+ IS NULL)*)"
)
#: Where SQLite updates from a list of values (``UPDATE ... FROM``).
_UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33, 0)


class _Session:
    """The connection inside one transaction; a batch of plain inserts, or of updates each of its own row, is one
    statement of many rows.

    ``executemany`` steps the statement once per row, and each step lets go of the interpreter's lock and takes it
    back: beside a busy event loop (the scheduler's: its sandboxes' system calls let go of the lock hundreds of times
    a job) every take-back can wait for the loop, and every let-go can make the loop wait. One statement is one step.
    """

    def __init__(self, connection: sqlite3.Connection) -> None:
        self._connection = connection
        #: The most parameters one statement may have (32,766 since SQLite 3.32; 999 before).
        self._most = connection.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)

    def execute(self, sql: str, parameters: Any = (), /) -> Rows:
        return self._connection.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> None:
        rows = list(parameters)
        if not rows:
            return
        if PLAIN_INSERT.fullmatch(sql) is not None:
            head, _, row = sql.rpartition(" VALUES ")
            self._in_chunks(rows, lambda values: f"{head} VALUES {values}", row)
        elif (update := _KEYED_UPDATE.fullmatch(sql)) is not None and _UPDATE_FROM and _distinct(update, rows):
            self._in_chunks(rows, _update_from(update), f"({','.join('?' * len(rows[0]))})")
        else:
            self._connection.executemany(sql, rows)

    def _in_chunks(self, rows: list[Any], statement: Callable[[str], str], row: str) -> None:
        """``statement`` of as many ``row``s of values at once as one statement may hold."""
        per = max(1, self._most // len(rows[0]))
        for start in range(0, len(rows), per):
            chunk = rows[start : start + per]
            self._connection.execute(statement(",".join([row] * len(chunk))), [v for r in chunk for v in r])


def _distinct(update: re.Match[str], rows: list[Any]) -> bool:
    """Whether no two rows name the same key: one statement updates each row once, with one of them (as many
    statements would update it as many times, the last one winning). Keys must be whole numbers (the store's
    are): SQLite would take ``'1'`` for ``1``, which Python tells apart."""
    count = update.group(3).count("?")
    keys = {tuple(r[-count:]) for r in rows}
    return len(keys) == len(rows) and all(type(k) is int for key in keys for k in key)


def _update_from(update: re.Match[str]) -> Callable[[str], str]:
    """The statement that makes ``update`` of each row of a list of values at once: ``UPDATE ... FROM (VALUES ...)``,
    the values' columns (``column1``, ...) in the order of the ``?`` they stand for."""
    table, assignments, where, unset = update.groups()
    numbers = itertools.count(1)
    assignments = re.sub(r"\?", lambda _: f"v.column{next(numbers)}", assignments)
    keys = " AND ".join(f"{table}.{column} = v.column{next(numbers)}" for column in re.findall(r"(\w+) = \?", where))
    keys += "".join(f" AND {table}.{column} IS NULL" for column in re.findall(r"(\w+) IS NULL", unset))
    return lambda values: f"UPDATE {table} SET {assignments} FROM (VALUES {values}) AS v WHERE {keys}"


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
        if (wrong := not_a_store(self.file)) is not None:
            raise wrong
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.file, isolation_level=None, check_same_thread=False, timeout=60.0)
        except (sqlite3.Error, OSError) as exc:
            raise store_error(exc, self.file) from exc
        self._session = _Session(self._db)
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
    def write(self) -> Iterator[_Session]:
        with self._lock, self._errors():
            if self._damaged is not None:
                raise damaged_store(self.file, self._damaged)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._session
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
