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

import sqlite3
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._db import JOB_COLUMNS, Database, job_from_row, requirements_from_row, stored_problem
from ._errors import IdempotencyConflict, QueueFull
from ._model import Job, JobSpec, Requirements, Transition, canonical_json, encoded
from ._reads import StoreReads
from ._reclaim import StoreReclaim
from ._states import JobState, check_transition
from ._writes import Ending, announce, end_jobs, give_up, needs_json, write_moves

__all__ = ["Candidate", "Ending", "JobStore"]


@dataclass(frozen=True)
class Candidate:
    """A pending job as placement sees it."""

    id: int
    tenant: str
    priority: int
    requirements: Requirements


def _chunks(values: Sequence[Any], size: int = 500) -> list[Sequence[Any]]:
    """``values`` in pieces small enough for one statement's parameters."""
    return [values[start : start + size] for start in range(0, len(values), size)]


def _marks(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


class JobStore(StoreReads, StoreReclaim):
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

    def verify(self) -> None:
        """Check the whole file before writing to it (see :meth:`Database.verify`).

        Raises:
            StoreError: the file is damaged; nothing will be written to it.
        """
        self.db.verify()

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
        texts = [encoded(spec) for spec, _ in specs]
        with self.db.write() as db:
            known = self._known_keys(db, [spec.key for spec, _ in specs if spec.key is not None])
            fresh, same = _new_specs(specs, texts, known)
            if max_queued is not None and fresh:
                (pending,) = db.execute("SELECT COUNT(*) FROM jobs WHERE state = 'pending'").fetchone()
                if pending + len(fresh) > max_queued:
                    raise self._full(db, pending, len(fresh), max_queued, now)
            # Ids are given here, under the write lock (the next ones after the largest): the new jobs are made by
            # one statement and need no reading back.
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
                "INSERT OR IGNORE INTO runs (id, created_at) VALUES (?, ?)", {(spec.run_id, now) for spec, _ in specs}
            )
            stored: dict[int, Job] = {}
            for chunk in _chunks(sorted({id_ for id_, _ in known.values()})):
                for row in db.execute(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id IN ({_marks(chunk)})", chunk):
                    stored[row[0]] = job_from_row(row)
        announce(moves, {job.id: job.run_id for job in made.values()})
        out: list[tuple[Job, bool]] = []
        for index, (spec, _) in enumerate(specs):
            if index in made:
                out.append((made[index], True))
            elif index in same:
                out.append((made[same[index]], False))
            else:
                out.append((stored[known[str(spec.key)][0]], False))
        return out

    @staticmethod
    def _known_keys(db: sqlite3.Connection, keys: list[str]) -> dict[str, tuple[int, str]]:
        """The job id and digest of each of these keys that names a job already."""
        known: dict[str, tuple[int, str]] = {}
        for chunk in _chunks(keys):
            for key, id_, digest in db.execute(
                f"SELECT key, id, digest FROM jobs WHERE key IN ({_marks(chunk)})", chunk
            ):
                known[key] = (id_, digest)
        return known

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
            where.append(f"run_id IN ({_marks(list(runs))})")
            args.extend(runs)
        if skip_tenants:
            where.append(f"tenant NOT IN ({_marks(list(skip_tenants))})")
            args.extend(skip_tenants)
        queue = f"FROM jobs INDEXED BY jobs_queue WHERE {' AND '.join(where)}"
        # An idle scheduler asks at every turn of its loop: "nothing to lease" comes from a read, without taking the
        # write lock from the other processes that share the database.
        with self.db.read() as db:
            if db.execute(f"SELECT 1 {queue} LIMIT 1", args).fetchone() is None:
                return []
        leased: list[Job] = []
        with self.db.write() as db:
            rows = db.execute(
                f"SELECT id, tenant, priority, requirements, pool {queue} ORDER BY priority DESC, id LIMIT ?",
                (*args, window),
            ).fetchall()
            offered: list[Candidate] = []
            invalid: dict[int, str] = {}
            for id_, tenant, prio, req, pool in rows:
                if (problem := stored_problem(req, pool)) is None:
                    offered.append(Candidate(id_, tenant, prio, requirements_from_row(req, pool)))
                else:  # submitted before rollbox checked requirements: it could never be placed safely
                    invalid[id_] = f"its requirements are invalid: {problem}; submit it again with valid ones"
            failed, runs_of = self._fail_pending(db, invalid, now) if invalid else ([], {})
            by_worker: dict[str, list[int]] = {}
            for job_id, worker in pick(offered) if offered else []:
                by_worker.setdefault(worker, []).append(job_id)
            for worker, placed in by_worker.items():
                for chunk in _chunks(placed):
                    update = (
                        "UPDATE jobs SET state = 'scheduled', lease_owner = ?, lease_expires = ?, "
                        f"attempts = attempts + 1, worker = ?, updated_at = ? WHERE id IN ({_marks(chunk)}) "
                        f"AND state = 'pending' RETURNING {JOB_COLUMNS}"
                    )
                    leased.extend(map(job_from_row, db.execute(update, (owner, now + lease_s, worker, now, *chunk))))
            leased.sort(key=lambda job: job.id)
            db.executemany(
                "INSERT INTO attempts (job_id, number, owner, worker, started_at) VALUES (?, ?, ?, ?, ?)",
                [(job.id, job.attempts, owner, job.worker, now) for job in leased],
            )
            moves = [Transition(job.id, job.attempts, JobState.PENDING, JobState.SCHEDULED, now) for job in leased]
            write_moves(db, moves)
        announce([*failed, *moves], {**runs_of, **{job.id: job.run_id for job in leased}})
        return leased

    @staticmethod
    def _fail_pending(
        db: sqlite3.Connection, why: dict[int, str], now: float
    ) -> tuple[list[Transition], dict[int, str]]:
        """End these pending jobs ``failed``, each with its reason; returns their moves and their runs."""
        moves: list[Transition] = []
        runs: dict[int, str] = {}
        for chunk in _chunks(list(why)):
            for id_, attempt, run_id in db.execute(
                f"SELECT id, attempts, run_id FROM jobs WHERE id IN ({_marks(chunk)})", chunk
            ):
                moves.append(Transition(id_, attempt, JobState.PENDING, JobState.FAILED, now, why[id_]))
                runs[id_] = run_id
        end_jobs(
            db, [Ending(job_id=m.job_id, attempt=m.attempt, target=m.target, error=m.reason, at=now) for m in moves]
        )
        write_moves(db, moves)
        return moves, runs

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
        ends: list[Ending] = []
        unheld: list[tuple[float, int, int]] = []
        with self.db.write() as db:
            held = self._held(db, owner, list({m.job_id for m in moves} | {e.job_id for e in endings}))
            runs = {id_: row[4] for id_, row in held.items()}
            moved: dict[int, Transition] = {}
            for move in moves:
                row = held.get(move.job_id)
                if row is None or row[3] != move.attempt:
                    lost.append(move.job_id)
                    continue
                source = JobState(row[0])
                check_transition(move.job_id, source, move.target)
                done.append(Transition(move.job_id, move.attempt, source, move.target, move.at, move.reason))
                row[0], moved[move.job_id] = move.target.value, move
            for end in endings:
                row = held.pop(end.job_id, None)  # a second ending of the same job finds it held no more
                if row is None or row[3] != end.attempt:
                    lost.append(end.job_id)
                    unheld.append((end.at, end.job_id, end.attempt))
                    continue
                source, failures, max_attempts = JobState(row[0]), row[1], row[2]
                spent = end.outcome == "infra_error" and end.target is JobState.PENDING and failures + 1 >= max_attempts
                final = give_up(end) if spent else end
                check_transition(end.job_id, source, final.target)
                done.append(Transition(end.job_id, end.attempt, source, final.target, end.at, end.error))
                ends.append(final)
                moved.pop(end.job_id, None)  # its ending writes its state
            db.executemany(
                "UPDATE jobs SET state = ?, updated_at = ? WHERE id = ?",
                [(m.target.value, m.at, id_) for id_, m in moved.items()],
            )
            db.executemany(
                "UPDATE attempts SET ended_at = ?, outcome = 'lost' WHERE job_id = ? AND number = ? "
                "AND ended_at IS NULL",
                unheld,
            )
            end_jobs(db, ends)
            write_moves(db, done)
        announce(done, runs)
        return sorted(set(lost))

    @staticmethod
    def _held(db: sqlite3.Connection, owner: str, ids: list[int]) -> dict[int, list[Any]]:
        """Those of these jobs whose lease ``owner`` holds: ``[state, failures, max_attempts, attempt, run]``."""
        held: dict[int, list[Any]] = {}
        for chunk in _chunks(ids):
            for id_, *row in db.execute(
                "SELECT id, state, failures, max_attempts, attempts, run_id FROM jobs "
                f"WHERE lease_owner = ? AND id IN ({_marks(chunk)})",
                (owner, *chunk),
            ):
                held[id_] = row
        return held

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


def _new_specs(
    specs: Sequence[tuple[JobSpec, Requirements]], texts: list[tuple[str, str]], known: dict[str, tuple[int, str]]
) -> tuple[list[int], dict[int, int]]:
    """Which specs make new jobs (their indexes), and which repeat a key an earlier spec of the same batch makes
    (index: that spec's index); the others name known jobs.

    Raises:
        IdempotencyConflict: a key names a job, or an earlier spec, with another kind or payload.
    """
    fresh: list[int] = []
    same: dict[int, int] = {}
    first: dict[str, tuple[int, str]] = {}
    for index, (spec, _) in enumerate(specs):
        if spec.key is None:
            fresh.append(index)
            continue
        digest = texts[index][1]
        found = known.get(spec.key)
        earlier = first.get(spec.key)
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
        first[spec.key] = (index, digest)
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
