"""The durable job store: every job, transition, attempt and result, in one SQLite file.

Each method is one transaction. A job's result is written in the same transaction that ends its lease, and
only by the holder of that lease (the lease is the owner and the attempt number together): a result computed by
a scheduler that died before this commit is simply never written, the lease expires, and the job runs again;
a result from a lease that expired meanwhile is refused. The ``results`` table holds at most one row per job.
Every move of a job is checked against the state machine, written with its time, and reported as a
``job.transition`` event once committed.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollbox import telemetry

from ._db import JOB_COLUMNS, Database, job_from_row
from ._errors import IdempotencyConflict, JobNotFound, QueueFull
from ._model import Job, JobSpec, Requirements, Transition, canonical_json
from ._reads import StoreReads
from ._states import ACTIVE, TERMINAL, JobState, check_transition

__all__ = ["Candidate", "Ending", "JobStore"]

_LEASED = tuple(s.value for s in ACTIVE)


@dataclass(frozen=True)
class Candidate:
    """A pending job as placement sees it."""

    id: int
    tenant: str
    priority: int
    requirements: Requirements


@dataclass(frozen=True, kw_only=True)
class Ending:
    """How one attempt ended, as its lease holder reports it: a final state with the job's result, or
    ``pending`` (an infrastructure failure, retried no sooner than ``not_before``)."""

    job_id: int
    attempt: int
    target: JobState
    status: str | None = None
    reward: float | None = None
    output: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    #: How the attempt ended (see :attr:`Attempt.outcome`).
    outcome: str = "ok"
    not_before: float = 0.0
    at: float = 0.0


class JobStore(StoreReads):
    """Jobs in SQLite (WAL) at ``path``; safe to share between threads and between processes.

    Args:
        path: The database file (made with its parent directories when missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.db = Database(path)
        self.path = self.db.path

    def close(self) -> None:
        """Close the database (idempotent)."""
        self.db.close()

    # -- moves ------------------------------------------------------------------------------------------------

    @staticmethod
    def _record(db: sqlite3.Connection, moves: list[Transition], move: Transition) -> None:
        check_transition(move.job_id, move.source, move.target)
        moves.append(move)

    @staticmethod
    def _write_moves(db: sqlite3.Connection, moves: Sequence[Transition]) -> None:
        db.executemany(
            "INSERT INTO transitions (job_id, attempt, source, target, at, reason) VALUES (?, ?, ?, ?, ?, ?)",
            [(m.job_id, m.attempt, m.source and m.source.value, m.target.value, m.at, m.reason) for m in moves],
        )

    @staticmethod
    def _announce(moves: Sequence[Transition], runs: dict[int, str]) -> None:
        for m in moves:
            telemetry.emit(
                "job.transition",
                job_id=m.job_id,
                run_id=runs.get(m.job_id),
                attempt=m.attempt,
                source=m.source and m.source.value,
                target=m.target.value,
                transition_at=m.at,
                reason=m.reason,
            )

    def _runs_of(self, db: sqlite3.Connection, ids: Collection[int]) -> dict[int, str]:
        found: dict[int, str] = {}
        listed = list(ids)
        for start in range(0, len(listed), 500):
            chunk = listed[start : start + 500]
            marks = ",".join("?" * len(chunk))
            found.update(db.execute(f"SELECT id, run_id FROM jobs WHERE id IN ({marks})", chunk).fetchall())
        return found

    # -- submission -------------------------------------------------------------------------------------------

    def submit(
        self, specs: Sequence[tuple[JobSpec, Requirements]], *, max_queued: int | None = None
    ) -> list[tuple[Job, bool]]:
        """Add jobs (all or none), each with what it needs; returns each job with whether it is new.

        A spec whose key names a job already returns that job, whatever its state.

        Raises:
            IdempotencyConflict: a key names a job with another kind or payload (nothing is added).
            QueueFull: more than ``max_queued`` jobs would be pending (nothing is added).
        """
        now = time.time()
        moves: list[Transition] = []
        out: list[tuple[Job, bool] | None] = [None] * len(specs)
        with self.db.write() as db:
            keyed: dict[str, tuple[int, str]] = {}
            keys = [spec.key for spec, _ in specs if spec.key is not None]
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for key, id_, digest in db.execute(f"SELECT key, id, digest FROM jobs WHERE key IN ({marks})", chunk):
                    keyed[key] = (id_, digest)
            fresh: list[int] = []
            for index, (spec, _) in enumerate(specs):
                known = keyed.get(spec.key) if spec.key is not None else None
                if known is None:
                    fresh.append(index)
                    if spec.key is not None:
                        keyed[spec.key] = (-1 - index, spec.digest())  # a later copy in this batch is this one
                elif known[1] != spec.digest():
                    raise IdempotencyConflict(
                        f"idempotency key {spec.key!r} already names job {known[0]} with another kind or payload; "
                        "a key names one job forever: use a new key for new work"
                    )
            if max_queued is not None and fresh:
                (pending,) = db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone()
                if pending + len(fresh) > max_queued:
                    raise self._full(db, pending, len(fresh), max_queued, now)
            created: dict[int, int] = {}
            for index in fresh:
                spec, needs = specs[index]
                cursor = db.execute(
                    "INSERT INTO jobs (run_id, key, kind, payload, digest, state, priority, tenant, requirements, "
                    "pool, max_attempts, deadline, submitted_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        spec.run_id,
                        spec.key,
                        spec.kind,
                        canonical_json(spec.payload),
                        spec.digest(),
                        spec.priority,
                        spec.tenant,
                        canonical_json(needs.to_json()),
                        needs.pool,
                        spec.max_attempts,
                        None if spec.deadline_s is None else now + spec.deadline_s,
                        now,
                        now,
                    ),
                )
                assert cursor.lastrowid is not None
                created[index] = cursor.lastrowid
                self._record(db, moves, Transition(cursor.lastrowid, 0, None, JobState.PENDING, now, "submitted"))
            self._write_moves(db, moves)
            db.executemany(
                "INSERT OR IGNORE INTO runs (id, created_at) VALUES (?, ?)", {(spec.run_id, now) for spec, _ in specs}
            )
            for index, (spec, _) in enumerate(specs):
                id_ = created.get(index)
                if id_ is None:
                    assert spec.key is not None
                    id_ = keyed[spec.key][0]
                    id_ = created[-1 - id_] if id_ < 0 else id_
                row = db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", (id_,)).fetchone()
                out[index] = (job_from_row(row), index in created)
        self._announce(moves, {id_: specs[index][0].run_id for index, id_ in created.items()})
        return [item for item in out if item is not None]

    @staticmethod
    def _full(db: sqlite3.Connection, pending: int, adding: int, bound: int, now: float) -> QueueFull:
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
            db.execute("INSERT OR IGNORE INTO runs (id, created_at) VALUES (?, ?)", (run_id, time.time()))
            db.execute("UPDATE runs SET meta = ? WHERE id = ?", (canonical_json(meta), run_id))

    # -- leases -----------------------------------------------------------------------------------------------

    def lease(
        self,
        owner: str,
        pick: Callable[[list[Candidate]], list[tuple[int, str]]],
        *,
        window: int,
        lease_s: float,
        runs: Collection[str] | None = None,
        skip_tenants: Collection[str] = (),
    ) -> list[Job]:
        """Lease pending jobs: the first ``window`` runnable ones (highest priority, then oldest) are offered to
        ``pick``, which returns ``(job id, worker)`` for those placed; they become ``scheduled``, leased to
        ``owner`` for ``lease_s`` seconds, each lease a new attempt."""
        now = time.time()
        where = ["state = 'pending'", "not_before <= ?"]
        args: list[Any] = [now]
        if runs is not None:
            where.append(f"run_id IN ({','.join('?' * len(runs))})")
            args.extend(runs)
        if skip_tenants:
            where.append(f"tenant NOT IN ({','.join('?' * len(skip_tenants))})")
            args.extend(skip_tenants)
        moves: list[Transition] = []
        with self.db.write() as db:
            rows = db.execute(
                "SELECT id, tenant, priority, requirements, pool FROM jobs INDEXED BY jobs_queue "
                f"WHERE {' AND '.join(where)} ORDER BY priority DESC, id LIMIT ?",
                (*args, window),
            ).fetchall()
            if not rows:
                return []
            offered = [
                Candidate(id_, tenant, priority, _requirements(req, pool)) for id_, tenant, priority, req, pool in rows
            ]
            placed = pick(offered)
            if not placed:
                return []
            leased: list[Job] = []
            for job_id, worker in placed:
                row = db.execute(
                    "UPDATE jobs SET state = 'scheduled', lease_owner = ?, lease_expires = ?, attempts = attempts + 1, "
                    "worker = ?, updated_at = ? WHERE id = ? AND state = 'pending' "
                    f"RETURNING {JOB_COLUMNS}",
                    (owner, now + lease_s, worker, now, job_id),
                ).fetchone()
                job = job_from_row(row)
                leased.append(job)
                self._record(db, moves, Transition(job.id, job.attempts, JobState.PENDING, JobState.SCHEDULED, now))
            db.executemany(
                "INSERT INTO attempts (job_id, number, owner, worker, started_at) VALUES (?, ?, ?, ?, ?)",
                [(job.id, job.attempts, owner, job.worker, now) for job in leased],
            )
            self._write_moves(db, moves)
        self._announce(moves, {job.id: job.run_id for job in leased})
        return leased

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
        lost: list[int] = []
        done: list[Transition] = []
        held = "SELECT state, failures, max_attempts FROM jobs WHERE id = ? AND lease_owner = ? AND attempts = ?"
        with self.db.write() as db:
            for move in moves:
                row = db.execute(held, (move.job_id, owner, move.attempt)).fetchone()
                if row is None:
                    lost.append(move.job_id)
                    continue
                self._record(db, done, dataclasses.replace(move, source=JobState(row[0])))
                db.execute(
                    "UPDATE jobs SET state = ?, updated_at = ? WHERE id = ?", (move.target.value, move.at, move.job_id)
                )
            for end in endings:
                row = db.execute(held, (end.job_id, owner, end.attempt)).fetchone()
                if row is None:
                    lost.append(end.job_id)
                    db.execute(
                        "UPDATE attempts SET ended_at = ?, outcome = 'lost' WHERE job_id = ? AND number = ? "
                        "AND ended_at IS NULL",
                        (end.at, end.job_id, end.attempt),
                    )
                    continue
                source, failures, max_attempts = JobState(row[0]), row[1], row[2]
                spent = end.outcome == "infra_error" and end.target is JobState.PENDING and failures + 1 >= max_attempts
                final = _give_up(end) if spent else end
                self._record(db, done, Transition(end.job_id, end.attempt, source, final.target, end.at, end.error))
                self._end(db, final)
            self._write_moves(db, done)
            runs = self._runs_of(db, {m.job_id for m in done})
        self._announce(done, runs)
        return sorted(set(lost))

    @staticmethod
    def _end(db: sqlite3.Connection, end: Ending) -> None:
        """Write one ending (its move already checked)."""
        failed = end.outcome in ("infra_error", "lease_expired")
        db.execute(
            "UPDATE jobs SET state = ?, lease_owner = NULL, lease_expires = NULL, not_before = ?, "
            "failures = failures + ?, updated_at = ? WHERE id = ?",
            (end.target.value, end.not_before, int(failed), end.at, end.job_id),
        )
        db.execute(
            "UPDATE attempts SET ended_at = ?, outcome = ?, error = ? WHERE job_id = ? AND number = ?",
            (end.at, end.outcome, end.error, end.job_id, end.attempt),
        )
        if end.target in TERMINAL:
            db.execute(
                "INSERT INTO results (job_id, state, status, reward, output, error, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    end.job_id,
                    end.target.value,
                    end.status,
                    end.reward,
                    json.dumps(end.output, separators=(",", ":")),
                    end.error,
                    end.at,
                ),
            )

    def renew(self, owner: str, job_ids: Collection[int], lease_s: float) -> list[int]:
        """Extend ``owner``'s leases of these jobs (its heartbeat); returns the ids whose lease it no longer holds."""
        now = time.time()
        with self.db.write() as db:
            db.execute("UPDATE owners SET at = ? WHERE id = ?", (now, owner))
            held = {
                id_
                for (id_,) in db.execute(
                    "UPDATE jobs SET lease_expires = ? WHERE lease_owner = ? RETURNING id", (now + lease_s, owner)
                )
            }
        return [id_ for id_ in job_ids if id_ not in held]

    def expire(self, *, owners: Collection[str] = ()) -> list[int]:
        """Return to the queue every job whose lease expired, or is held by one of ``owners`` (known dead): it is
        retried at once, or, when its attempts are spent, completed as ``infra_error``. Returns their ids."""
        now = time.time()
        marks = ",".join("?" * len(owners))
        dead = f" OR lease_owner IN ({marks})" if owners else ""
        moves: list[Transition] = []
        with self.db.write() as db:
            rows = db.execute(
                "SELECT id, attempts, failures, max_attempts, lease_owner FROM jobs INDEXED BY jobs_leased "
                f"WHERE lease_owner IS NOT NULL AND (lease_expires < ?{dead})",
                (now, *owners),
            ).fetchall()
            for id_, attempt, failures, max_attempts, holder in rows:
                (state,) = db.execute("SELECT state FROM jobs WHERE id = ?", (id_,)).fetchone()
                why = (
                    f"the process of {holder}, which held its lease, is gone"
                    if holder in owners
                    else f"the lease of {holder} expired: its scheduler or worker stopped answering"
                )
                end = Ending(job_id=id_, attempt=attempt, target=JobState.PENDING, error=why, at=now)
                end = _give_up(end) if failures + 1 >= max_attempts else end
                end = dataclasses.replace(end, outcome="lease_expired")
                self._record(db, moves, Transition(id_, attempt, JobState(state), end.target, now, why))
                self._end(db, end)
            self._write_moves(db, moves)
            runs = self._runs_of(db, {m.job_id for m in moves})
        self._announce(moves, runs)
        return [row[0] for row in rows]

    def expire_deadlines(self) -> list[int]:
        """End as ``timed_out`` every pending job whose deadline passed; returns their ids. (A leased job past its
        deadline is ended by its lease holder, which stops its work first.)"""
        now = time.time()
        moves: list[Transition] = []
        with self.db.write() as db:
            rows = db.execute(
                "SELECT id, attempts FROM jobs WHERE deadline IS NOT NULL AND state = 'pending' AND deadline < ?",
                (now,),
            ).fetchall()
            for id_, attempt in rows:
                why = "its deadline passed while it was queued"
                self._record(db, moves, Transition(id_, attempt, JobState.PENDING, JobState.TIMED_OUT, now, why))
                self._end(db, Ending(job_id=id_, attempt=attempt, target=JobState.TIMED_OUT, error=why, at=now))
            self._write_moves(db, moves)
            runs = self._runs_of(db, {m.job_id for m in moves})
        self._announce(moves, runs)
        return [row[0] for row in rows]

    def release(self, owner: str) -> list[int]:
        """Return every job ``owner`` holds to the queue at once, its attempt not counted against it (its scheduler
        is stopping cleanly); returns their ids."""
        now = time.time()
        moves: list[Transition] = []
        with self.db.write() as db:
            rows = db.execute("SELECT id, attempts, state FROM jobs WHERE lease_owner = ?", (owner,)).fetchall()
            for id_, attempt, state in rows:
                why = "its scheduler stopped"
                self._record(db, moves, Transition(id_, attempt, JobState(state), JobState.PENDING, now, why))
                end = Ending(job_id=id_, attempt=attempt, target=JobState.PENDING, outcome="released", at=now)
                self._end(db, end)
            self._write_moves(db, moves)
            runs = self._runs_of(db, {m.job_id for m in moves})
        self._announce(moves, runs)
        return [row[0] for row in rows]

    def cancel(self, job_ids: Iterable[int], *, reason: str = "cancelled") -> list[int]:
        """Cancel these jobs, whatever holds them (a holder's later result is refused); returns the ids cancelled
        (those already final are left as they are)."""
        now = time.time()
        moves: list[Transition] = []
        with self.db.write() as db:
            for id_ in job_ids:
                row = db.execute("SELECT state, attempts FROM jobs WHERE id = ?", (id_,)).fetchone()
                if row is None:
                    raise JobNotFound(f"no job {id_} in {self.path}; list them with 'rollbox jobs'")
                if JobState(row[0]) in TERMINAL:
                    continue
                self._record(db, moves, Transition(id_, row[1], JobState(row[0]), JobState.CANCELLED, now, reason))
                self._end(db, Ending(job_id=id_, attempt=row[1], target=JobState.CANCELLED, error=reason, at=now))
            self._write_moves(db, moves)
            runs = self._runs_of(db, {m.job_id for m in moves})
        self._announce(moves, runs)
        return [m.job_id for m in moves]

    # -- owners -----------------------------------------------------------------------------------------------

    def register_owner(self, owner: str, host: str, pid: int, started: str) -> None:
        """Record a scheduler process, so that its successor can tell it died."""
        with self.db.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO owners (id, host, pid, started, at) VALUES (?, ?, ?, ?, ?)",
                (owner, host, pid, started, time.time()),
            )

    def owners(self, host: str) -> list[tuple[str, int, str]]:
        """The ``(owner, pid, start time)`` of every scheduler process registered on ``host``."""
        with self.db.read() as db:
            return [tuple(row) for row in db.execute("SELECT id, pid, started FROM owners WHERE host = ?", (host,))]

    def forget_owners(self, owners: Collection[str]) -> None:
        """Remove owners (dead, their leases returned, or stopped cleanly)."""
        with self.db.write() as db:
            db.executemany("DELETE FROM owners WHERE id = ?", [(o,) for o in owners])


def _give_up(end: Ending) -> Ending:
    """``end`` (an infrastructure failure) for a job whose attempts are spent: completed, its result
    ``infra_error`` with no reward, never the model's failure."""
    return dataclasses.replace(
        end,
        target=JobState.COMPLETED,
        status="infra_error",
        reward=None,
        output={},
        error=f"gave up after attempt {end.attempt}: {end.error}",
    )


def _requirements(text: str, pool: str) -> Requirements:
    needs = json.loads(text)
    return Requirements(cpus=needs["cpus"], memory_bytes=needs["memory_bytes"], resources=needs["resources"], pool=pool)
