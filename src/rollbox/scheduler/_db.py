"""The job store's database: one SQLite file in WAL mode, its schema, and the rows as Python values."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._db_errors import damaged, damaged_store, store_error
from ._model import Job, JobResult, Requirements
from ._states import JobState

__all__ = ["Database", "job_from_row", "requirements_from_row", "result_from_row", "stored_problem"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    key TEXT UNIQUE,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL,
    priority INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    requirements TEXT NOT NULL,
    pool TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    not_before REAL NOT NULL DEFAULT 0,
    deadline REAL,
    lease_owner TEXT,
    lease_expires REAL,
    worker TEXT,
    submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(priority DESC, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS jobs_leased ON jobs(lease_owner, lease_expires) WHERE lease_owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_deadline ON jobs(deadline) WHERE deadline IS NOT NULL AND state = 'pending';
CREATE INDEX IF NOT EXISTS jobs_run ON jobs(run_id, state);
CREATE TABLE IF NOT EXISTS transitions (
    job_id INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    source TEXT,
    target TEXT NOT NULL,
    at REAL NOT NULL,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions(job_id);
CREATE TABLE IF NOT EXISTS attempts (
    job_id INTEGER NOT NULL,
    number INTEGER NOT NULL,
    owner TEXT NOT NULL,
    worker TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    outcome TEXT,
    error TEXT,
    PRIMARY KEY (job_id, number)
);
CREATE TABLE IF NOT EXISTS results (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL UNIQUE,
    state TEXT NOT NULL,
    status TEXT,
    reward REAL,
    output TEXT NOT NULL,
    error TEXT,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS results_at ON results(at);
CREATE TABLE IF NOT EXISTS owners (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    started TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    meta TEXT NOT NULL DEFAULT '{}'
);
"""

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


class Database:
    """One connection to the store's SQLite file, shared by the threads of this process (one at a time).

    WAL mode lets readers (``rollbox jobs``, another process) read while a scheduler writes; ``synchronous=FULL``
    makes every committed transaction durable, power loss included. Several processes may write the same file:
    each write transaction takes the database's write lock at its start (``BEGIN IMMEDIATE``). A failure of the
    file (damaged, disk full, unwritable) is a :class:`StoreError` that says what to do; a transaction it stops is
    rolled back whole.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        #: Set once SQLite found the file damaged: nothing more is written to it.
        self._damaged: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=60.0)
        except (sqlite3.Error, OSError) as exc:
            raise store_error(exc, self.path) from exc
        try:
            with self._errors():
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
            with self.write() as db:
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        db.execute(statement)
        except BaseException:
            self._db.close()
            raise

    @contextlib.contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises.

        Raises:
            StoreError: the file could not be read or written (nothing of the transaction is kept).
        """
        with self._lock, self._errors():
            if self._damaged is not None:
                raise damaged_store(self.path, self._damaged)
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
        """One consistent snapshot to read from.

        Raises:
            StoreError: the file could not be read.
        """
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
            raise damaged_store(self.path, self._damaged)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            if damaged(exc):
                self._damaged = str(exc)
            raise store_error(exc, self.path) from exc

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._db.close()
