"""The job store's reclaiming side: leases that expired or whose holder died, deadlines that passed, a scheduler
that stops, cancellation; and the registry of scheduler processes by which a successor tells that one died.

The common answer of the checks asked at every heartbeat is "nothing": it comes from a read, without taking the
database's write lock from the other processes that share the file. On PostgreSQL, the jobs a transaction will
change are locked first, in id order; reclaiming passes over those another scheduler holds locked at that moment
(it is finishing them, or reclaiming them too): the next heartbeat sees them again if they still need it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Iterable

from ._db import Database
from ._errors import JobNotFound
from ._leases import chunks, marks
from ._model import Transition
from ._states import TERMINAL, JobState, check_transition
from ._writes import Ending, announce, end_jobs, give_up, write_moves

__all__ = ["StoreReclaim"]


class StoreReclaim:
    """The reclaiming side of :class:`JobStore`."""

    db: Database

    def expire(self, *, owners: Collection[str] = ()) -> list[int]:
        """Return to the queue every job whose lease expired, or is held by one of ``owners`` (known dead): it is
        retried at once, or, when its attempts are spent, completed as ``infra_error``. Returns their ids."""
        now = time.time()
        dialect = self.db.dialect
        dead = f" OR lease_owner IN ({','.join('?' * len(owners))})" if owners else ""
        query = (
            "SELECT id, attempts, failures, max_attempts, lease_owner, state, run_id FROM jobs "
            f"{dialect.indexed('jobs_leased')} WHERE lease_owner IS NOT NULL AND (lease_expires < ?{dead})"
        )
        with self.db.read() as db:
            if db.execute(f"{query} LIMIT 1", (now, *owners)).fetchone() is None:
                return []
        moves: list[Transition] = []
        ends: list[Ending] = []
        with self.db.write() as db:
            rows = db.execute(f"{query} ORDER BY id{dialect.skip_locked}", (now, *owners)).fetchall()
            for id_, attempt, failures, max_attempts, holder, state, _ in rows:
                why = (
                    f"the process of {holder}, which held its lease, is gone"
                    if holder in owners
                    else f"the lease of {holder} expired: its scheduler or worker stopped answering"
                )
                end = Ending(job_id=id_, attempt=attempt, target=JobState.PENDING, error=why, at=now)
                end = give_up(end) if failures + 1 >= max_attempts else end
                check_transition(id_, JobState(state), end.target)
                moves.append(Transition(id_, attempt, JobState(state), end.target, now, why))
                ends.append(dataclasses.replace(end, outcome="lease_expired"))
            write_moves(db, moves)
            end_jobs(db, dialect, ends)
        announce(moves, {row[0]: row[6] for row in rows})
        return [row[0] for row in rows]

    def expire_deadlines(self) -> list[int]:
        """End as ``timed_out`` every pending job whose deadline passed; returns their ids. (A leased job past its
        deadline is ended by its lease holder, which stops its work first.)"""
        now = time.time()
        dialect = self.db.dialect
        query = (
            f"SELECT id, attempts, run_id FROM jobs {dialect.indexed('jobs_deadline')} "
            "WHERE deadline IS NOT NULL AND state = 'pending' AND deadline < ?"
        )
        with self.db.read() as db:
            if db.execute(f"{query} LIMIT 1", (now,)).fetchone() is None:
                return []
        why = "its deadline passed while it was queued"
        with self.db.write() as db:
            rows = db.execute(f"{query} ORDER BY id{dialect.skip_locked}", (now,)).fetchall()
            moves = [Transition(id_, n, JobState.PENDING, JobState.TIMED_OUT, now, why) for id_, n, _ in rows]
            write_moves(db, moves)
            end_jobs(
                db,
                dialect,
                [
                    Ending(job_id=m.job_id, attempt=m.attempt, target=m.target, error=why, outcome="timed_out", at=now)
                    for m in moves
                ],
            )
        announce(moves, {id_: run for id_, _, run in rows})
        return [row[0] for row in rows]

    def release(self, owner: str) -> list[int]:
        """Return every job ``owner`` holds to the queue at once, its attempt not counted against it (its scheduler
        is stopping cleanly); returns their ids."""
        now = time.time()
        why = "its scheduler stopped"
        dialect = self.db.dialect
        with self.db.write() as db:
            rows = db.execute(
                f"SELECT id, attempts, state, run_id FROM jobs WHERE lease_owner = ? ORDER BY id{dialect.for_update}",
                (owner,),
            ).fetchall()
            moves = [Transition(id_, n, JobState(state), JobState.PENDING, now, why) for id_, n, state, _ in rows]
            write_moves(db, moves)
            end_jobs(
                db,
                dialect,
                [
                    Ending(job_id=m.job_id, attempt=m.attempt, target=m.target, outcome="released", at=now)
                    for m in moves
                ],
            )
        announce(moves, {row[0]: row[3] for row in rows})
        return [row[0] for row in rows]

    def cancel(self, job_ids: Iterable[int], *, reason: str = "cancelled") -> list[int]:
        """Cancel these jobs, whatever holds them (a holder's later result is refused); returns the ids cancelled
        (those already final are left as they are).

        Raises:
            JobNotFound: an id names no job (nothing is cancelled).
        """
        now = time.time()
        dialect = self.db.dialect
        wanted = list(dict.fromkeys(job_ids))  # each once, in the order given
        moves: list[Transition] = []
        runs: dict[int, str] = {}
        with self.db.write() as db:
            rows: dict[int, tuple[str, int, str]] = {}
            for chunk in chunks(sorted(wanted)):
                for id_, state, attempt, run_id in db.execute(
                    f"SELECT id, state, attempts, run_id FROM jobs WHERE id IN ({marks(chunk)}) "
                    f"ORDER BY id{dialect.for_update}",
                    chunk,
                ):
                    rows[id_] = (state, attempt, run_id)
            for id_ in wanted:
                if id_ not in rows:
                    raise JobNotFound(f"no job {id_} in {self.db.location}; list them with 'rollbox jobs'")
                state, attempt, run_id = rows[id_]
                if JobState(state) in TERMINAL:
                    continue
                moves.append(Transition(id_, attempt, JobState(state), JobState.CANCELLED, now, reason))
                runs[id_] = run_id
            write_moves(db, moves)
            end_jobs(
                db,
                dialect,
                [
                    Ending(
                        job_id=m.job_id, attempt=m.attempt, target=m.target, error=reason, outcome="cancelled", at=now
                    )
                    for m in moves
                ],
            )
        announce(moves, runs)
        return [m.job_id for m in moves]

    # -- owners -----------------------------------------------------------------------------------------------

    def register_owner(self, owner: str, host: str, pid: int, started: str) -> None:
        """Record a scheduler process, so that its successor can tell it died."""
        with self.db.write() as db:
            db.execute(
                "INSERT INTO owners (id, host, pid, started, at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE "
                "SET host = excluded.host, pid = excluded.pid, started = excluded.started, at = excluded.at",
                (owner, host, pid, started, time.time()),
            )

    def owners(self, host: str) -> list[tuple[str, int, str]]:
        """The ``(owner, pid, start time)`` of every scheduler process registered on ``host``."""
        with self.db.read() as db:
            return [tuple(row) for row in db.execute("SELECT id, pid, started FROM owners WHERE host = ?", (host,))]

    def forget_owners(self, owners: Collection[str]) -> None:
        """Remove owners (dead, their leases returned, or stopped cleanly)."""
        if not owners:
            return
        with self.db.write() as db:
            db.executemany("DELETE FROM owners WHERE id = ?", [(o,) for o in owners])
