"""The job store's schema, as numbered migrations: a new store is made by running them all, and a store made by an
older rollbox is brought up to date by running those it lacks, in the same transaction that reads its version.

``schema_version`` holds the version a store is at. A store with no such table was made before versions were
recorded: it is version 1 if it holds exactly version 1's tables and columns (every rollbox before versions made
that same schema), and is refused otherwise; so is a store of a newer version than this rollbox knows, and a
database that holds tables of something else. Nothing is ever read from a schema this code does not know.

Versions:
    1. The jobs, their transitions, attempts and results, the scheduler processes (owners), the runs.
    2. Idempotency keys are unique per tenant (``UNIQUE (tenant, key)``), not across tenants: one tenant's key never
       names, nor refuses, another tenant's job.
"""

from __future__ import annotations

from collections.abc import Callable

from ._errors import StoreError
from ._sql import Dialect, Serial, Session

__all__ = ["LATEST", "current", "upgrade"]

_JOBS = """
CREATE TABLE {table} (
    id {integer} PRIMARY KEY,
    run_id TEXT NOT NULL,
    key TEXT{key},
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    digest TEXT NOT NULL,
    state TEXT NOT NULL,
    priority {integer} NOT NULL,
    tenant TEXT NOT NULL,
    requirements TEXT NOT NULL,
    pool TEXT NOT NULL,
    attempts {integer} NOT NULL DEFAULT 0,
    failures {integer} NOT NULL DEFAULT 0,
    max_attempts {integer} NOT NULL,
    not_before {real} NOT NULL DEFAULT 0,
    deadline {real},
    lease_owner TEXT,
    lease_expires {real},
    worker TEXT,
    submitted_at {real} NOT NULL,
    updated_at {real} NOT NULL
);
"""

_JOBS_INDEXES = """
CREATE INDEX jobs_queue ON jobs(priority DESC, id) WHERE state = 'pending';
CREATE INDEX jobs_leased ON jobs(lease_owner, lease_expires) WHERE lease_owner IS NOT NULL;
CREATE INDEX jobs_deadline ON jobs(deadline) WHERE deadline IS NOT NULL AND state = 'pending';
CREATE INDEX jobs_run ON jobs(run_id, state);
"""

_VERSION_1 = (
    _JOBS
    + _JOBS_INDEXES
    + """
CREATE TABLE transitions (
    {insertion_column}
    job_id {integer} NOT NULL,
    attempt {integer} NOT NULL,
    source TEXT,
    target TEXT NOT NULL,
    at {real} NOT NULL,
    reason TEXT
);
CREATE INDEX transitions_job ON transitions(job_id);
CREATE TABLE attempts (
    job_id {integer} NOT NULL,
    number {integer} NOT NULL,
    owner TEXT NOT NULL,
    worker TEXT,
    started_at {real} NOT NULL,
    ended_at {real},
    outcome TEXT,
    error TEXT,
    PRIMARY KEY (job_id, number)
);
CREATE TABLE results (
    seq {serial},
    job_id {integer} NOT NULL UNIQUE,
    state TEXT NOT NULL,
    status TEXT,
    reward {real},
    output TEXT NOT NULL,
    error TEXT,
    at {real} NOT NULL
);
CREATE INDEX results_at ON results(at);
CREATE TABLE owners (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid {integer} NOT NULL,
    started TEXT NOT NULL,
    at {real} NOT NULL
);
CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    created_at {real} NOT NULL,
    meta TEXT NOT NULL DEFAULT '{{}}'
);
"""
)

#: The tables and columns of version 1, which a store made before versions were recorded must have exactly.
_V1_COLUMNS = {
    "jobs": ["id", "run_id", "key", "kind", "payload", "digest", "state", "priority", "tenant", "requirements", "pool",
             "attempts", "failures", "max_attempts", "not_before", "deadline", "lease_owner", "lease_expires", "worker",
             "submitted_at", "updated_at"],
    "transitions": ["job_id", "attempt", "source", "target", "at", "reason"],
    "attempts": ["job_id", "number", "owner", "worker", "started_at", "ended_at", "outcome", "error"],
    "results": ["seq", "job_id", "state", "status", "reward", "output", "error", "at"],
    "owners": ["id", "host", "pid", "started", "at"],
    "runs": ["id", "created_at", "meta"],
}  # fmt: skip


