"""Leasing and finishing, inside a write transaction: what :meth:`JobStore.exchange` (and ``lease``, ``finish``)
do with the database, whichever it is.

Leasing reads the first runnable jobs of the queue (highest priority, then oldest), passing over those another
scheduler is leasing at the same moment (PostgreSQL's ``SKIP LOCKED``), offers them to placement, and leases those
placed. Finishing locks the jobs whose lease the owner says it holds (in id order), checks every move against the
state machine, and writes the results in the same transaction that ends the leases.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ._db import JOB_COLUMNS, job_from_row, requirements_from_row, stored_problem
from ._model import Job, Requirements, Transition
from ._sql import Dialect, Rows, Session
from ._states import JobState, check_transition
from ._writes import Ending, end_jobs, give_up, write_moves

__all__ = ["Candidate", "LeaseRequest", "Moved", "chunks", "finish_in", "lease_in", "marks", "queue"]


@dataclass(frozen=True)
class Candidate:
    """A pending job as placement sees it."""

    id: int
    tenant: str
    priority: int
    requirements: Requirements


@dataclass(frozen=True)
class LeaseRequest:
    """What a scheduler asks to lease: the first ``window`` runnable jobs (of ``runs``, none of ``skip_tenants``)
    are offered to ``pick``, which returns ``(job id, worker)`` for those placed; each is leased for ``lease_s``."""

    pick: Callable[[Sequence[Candidate]], list[tuple[int, str]]]
    window: int
    lease_s: float
    runs: Collection[str] | None = None
    skip_tenants: Collection[str] = ()


@dataclass
class Moved:
    """What a transaction moved, reported once it committed: the moves, and each moved job's run."""

    moves: list[Transition]
    runs: dict[int, str]

    def add(self, other: Moved) -> None:
        self.moves.extend(other.moves)
        self.runs.update(other.runs)


def chunks(values: Sequence[Any], size: int = 500) -> list[Sequence[Any]]:
    """``values`` in pieces small enough for one statement's parameters."""
    return [values[start : start + size] for start in range(0, len(values), size)]


def marks(values: Sequence[Any]) -> str:
    """One ``?`` for each value."""
    return ",".join("?" * len(values))


def queue(dialect: Dialect, request: LeaseRequest, now: float) -> tuple[str, list[Any]]:
    """``FROM ... WHERE ...`` of the runnable jobs the request may lease, and its parameters."""
    where = ["state = 'pending'", "not_before <= ?"]
    args: list[Any] = [now]
    if request.runs is not None:
        where.append(f"run_id IN ({marks(list(request.runs))})")
        args.extend(request.runs)
    if request.skip_tenants:
        where.append(f"tenant NOT IN ({marks(list(request.skip_tenants))})")
        args.extend(request.skip_tenants)
    return f"FROM jobs {dialect.indexed('jobs_queue')} WHERE {' AND '.join(where)}", args


class _Offered(Sequence[Candidate]):
    """The window's candidates, read from the database only as far as ``pick`` looks: placement stops at the first
    ``room`` it places, and every row read is a step of the database that lets go of the interpreter's lock, which
    the event loop then waits to take back (a window is several times what is placed). Rows whose stored
    requirements are invalid are set aside in ``invalid`` as they are read."""

    def __init__(self, rows: Rows) -> None:
        self._rows = iter(rows)
        self._read: list[Candidate] = []
        self.invalid: dict[int, str] = {}

    def _reach(self, count: int | None) -> None:
        while count is None or len(self._read) < count:
            row = next(self._rows, None)
            if row is None:
                return
            id_, tenant, prio, req, pool = row
            if (problem := stored_problem(req, pool)) is None:
                self._read.append(Candidate(id_, tenant, prio, requirements_from_row(req, pool)))
            else:  # submitted before rollbox checked requirements: it could never be placed safely
                self.invalid[id_] = f"its requirements are invalid: {problem}; submit it again with valid ones"

    def __iter__(self) -> Iterator[Candidate]:
        index = 0
        while True:
            self._reach(index + 1)
            if index >= len(self._read):
                return
            yield self._read[index]
            index += 1

    def __bool__(self) -> bool:
        self._reach(1)
        return bool(self._read)

    def __len__(self) -> int:
        self._reach(None)
        return len(self._read)

    @overload
    def __getitem__(self, index: int) -> Candidate: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Candidate]: ...

    def __getitem__(self, index: int | slice) -> Candidate | Sequence[Candidate]:
        self._reach(None if isinstance(index, slice) or index < 0 else index + 1)
        return self._read[index]


