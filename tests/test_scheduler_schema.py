"""The job store's schema is versioned, on each store: a store made before versions were recorded is upgraded with
every job kept; a newer schema, a database of something else, or an unknown old one is refused with one line and
left as it was; idempotency keys are unique per tenant."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rollbox.scheduler import IdempotencyConflict, JobSpec, JobState, JobStore, Requirements, StoreError
from rollbox.scheduler._schema import LATEST, _version_1
from rollbox.scheduler._sqlite import SqliteDatabase
from rollbox.scheduler._store import Ending, open_database

#: The schema every rollbox wrote before versions were recorded (``_db.py`` until then), as it wrote it.
_BEFORE_VERSIONS = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL, key TEXT UNIQUE, kind TEXT NOT NULL, payload TEXT NOT NULL,
    digest TEXT NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL, tenant TEXT NOT NULL,
    requirements TEXT NOT NULL, pool TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL, not_before REAL NOT NULL DEFAULT 0,
    deadline REAL, lease_owner TEXT, lease_expires REAL, worker TEXT, submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_queue ON jobs(priority DESC, id) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS jobs_leased ON jobs(lease_owner, lease_expires) WHERE lease_owner IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_deadline ON jobs(deadline) WHERE deadline IS NOT NULL AND state = 'pending';
CREATE INDEX IF NOT EXISTS jobs_run ON jobs(run_id, state);
CREATE TABLE IF NOT EXISTS transitions (job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, source TEXT,
    target TEXT NOT NULL, at REAL NOT NULL, reason TEXT);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions(job_id);
CREATE TABLE IF NOT EXISTS attempts (job_id INTEGER NOT NULL, number INTEGER NOT NULL, owner TEXT NOT NULL,
    worker TEXT, started_at REAL NOT NULL, ended_at REAL, outcome TEXT, error TEXT, PRIMARY KEY (job_id, number));
CREATE TABLE IF NOT EXISTS results (seq INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER NOT NULL UNIQUE,
    state TEXT NOT NULL, status TEXT, reward REAL, output TEXT NOT NULL, error TEXT, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS results_at ON results(at);
CREATE TABLE IF NOT EXISTS owners (id TEXT PRIMARY KEY, host TEXT NOT NULL, pid INTEGER NOT NULL,
    started TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS runs (id TEXT PRIMARY KEY, created_at REAL NOT NULL, meta TEXT NOT NULL DEFAULT '{}');
"""


def _spec(key: str, tenant: str = "default", argv: str = "true") -> tuple[JobSpec, Requirements]:
    return JobSpec(kind="exec", payload={"argv": [argv]}, key=key, tenant=tenant), Requirements()


def _execute(target: str | Path, script: str) -> None:
    """Run ``script`` on the bare database (no rollbox in between)."""
    if isinstance(target, Path):
        with sqlite3.connect(target) as db:
            db.executescript(script)
        return
    import psycopg

    with psycopg.connect(target, autocommit=True) as db:
        for statement in script.split(";"):
            if statement.strip():
                db.execute(statement)


def _dump(target: str | Path) -> list[tuple[object, ...]]:
    """Every table and row of the database, read without rollbox."""
    if isinstance(target, Path):
        with sqlite3.connect(target) as db:
            names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            return [(n, *row) for n in names for row in db.execute(f"SELECT * FROM {n}")]
    import psycopg

    with psycopg.connect(target) as db:
        names = [
            n
            for (n,) in db.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1"
            )
        ]
        return [(n, *row) for n in names for row in db.execute(f"SELECT * FROM {n}")]


def _version(store: JobStore) -> int:
    with store.db.read() as db:
        return int(db.execute("SELECT version FROM schema_version").fetchone()[0])


def _fill(store: JobStore) -> list[int]:
    """Jobs of two tenants, one leased and ended, one pending; returns their ids."""
    jobs = store.submit([_spec("a", "t1"), _spec("b", "t1"), _spec("c", "t2")])
    (leased, *_) = store.lease("me", lambda offered: [(offered[0].id, "w")], window=1, lease_s=60)
    store.finish("me", [Ending(job_id=leased.id, attempt=1, target=JobState.COMPLETED, status="ok", at=2.0)])
    return [job.id for job, _ in jobs]


