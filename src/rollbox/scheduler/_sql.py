"""What differs between the job store's two databases, SQLite and PostgreSQL, in one place: column types, index
hints, row locks, how writers are serialized, and the connection's interface as the store's code sees it.

The store's statements are written once, with ``?`` for parameters; each :class:`Dialect` fills in the few clauses
that differ. SQLite serializes every write transaction (``BEGIN IMMEDIATE`` takes the file's write lock), so its
row locks and serializing locks are empty. PostgreSQL runs transactions side by side (``READ COMMITTED``): a
transaction locks the rows it will change (``FOR UPDATE``, always in id order, so that two never wait for each other
in a circle), leasing passes over rows another scheduler is leasing (``SKIP LOCKED``), and the few steps that must
be one at a time across schedulers take a transaction-scoped advisory lock (:class:`Serial`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["PLAIN_INSERT", "POSTGRES", "SQLITE", "Dialect", "Rows", "Serial", "Session"]

#: A plain insert of one row (no conflict clause, nothing returned): each database writes a batch of them its own
#: fastest way (SQLite in one statement of many rows, PostgreSQL with ``COPY``), not a statement per row.
PLAIN_INSERT = re.compile(r"INSERT INTO (\w+) \(([\w, ]+)\) VALUES \(\?(?:, \?)*\)")


class Rows(Protocol):
    """What a statement returns: its rows."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...

    def close(self) -> None: ...


class Session(Protocol):
    """A connection inside one transaction, as the store's code uses it (``sqlite3.Connection``'s interface)."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Rows: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Any: ...


class Serial(enum.IntEnum):
    """The steps that run one at a time across every scheduler sharing a store (the advisory lock's key)."""

    #: Upgrading the schema: two schedulers started at once on a new database make it once.
    SCHEMA = 0x726F6C01
    #: Submitting: new ids are the next after the largest, and an idempotency key is looked up, then inserted.
    SUBMIT = 0x726F6C02
    #: Writing results: their sequence numbers are taken in commit order, so that a reader that follows results
    #: by sequence number (``results(after=...)``) never passes over one committed later with a smaller number.
    RESULTS = 0x726F6C03


@dataclass(frozen=True)
class Dialect:
    """The clauses of one database."""

    name: str
    #: The type of integer columns (64-bit).
    integer: str
    #: The type of the columns of seconds (times, deadlines) and rewards.
    real: str
    #: The type and constraint of a key the database numbers itself, in insertion order (``results.seq``).
    serial: str
    #: The column that orders ``transitions`` by insertion (SQLite's implicit ``rowid``; a column in PostgreSQL).
    insertion: str
    #: That column's definition in ``transitions`` (empty where it is implicit).
    insertion_column: str
    #: After a ``SELECT`` of rows the transaction will change: lock them until it ends (waiting for their holder).
    for_update: str
    #: The same, passing over rows another transaction holds (leasing, reclaiming: the next pass takes them).
    skip_locked: str
    #: Whether ``INDEXED BY`` names the index a query must use (SQLite's planner otherwise scans the table when the
    #: partial index's condition is not spelled out as it expects).
    hints: bool
    #: The statement that takes a :class:`Serial` lock until the transaction ends, or ``None`` where every write
    #: transaction runs alone already.
    serialize_sql: str | None
    #: The names of the tables of the store's schema.
    tables_sql: str
    #: The names of the columns of table ``?``, in order.
    columns_sql: str

    def indexed(self, index: str) -> str:
        """The hint that a query of ``jobs`` uses ``index`` (empty where the database takes no hints)."""
        return f"INDEXED BY {index}" if self.hints else ""

    def serialize(self, db: Session, step: Serial) -> None:
        """Run the rest of this transaction alone among those that take the same ``step``."""
        if self.serialize_sql is not None:
            db.execute(self.serialize_sql, (int(step),)).fetchall()


SQLITE = Dialect(
    name="sqlite",
    integer="INTEGER",
    real="REAL",
    serial="INTEGER PRIMARY KEY AUTOINCREMENT",
    insertion="rowid",
    insertion_column="",
    for_update="",
    skip_locked="",
    hints=True,
    serialize_sql=None,
    tables_sql="SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite!_%' ESCAPE '!'",
    columns_sql="SELECT name FROM pragma_table_info(?) ORDER BY cid",
)
POSTGRES = Dialect(
    name="postgresql",
    integer="BIGINT",
    real="DOUBLE PRECISION",
    serial="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
    insertion="seq",
    insertion_column="seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,",
    for_update=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    hints=False,
    serialize_sql="SELECT pg_advisory_xact_lock(?)",
    tables_sql="SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
    columns_sql=(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = ? ORDER BY ordinal_position"
    ),
)