def lease_in(db: Session, dialect: Dialect, owner: str, request: LeaseRequest, now: float) -> tuple[list[Job], Moved]:
    """Lease what ``request`` asks for; returns the jobs leased (in id order), and the moves made (those leased,
    and those failed because their stored requirements are invalid)."""
    source, args = queue(dialect, request, now)
    rows = db.execute(
        f"SELECT id, tenant, priority, requirements, pool {source} ORDER BY priority DESC, id LIMIT ?"
        f"{dialect.skip_locked}",
        (*args, request.window),
    )
    offered = _Offered(rows)
    try:
        picked = request.pick(offered) if offered else []
    finally:
        rows.close()  # the rows placement did not reach are never read
    moved = _fail_pending(db, dialect, offered.invalid, now) if offered.invalid else Moved([], {})
    by_worker: dict[str, list[int]] = {}
    for job_id, worker in picked:
        by_worker.setdefault(worker, []).append(job_id)
    leased: list[Job] = []
    for worker, placed in by_worker.items():
        for chunk in chunks(placed):
            update = (
                "UPDATE jobs SET state = 'scheduled', lease_owner = ?, lease_expires = ?, "
                f"attempts = attempts + 1, worker = ?, updated_at = ? WHERE id IN ({marks(chunk)}) "
                f"AND state = 'pending' RETURNING {JOB_COLUMNS}"
            )
            leased.extend(map(job_from_row, db.execute(update, (owner, now + request.lease_s, worker, now, *chunk))))
    leased.sort(key=lambda job: job.id)
    db.executemany(
        "INSERT INTO attempts (job_id, number, owner, worker, started_at) VALUES (?, ?, ?, ?, ?)",
        [(job.id, job.attempts, owner, job.worker, now) for job in leased],
    )
    moves = [Transition(job.id, job.attempts, JobState.PENDING, JobState.SCHEDULED, now) for job in leased]
    write_moves(db, moves)
    moved.add(Moved(moves, {job.id: job.run_id for job in leased}))
    return leased, moved


def _fail_pending(db: Session, dialect: Dialect, why: dict[int, str], now: float) -> Moved:
    """End these pending jobs (locked by the caller) ``failed``, each with its reason."""
    moved = Moved([], {})
    for chunk in chunks(list(why)):
        for id_, attempt, run_id in db.execute(
            f"SELECT id, attempts, run_id FROM jobs WHERE id IN ({marks(chunk)})", chunk
        ):
            moved.moves.append(Transition(id_, attempt, JobState.PENDING, JobState.FAILED, now, why[id_]))
            moved.runs[id_] = run_id
    write_moves(db, moved.moves)
    end_jobs(
        db,
        dialect,
        [
            Ending(job_id=m.job_id, attempt=m.attempt, target=m.target, error=m.reason, outcome="failed", at=now)
            for m in moved.moves
        ],
    )
    return moved


def finish_in(
    db: Session, dialect: Dialect, owner: str, endings: Sequence[Ending], moves: Sequence[Transition]
) -> tuple[list[int], Moved]:
    """Record ``moves``, then end attempts held by ``owner``; returns the ids of jobs whose lease ``owner`` no
    longer held (nothing is written for them), and the moves made.

    A move or ending of an earlier attempt of a job whose lease ``owner`` holds again (its lease expired, and it
    leased the job anew) is dropped, that attempt recorded ``lost``; the job is not reported: what ``owner`` holds
    now is the newer attempt, which the older one's report must never end.

    Raises:
        IllegalTransition: a move the state machine does not have (the caller's transaction is rolled back).
    """
    lost: list[int] = []
    done: list[Transition] = []
    ends: list[Ending] = []
    unheld: list[tuple[float, int, int]] = []
    held = _held(db, dialect, owner, sorted({m.job_id for m in moves} | {e.job_id for e in endings}))
    runs = {id_: row[4] for id_, row in held.items()}
    moved: dict[int, Transition] = {}
    ended: set[int] = set()
    for move in moves:
        row = held.get(move.job_id)
        if row is None or row[3] != move.attempt:
            if row is None or row[3] < move.attempt:
                lost.append(move.job_id)
            continue
        source = JobState(row[0])
        check_transition(move.job_id, source, move.target)
        done.append(Transition(move.job_id, move.attempt, source, move.target, move.at, move.reason))
        row[0], moved[move.job_id] = move.target.value, move
    for end in endings:
        row = held.get(end.job_id)
        if end.job_id in ended:  # a second ending of the same job: the first one ended it
            lost.append(end.job_id)
            continue
        if row is None or row[3] != end.attempt:
            if row is None or row[3] < end.attempt:
                lost.append(end.job_id)
            unheld.append((end.at, end.job_id, end.attempt))
            continue
        ended.add(end.job_id)
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
        "UPDATE attempts SET ended_at = ?, outcome = 'lost' WHERE job_id = ? AND number = ? AND ended_at IS NULL",
        unheld,
    )
    write_moves(db, done)
    end_jobs(db, dialect, ends)  # last: it writes the results (see end_jobs)
    return sorted(set(lost)), Moved(done, runs)


def _held(db: Session, dialect: Dialect, owner: str, ids: list[int]) -> dict[int, list[Any]]:
    """Those of these jobs whose lease ``owner`` holds, locked until the transaction ends:
    ``[state, failures, max_attempts, attempt, run]``."""
    held: dict[int, list[Any]] = {}
    for chunk in chunks(ids):
        for id_, *row in db.execute(
            "SELECT id, state, failures, max_attempts, attempts, run_id FROM jobs "
            f"WHERE lease_owner = ? AND id IN ({marks(chunk)}) ORDER BY id{dialect.for_update}",
            (owner, *chunk),
        ):
            held[id_] = row
    return held
