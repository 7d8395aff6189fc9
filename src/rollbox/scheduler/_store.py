"""The durable job store: every job, transition, attempt and result, in one SQLite file.

Each method is one transaction. A job's result is written in the same transaction that ends its lease, and
only by the holder of that lease (the lease is the owner and the attempt number together): a result computed by
a scheduler that died before this commit is simply never written, the lease expires, and the job runs again;
a result from a lease that expired meanwhile is refused. The ``results`` table holds at most one row per job.
Every move of a job is checked against the state machine, written with its time, and reported as a
``job.transition`` event once committed. A transaction handles its whole batch with a few statements (many jobs
leased, many attempts ended at once), so that a busy scheduler spends little on each job.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from ._db import JOB_COLUMNS, Database, is_postgres_url, job_from_row
from ._errors import IdempotencyConflict, QueueFull
from ._leases import Candidate, LeaseRequest, Moved, chunks, finish_in, lease_in, marks, queue
from ._model import Job, JobSpec, Requirements, Transition, canonical_json, encoded
from ._postgres import PostgresDatabase
from ._reads import StoreReads
from ._reclaim import StoreReclaim
from ._sql import Serial, Session
from ._sqlite import SqliteDatabase
from ._states import JobState
from ._writes import Ending, announce, needs_json, write_moves

__all__ = ["Candidate", "Ending", "JobStore", "LeaseRequest", "open_database"]


def open_database(target: str | Path) -> Database:
    """The database at ``target``: a PostgreSQL URL (``postgresql://...``), or a SQLite file (made with its parent
    directories when missing); its schema made, or brought up to date.

    Raises:
        StoreError: it cannot be opened, or is not a job store this rollbox knows (nothing is written to it).
    """
    return PostgresDatabase(str(target)) if is_postgres_url(target) else SqliteDatabase(target)


class JobStore(StoreReads, StoreReclaim):
    """Jobs in a SQLite file (WAL), or in a PostgreSQL database that schedulers on many hosts share; safe to share
    between threads and between processes.

    Args:
        target: The SQLite file (made with its parent directories when missing), or a PostgreSQL URL
            (``postgresql://USER:PASSWORD@HOST:PORT/DATABASE``; needs the ``postgres`` extra).

    Raises:
        StoreError: the store cannot be opened, or holds a schema this rollbox does not know (see ``_schema``).
    """

    def __init__(self, target: str | Path) -> None:
        self.db = open_database(target)
        #: The SQLite file, or ``None`` for a PostgreSQL store.
        self.path = self.db.path
        #: Where the store is, as shown to users (a URL without its password).
        self.location = self.db.location

    def close(self) -> None:
        """Close the database (idempotent)."""
        self.db.close()

    def verify(self) -> None:
        """Check the store before writing to it: SQLite's whole file (``quick_check``), or that the PostgreSQL
        server answers.

        Raises:
            StoreError: the file is damaged (nothing will be written to it), or the server cannot be reached.
        """
        self.db.verify()

    # -- submission -------------------------------------------------------------------------------------------

    def submit(
        self, specs: Sequence[tuple[JobSpec, Requirements]], *, max_queued: int | None = None
    ) -> list[tuple[Job, bool]]:
        """Add jobs (all or none), each with what it needs; returns each job with whether it is new.

        A spec whose key names a job of the same tenant already returns that job, whatever its state (a key is
        unique within its tenant: another tenant's job with the same key is another job).

        Raises:
            IdempotencyConflict: a key names a job with another kind or payload (nothing is added).
            QueueFull: more than ``max_queued`` jobs would be pending (nothing is added).
        """
        now = time.time()
        texts = [encoded(spec) for spec, _ in specs]
        dialect = self.db.dialect
        with self.db.write() as db:
            dialect.serialize(db, Serial.SUBMIT)  # one submission at a time: its keys looked up, then its ids taken
            known = self._known_keys(db, {(spec.tenant, spec.key) for spec, _ in specs if spec.key is not None})
            fresh, same = _new_specs(specs, texts, known)
            if max_queued is not None and fresh:
                (pending,) = db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone()
                if pending + len(fresh) > max_queued:
                    raise self._full(db, pending, len(fresh), max_queued, now)
            # Ids are given here, one submission at a time (the next ones after the largest): the new jobs are made
            # by one statement and need no reading back.
            (largest,) = db.execute("SELECT COALESCE(MAX(id), 0) FROM jobs").fetchone()
            made = {index: _new_job(number, *specs[index], now) for number, index in enumerate(fresh, largest + 1)}
            db.executemany(
                "INSERT INTO jobs (id, run_id, key, kind, payload, digest, state, priority, tenant, requirements, "
                "pool, max_attempts, deadline, submitted_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?)",
                [_row(job, *texts[index]) for index, job in made.items()],
            )
            moves = [Transition(job.id, 0, None, JobState.PENDING, now, "submitted") for job in made.values()]
            write_moves(db, moves)
            db.executemany(
                "INSERT INTO runs (id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                sorted({(spec.run_id, now) for spec, _ in specs}),
            )
            stored: dict[int, Job] = {}
            for chunk in chunks(sorted({id_ for id_, _ in known.values()})):
                for row in db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ({marks(chunk)})", chunk):
                    stored[row[0]] = job_from_row(row)
        announce(moves, {job.id: job.run_id for job in made.values()})
        out: list[tuple[Job, bool]] = []
        for index, (spec, _) in enumerate(specs):
            if index in made:
                out.append((made[index], True))
            elif index in same:
                out.append((made[same[index]], False))
            else:
                out.append((stored[known[(spec.tenant, str(spec.key))][0]], False))
        return out

    @staticmethod
    def _known_keys(db: Session, keys: Collection[tuple[str, str]]) -> dict[tuple[str, str], tuple[int, str]]:
        """The job id and digest of each of these (tenant, key) that names a job already."""
        by_tenant: dict[str, list[str]] = {}
        for tenant, key in sorted(keys):
            by_tenant.setdefault(tenant, []).append(key)
        known: dict[tuple[str, str], tuple[int, str]] = {}
        for tenant, names in by_tenant.items():
            for chunk in chunks(names):
                for key, id_, digest in db.execute(
                    f"SELECT key, id, digest FROM jobs WHERE tenant = ? AND key IN ({marks(chunk)})", (tenant, *chunk)
                ):
                    known[(tenant, key)] = (id_, digest)
        return known

    @staticmethod
    def _full(db: Session, pending: int, adding: int, bound: int, now: float) -> QueueFull:
        """The refusal, with when to come back: the excess over the queue's bound at the recent completion rate."""
        (done,) = db.execute("SELECT COUNT(*) FROM results WHERE at > ?", (now - 60.0,)).fetchone()
        excess = pending + adding - bound
        if done:
            retry_after_s = min(600.0, max(1.0, excess / (done / 60.0)))
            pace = f"at the last minute's {done / 60.0:.1f} completions/s"
        else:
            retry_after_s, pace = 10.0, "no job completed in the last minute"
        return QueueFull(
            f"queue full: {pending} jobs pending, bound {bound}, {adding} more refused (none admitted); retry after "
            f"{retry_after_s:.0f} s ({pace}), or raise the bound (max_queued)",
            retry_after_s=retry_after_s,
        )

    def set_run_meta(self, run_id: str, meta: dict[str, Any]) -> None:
        """Record what a run is (its command, tasks, policy) beside its jobs."""
        with self.db.write() as db:
            db.execute("INSERT INTO runs (id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING", (run_id, time.time()))
            db.execute("UPDATE runs SET meta = ? WHERE id = ?", (canonical_json(meta), run_id))

    # -- leases -----------------------------------------------------------------------------------------------

    def exchange(
        self,
        owner: str,
        endings: Sequence[Ending] = (),
        moves: Sequence[Transition] = (),
        request: LeaseRequest | None = None,
    ) -> tuple[list[int], list[Job]]:
        """One turn of a scheduler, in one transaction: record ``moves`` and ``endings`` (as :meth:`finish`), then
        lease what ``request`` asks for (as :meth:`lease`). Returns the ids of jobs whose lease ``owner`` no longer
        held, and the jobs leased.

        Raises:
            IllegalTransition: a move the state machine does not have (nothing is written).
        """
        now = time.time()
        dialect = self.db.dialect
        if not (endings or moves):
            if request is None:
                return [], []
            # An idle scheduler asks at every turn of its loop: "nothing to lease" comes from a read, without taking
            # the write lock from the other processes that share the database.
            source, args = queue(dialect, request, now)
            with self.db.read() as db:
                if db.execute(f"SELECT 1 {source} LIMIT 1", args).fetchone() is None:
                    return [], []
        lost: list[int] = []
        leased: list[Job] = []
        moved = Moved([], {})
        with self.db.write() as db:
            if endings or moves:
                lost, moved = finish_in(db, dialect, owner, endings, moves)
            if request is not None:
                leased, more = lease_in(db, dialect, owner, request, now)
                moved.add(more)
                again = {job.id for job in leased}  # its old attempt's report came too late; this lease is new
                lost = [id_ for id_ in lost if id_ not in again]
        announce(moved.moves, moved.runs)
        return lost, leased

    def lease(
        self,
        owner: str,
        pick: Callable[[Sequence[Candidate]], list[tuple[int, str]]],
        *,
        window: int,
        lease_s: float,
        runs: Collection[str] | None = None,
        skip_tenants: Collection[str] = (),
    ) -> list[Job]:
        """Lease pending jobs: the first ``window`` runnable ones (highest priority, then oldest) are offered to
        ``pick``, which returns ``(job id, worker)`` for those placed; they become ``scheduled``, leased to
        ``owner`` for ``lease_s`` seconds, each lease a new attempt. Jobs another scheduler is leasing at the same
        moment are passed over."""
        request = LeaseRequest(pick, window, lease_s, runs, skip_tenants)
        return self.exchange(owner, request=request)[1]

    def advance(self, owner: str, moves: Sequence[Transition]) -> list[int]:
        """Record moves between leased states (``scheduled -> running``, ``running -> grading``) that happened at
        their own times; returns the ids of jobs whose lease ``owner`` no longer holds (their moves are dropped).

        Raises:
            IllegalTransition: a move the state machine does not have (nothing is written).
        """
        return self.finish(owner, (), moves)

    def finish(self, owner: str, endings: Sequence[Ending], moves: Sequence[Transition] = ()) -> list[int]:
        """Record ``moves`` (as :meth:`advance`), then end attempts held by ``owner``: final states with their
        results, or back to the queue, all in one transaction: a result is written in the same transaction that
        ends its lease. Returns the ids of jobs whose lease ``owner`` no longer held (it expired, or the job was
        cancelled): nothing is written for them.

        Raises:
            IllegalTransition: a move the state machine does not have (nothing is written).
        """
        return self.exchange(owner, endings, moves)[0]

    def renew(self, owner: str, job_ids: Collection[int], lease_s: float) -> list[int]:
        """Extend ``owner``'s leases of these jobs, and of no other (its heartbeat: a job it no longer tracks, or
        that waits for a worker gone, is left to expire); returns the ids whose lease it no longer holds."""
        now = time.time()
        held: set[int] = set()
        with self.db.write() as db:
            db.execute("UPDATE owners SET at = ? WHERE id = ?", (now, owner))
            for chunk in chunks(sorted(set(job_ids))):
                held.update(
                    id_
                    for (id_,) in db.execute(
                        "UPDATE jobs SET lease_expires = ? WHERE id IN (SELECT id FROM jobs WHERE lease_owner = ? "
                        f"AND id IN ({marks(chunk)}) ORDER BY id{self.db.dialect.for_update}) RETURNING id",
                        (now + lease_s, owner, *chunk),
                    )
                )
        return [id_ for id_ in job_ids if id_ not in held]


def _new_specs(
    specs: Sequence[tuple[JobSpec, Requirements]],
    texts: list[tuple[str, str]],
    known: dict[tuple[str, str], tuple[int, str]],
) -> tuple[list[int], dict[int, int]]:
    """Which specs make new jobs (their indexes), and which repeat a key an earlier spec of the same batch makes
    (index: that spec's index); the others name known jobs.

    Raises:
        IdempotencyConflict: a key names a job, or an earlier spec, with another kind or payload.
    """
    fresh: list[int] = []
    same: dict[int, int] = {}
    first: dict[tuple[str, str], tuple[int, str]] = {}
    for index, (spec, _) in enumerate(specs):
        if spec.key is None:
            fresh.append(index)
            continue
        digest, name = texts[index][1], (spec.tenant, spec.key)
        found = known.get(name)
        earlier = first.get(name)
        if (found is not None and found[1] != digest) or (earlier is not None and earlier[1] != digest):
            where = f"job {found[0]}" if found is not None else "an earlier job of the same submission"
            raise IdempotencyConflict(
                f"idempotency key {spec.key!r} already names {where} with another kind or payload; "
                "a key names one job forever: use a new key for new work"
            )
        if found is not None:
            continue
        if earlier is not None:
            same[index] = earlier[0]
            continue
        first[name] = (index, digest)
        fresh.append(index)
    return fresh, same


def _new_job(number: int, spec: JobSpec, needs: Requirements, now: float) -> Job:
    return Job(
        id=number,
        run_id=spec.run_id,
        key=spec.key,
        kind=spec.kind,
        payload=dict(spec.payload),
        state=JobState.PENDING,
        priority=spec.priority,
        tenant=spec.tenant,
        requirements=needs,
        attempts=0,
        max_attempts=spec.max_attempts,
        submitted_at=now,
        updated_at=now,
        deadline=None if spec.deadline_s is None else now + spec.deadline_s,
    )


def _row(job: Job, payload: str, digest: str) -> tuple[Any, ...]:
    """The ``jobs`` row of a new job."""
    needs = job.requirements
    return (
        job.id, job.run_id, job.key, job.kind, payload, digest, job.priority, job.tenant,
        needs_json(needs), needs.pool, job.max_attempts, job.deadline, job.submitted_at, job.updated_at,
    )  # fmt: skip
