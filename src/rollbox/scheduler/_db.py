"""The job store's database as the store sees it, whichever it is (a SQLite file, or a PostgreSQL server), and
its rows as Python values."""

from __future__ import annotations

import abc
import contextlib
import json
from pathlib import Path
from typing import Any

from ._model import Job, JobResult, Requirements
from ._schema import current, upgrade
from ._sql import Dialect, Session
from ._states import JobState

__all__ = [
    "Database",
    "is_postgres_url",
    "job_from_row",
    "requirements_from_row",
    "result_from_row",
    "stored_problem",
]


#: The columns of ``jobs`` that :func:`job_from_row` reads, in its order.
JOB_COLUMNS = (
    "id, run_id, key, kind, payload, state, priority, tenant, requirements, pool, attempts, max_attempts, "
    "submitted_at, updated_at, lease_owner, worker, deadline"
)
RESULT_COLUMNS = "job_id, state, status, reward, output, error, at, seq"


_requirements: dict[tuple[str, str], Requirements] = {}
#: What is wrong with stored requirements that do not pass today's checks (by the same key).
_problems: dict[tuple[str, str], str] = {}


def requirements_from_row(text: str, pool: str) -> Requirements:
    """The :class:`Requirements` stored as ``text`` (``requirements`` column) and ``pool``; parsed once for each
    distinct value (the jobs of a run mostly share a few), as leasing reads them for every job it offers."""
    found = _requirements.get((text, pool))
    if found is None:
        if len(_requirements) >= 4096:
            _requirements.clear()
            _problems.clear()
        needs = json.loads(text)
        try:
            found = Requirements(
                cpus=needs["cpus"], memory_bytes=needs["memory_bytes"], resources=needs["resources"], pool=pool
            )
        except ValueError as exc:
            # Written by a rollbox that did not check them: shown as stored (leasing fails such a job).
            _problems[(text, pool)] = str(exc)
            found = object.__new__(Requirements)
            for name in ("cpus", "memory_bytes", "resources"):
                object.__setattr__(found, name, needs[name])
            object.__setattr__(found, "pool", pool)
        _requirements[(text, pool)] = found
    return found


def stored_problem(text: str, pool: str) -> str | None:
    """What is wrong with the requirements stored as ``text`` and ``pool``, or ``None`` when they are valid."""
    requirements_from_row(text, pool)
    return _problems.get((text, pool))


def job_from_row(row: tuple[Any, ...]) -> Job:
    """A :class:`Job` from a row of :data:`JOB_COLUMNS`."""
    (id_, run_id, key, kind, payload, state, priority, tenant, req, pool, attempts, max_attempts) = row[:12]
    return Job(
        id=id_,
        run_id=run_id,
        key=key,
        kind=kind,
        payload=json.loads(payload),
        state=JobState(state),
        priority=priority,
        tenant=tenant,
        requirements=requirements_from_row(req, pool),
        attempts=attempts,
        max_attempts=max_attempts,
        submitted_at=row[12],
        updated_at=row[13],
        lease_owner=row[14],
        worker=row[15],
        deadline=row[16],
    )


def result_from_row(row: tuple[Any, ...]) -> JobResult:
    """A :class:`JobResult` from a row of :data:`RESULT_COLUMNS`."""
    job_id, state, status, reward, output, error, at, seq = row
    return JobResult(
        job_id=job_id,
        state=JobState(state),
        status=status,
        reward=reward,
        output=json.loads(output),
        error=error,
        at=at,
        seq=seq,
    )


class Database(abc.ABC):
    """A connection to the store's database, shared by the threads of this process (one at a time): write
    transactions, consistent reads, and the :class:`Dialect` of the SQL it speaks. A failure of the database is a
    :class:`StoreError` that says what to do; a transaction it stops is rolled back whole.

    Attributes:
        dialect: What its SQL needs that the other database's does not.
        location: Where it is, as shown to users (a file's path; a URL without its password).
        path: The SQLite file, or ``None`` for a server.
    """

    dialect: Dialect
    location: str
    path: Path | None

    @abc.abstractmethod
    def write(self) -> contextlib.AbstractContextManager[Session]:
        """One write transaction: committed when the block ends, rolled back if it raises.

        Raises:
            StoreError: the database could not be read or written (nothing of the transaction is kept).
        """

    @abc.abstractmethod
    def read(self) -> contextlib.AbstractContextManager[Session]:
        """One consistent snapshot to read from.

        Raises:
            StoreError: the database could not be read.
        """

    @abc.abstractmethod
    def verify(self) -> None:
        """Check the database before anything is written to it.

        Raises:
            StoreError: it is damaged, or cannot be reached.
        """

    @abc.abstractmethod
    def close(self) -> None:
        """Close the connection (idempotent)."""

    def _upgrade(self) -> None:
        """Make the schema, or bring it up to date (a read first: a store at the current version takes no write
        lock from the other processes that share it).

        Raises:
            StoreError: the database holds something else, or a newer schema (nothing is written).
        """
        with self.read() as db:
            if current(db, self.dialect):
                return
        with self.write() as db:
            upgrade(db, self.dialect, self.location)


def is_postgres_url(target: str | Path) -> bool:
    """Whether ``target`` names a PostgreSQL database (``postgresql://...`` or ``postgres://...``), not a file."""
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))