def _run(db: Session, dialect: Dialect, script: str, **names: str) -> None:
    fields = {
        "integer": dialect.integer,
        "real": dialect.real,
        "serial": dialect.serial,
        "insertion_column": dialect.insertion_column,
        **names,
    }
    for statement in script.format(**fields).split(";"):
        if statement.strip():
            db.execute(statement)


def _version_1(db: Session, dialect: Dialect) -> None:
    _run(db, dialect, _VERSION_1, table="jobs", key=" UNIQUE")


def _version_2(db: Session, dialect: Dialect) -> None:
    # A column's UNIQUE cannot be dropped in SQLite: the table is made again, its rows copied in the same order.
    _run(db, dialect, _JOBS, table="jobs_next", key="")
    db.execute("INSERT INTO jobs_next SELECT * FROM jobs")
    db.execute("DROP TABLE jobs")
    db.execute("ALTER TABLE jobs_next RENAME TO jobs")
    _run(db, dialect, _JOBS_INDEXES + "CREATE UNIQUE INDEX jobs_key ON jobs(tenant, key);")


#: Each version's migration from the one before, in order: version ``n`` is ``_MIGRATIONS[n - 1]``.
_MIGRATIONS: list[Callable[[Session, Dialect], None]] = [_version_1, _version_2]
LATEST = len(_MIGRATIONS)


def _found_version(db: Session, dialect: Dialect, where: str) -> int:
    """The version of the store's schema (0 for an empty database).

    Raises:
        StoreError: the database holds tables that are not a job store's, or a schema this rollbox does not know.
    """
    tables = {name for (name,) in db.execute(dialect.tables_sql)}
    if "schema_version" in tables:
        (version,) = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
        if version is not None and version > LATEST:
            raise StoreError(
                f"the job store {where} has schema version {version}, newer than this rollbox knows ({LATEST}): "
                "upgrade rollbox to use it (pip install -U rollbox), or point ROLLBOX_DB (or ROLLBOX_HOME) at "
                "another store",
                path=where,
            )
        if version is not None:
            return int(version)
    if not tables:
        return 0
    found = {name: [c for (c,) in db.execute(dialect.columns_sql, (name,))] for name in _V1_COLUMNS}
    expected = dict(_V1_COLUMNS)
    if dialect.insertion_column:  # the order of transitions is a column of their own there
        expected["transitions"] = [dialect.insertion, *expected["transitions"]]
    if tables == set(_V1_COLUMNS) and found == expected:
        return 1  # made before versions were recorded: every such rollbox made version 1
    raise StoreError(
        f"{where} is not a job store this rollbox knows (its tables: {', '.join(sorted(tables))}); rollbox "
        "wrote nothing to it. Give the job store a database (or file) of its own: another ROLLBOX_DB (a PostgreSQL "
        "database, or one schema of it with '?options=-csearch_path%3DNAME'), or another ROLLBOX_HOME",
        path=where,
    )


def upgrade(db: Session, dialect: Dialect, where: str) -> int:
    """Bring the store's schema to :data:`LATEST` inside the transaction ``db`` (make it, when the database is
    empty); returns the version it was at.

    Raises:
        StoreError: the database holds something else, or a newer schema (nothing is written).
    """
    dialect.serialize(db, Serial.SCHEMA)
    version = _found_version(db, dialect, where)
    if version == LATEST:
        return version
    for migrate in _MIGRATIONS[version:]:
        migrate(db, dialect)
    if "schema_version" not in {name for (name,) in db.execute(dialect.tables_sql)}:
        db.execute(f"CREATE TABLE schema_version (version {dialect.integer} NOT NULL)")
    db.execute("DELETE FROM schema_version")
    db.execute("INSERT INTO schema_version (version) VALUES (?)", (LATEST,))
    return version


def current(db: Session, dialect: Dialect) -> bool:
    """Whether the store is at :data:`LATEST` already (a read: the usual answer needs no write lock)."""
    if "schema_version" not in {name for (name,) in db.execute(dialect.tables_sql)}:
        return False
    (version,) = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return bool(version == LATEST)
