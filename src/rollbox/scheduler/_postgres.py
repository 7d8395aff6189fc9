"""The job store on a PostgreSQL server, shared by schedulers on many hosts (``ROLLBOX_DB=postgresql://...``).

The store's code is the same as on SQLite; this module gives it a connection (psycopg 3, the ``postgres`` extra)
that takes ``?`` parameters, and says what a failure of the server means for its user. Every transaction commits
durably (the server's ``synchronous_commit``, on by default, flushes its log before ``COMMIT`` returns). A
connection that broke (the server restarted, the network dropped) is made again at the next transaction; the
transaction it broke raised, and was rolled back or never committed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from ._db import Database
from ._errors import StoreError
from ._sql import PLAIN_INSERT, POSTGRES, Rows

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresDatabase", "shown_url"]

#: How long connecting may take before the server is reported unreachable (unless the URL sets its own).
_CONNECT_TIMEOUT_S = 10
_statements: dict[str, str] = {}


def _native(sql: str) -> str:
    """``sql`` with psycopg's placeholders (``%s`` for ``?``; a literal ``%`` doubled), made once per statement."""
    found = _statements.get(sql)
    if found is None:
        if len(_statements) >= 4096:
            _statements.clear()
        found = _statements[sql] = sql.replace("%", "%%").replace("?", "%s")
    return found


def shown_url(url: str) -> str:
    """``url`` as it may be shown: without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


class _Session:
    """A connection inside one transaction, with the interface of ``sqlite3.Connection`` that the store uses."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        self._connection = connection

    def execute(self, sql: str, parameters: Any = (), /) -> Rows:
        return self._connection.execute(_native(sql), parameters)

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> None:
        rows = list(parameters)
        if not rows:
            return
        if (insert := PLAIN_INSERT.fullmatch(sql)) is not None:  # one COPY stream for the batch
            with self._connection.cursor().copy(f"COPY {insert[1]} ({insert[2]}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            return
        self._connection.cursor().executemany(_native(sql), rows)


class PostgresDatabase(Database):
    """One connection to the store's PostgreSQL database, shared by the threads of this process (one at a time).

    Writes run at ``READ COMMITTED`` with the row locks and advisory locks of :data:`rollbox.scheduler._sql.POSTGRES`;
    reads see one snapshot (``REPEATABLE READ``, read only).

    Args:
        url: ``postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?options]`` (libpq's URL; the database must
            exist; its schema is made at the first connection).

    Raises:
        StoreError: psycopg is not installed, the server cannot be reached, or the database holds something else.
    """

    dialect = POSTGRES

    def __init__(self, url: str) -> None:
        self.url = url
        self.location = shown_url(url)
        self.path = None
        self._lock = threading.RLock()
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError(
                f"the job store {self.location} is on PostgreSQL, which needs psycopg: pip install 'rollbox[postgres]' "
                f"({exc})",
                path=self.location,
            ) from None
        self._psycopg = psycopg
        self._connection: psycopg.Connection[Any] | None = None
        self._closed = False
        try:
            self._upgrade()
        except BaseException:
            self.close()
            raise

    def _connected(self) -> psycopg.Connection[Any]:
        """The connection, made again when it broke."""
        connection = self._connection
        if connection is not None and not connection.closed and not connection.broken:
            return connection
        if self._closed:
            raise StoreError(f"the job store {self.location} is closed", path=self.location)
        settings = self._psycopg.conninfo.conninfo_to_dict(self.url)
        timeout = {} if "connect_timeout" in settings else {"connect_timeout": _CONNECT_TIMEOUT_S}
        self._connection = self._psycopg.connect(self.url, autocommit=True, **timeout)  # type: ignore[arg-type]
        return self._connection

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[_Session]:
        with self._lock, self._errors():
            connection = self._connected()
            try:
                connection.execute(begin)
            except self._psycopg.OperationalError:
                if not connection.broken:
                    raise
                # It broke since its last transaction (the server restarted, or ended it): nothing of this one
                # was sent, so it begins again on a new connection.
                connection = self._connected()
                connection.execute(begin)
            try:
                yield _Session(connection)
                connection.execute("COMMIT")
            except BaseException:
                if not connection.closed and not connection.broken:
                    with contextlib.suppress(self._psycopg.Error):
                        connection.execute("ROLLBACK")
                raise

    def write(self) -> contextlib.AbstractContextManager[_Session]:
        return self._transaction("BEGIN")

    def read(self) -> contextlib.AbstractContextManager[_Session]:
        return self._transaction("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")

    def verify(self) -> None:
        """Check that the server answers (its own checks keep its files whole).

        Raises:
            StoreError: it cannot be reached.
        """
        with self.read() as db:
            db.execute("SELECT 1").fetchall()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except self._psycopg.Error as exc:
            raise self._store_error(exc) from exc

    def _store_error(self, exc: Exception) -> StoreError:
        """What went wrong with the server, and what to do."""
        errors = self._psycopg.errors
        what = " ".join(str(exc).split()) or type(exc).__name__
        where = self.location
        if isinstance(exc, errors.DiskFull):
            message = (
                f"the job store {where} could not be written: the server's disk is full ({what}). What was committed "
                "is kept and this change was rolled back: free space on the server, then run again"
            )
        elif isinstance(exc, errors.InsufficientPrivilege):
            message = (
                f"the job store {where} refused this user ({what}): grant it the right to create and write tables in "
                "that database (or schema), or give ROLLBOX_DB another user"
            )
        elif isinstance(exc, errors.DeadlockDetected | errors.SerializationFailure | errors.LockNotAvailable):
            message = f"the job store {where} was busy with another scheduler ({what}); nothing was written: run again"
        elif isinstance(exc, self._psycopg.OperationalError):
            message = (
                f"the job store {where} cannot be reached ({what}): check that the PostgreSQL server is running and "
                "that ROLLBOX_DB (or --db) names it; what was committed is kept"
            )
        else:
            message = f"the job store {where} could not be read or written ({what}); what was committed is kept"
        return StoreError(message, path=where)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._connection is not None:
                self._connection.close()