def test_a_store_made_before_versions_is_upgraded_with_every_job_kept(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    _execute(path, _BEFORE_VERSIONS)
    now = 1.0
    with sqlite3.connect(path) as db:  # as the rollbox of then wrote them: one key across tenants
        for id_, key, tenant, state in ((1, "a", "t1", "completed"), (2, "b", "t2", "pending")):
            db.execute(
                "INSERT INTO jobs (id, run_id, key, kind, payload, digest, state, priority, tenant, requirements, "
                "pool, max_attempts, submitted_at, updated_at) VALUES (?, 'r', ?, 'exec', ?, ?, ?, 0, ?, ?, '', 3, "
                "?, ?)",
                (id_, key, '{"argv":["true"]}', _spec(key, tenant)[0].digest(), state, tenant,
                 '{"cpus":1.0,"memory_bytes":0,"resources":{}}', now, now),
            )  # fmt: skip
        db.execute("INSERT INTO results (job_id, state, status, output, at) VALUES (1, 'completed', 'ok', '{}', 2.0)")
        db.execute("INSERT INTO transitions VALUES (1, 0, NULL, 'pending', 1.0, 'submitted')")
    store = JobStore(path)
    assert _version(store) == LATEST
    assert [(j.id, j.key, j.tenant, j.state) for j in store.jobs()] == [
        (1, "a", "t1", JobState.COMPLETED),
        (2, "b", "t2", JobState.PENDING),
    ]
    result = store.result(1)
    assert result is not None and result.status == "ok" and [t.reason for t in store.transitions(1)] == ["submitted"]
    (same, fresh), (other, new) = store.submit([_spec("a", "t1"), _spec("a", "t2")])
    assert (same.id, fresh) == (1, False)  # the same tenant's key names its job, as before
    assert (other.id, new) == (3, True)  # another tenant's same key is another job
    store.close()
    JobStore(path).close()  # at the latest version: opened as it is


def test_upgrading_runs_the_same_migrations_on_each_store(store_target: str | Path) -> None:
    """A store at version 1 (made by version 1's own migration, unstamped as the stores of then were) reaches the
    latest version on SQLite and on PostgreSQL alike, its jobs kept."""
    database = open_database(store_target)
    with database.write() as db:  # back to version 1, empty: what a rollbox before versions left
        for table in ("schema_version", "jobs", "transitions", "attempts", "results", "owners", "runs"):
            db.execute(f"DROP TABLE {table}")
        _version_1(db, database.dialect)
        db.execute(
            "INSERT INTO jobs (id, run_id, key, kind, payload, digest, state, priority, tenant, requirements, pool, "
            "max_attempts, submitted_at, updated_at) VALUES (7, 'r', 'k', 'exec', '{\"argv\":[\"true\"]}', ?, "
            "'pending', 0, 't1', '{\"cpus\":1.0,\"memory_bytes\":0,\"resources\":{}}', '', 3, 1.0, 1.0)",
            (_spec("k", "t1")[0].digest(),),
        )
    database.close()
    store = JobStore(store_target)
    assert _version(store) == LATEST and [(j.id, j.key) for j in store.jobs()] == [(7, "k")]
    assert [job.id for job, _ in store.submit([_spec("k", "t1"), _spec("k", "t2")])] == [7, 8]
    store.close()


def test_idempotency_keys_are_unique_per_tenant(store_target: str | Path) -> None:
    store = JobStore(store_target)
    ids = _fill(store)
    assert len(set(ids)) == 3
    again = store.submit([_spec("a", "t1"), _spec("a", "t2"), _spec("c", "t2")])
    assert [(job.id, new) for job, new in again] == [(ids[0], False), (ids[2] + 1, True), (ids[2], False)]
    with pytest.raises(IdempotencyConflict, match="'a' already names job"):
        store.submit([_spec("a", "t1", argv="false")])
    assert store.submit([_spec("a", "t3", argv="false")])[0][1]  # t3's 'a' is its own
    store.close()


def test_a_newer_schema_is_refused_and_left_as_it_was(store_target: str | Path) -> None:
    store = JobStore(store_target)
    _fill(store)
    store.close()
    _execute(store_target, f"UPDATE schema_version SET version = {LATEST + 1}")
    before = _dump(store_target)
    with pytest.raises(StoreError, match=f"schema version {LATEST + 1}, newer than this rollbox knows .{LATEST}.: "):
        JobStore(store_target)
    assert _dump(store_target) == before


@pytest.mark.parametrize(
    "script",
    [
        "CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)",  # somebody else's database
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, name TEXT)",  # a table named jobs of another shape
        _BEFORE_VERSIONS.replace("meta TEXT NOT NULL DEFAULT '{}'", "notes TEXT"),  # an old schema never released
    ],
    ids=["foreign", "other-jobs", "unknown-old"],
)
def test_a_database_of_something_else_is_refused_and_left_as_it_was(store_target: str | Path, script: str) -> None:
    if isinstance(store_target, str):
        script = script.replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGINT").replace("IF NOT EXISTS ", "")
    _execute(store_target, script)
    before = _dump(store_target)
    with pytest.raises(StoreError, match=r"is not a job store this rollbox knows .its tables: .*rollbox wrote nothing"):
        JobStore(store_target)
    assert _dump(store_target) == before


def test_a_store_at_the_latest_version_is_opened_without_the_write_lock(tmp_path: Path) -> None:
    """Opening a current store only reads it: a scheduler starts while another holds SQLite's write lock."""
    path = tmp_path / "jobs.db"
    JobStore(path).close()
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        SqliteDatabase(path).close()
    finally:
        other.execute("ROLLBACK")
        other.close()
