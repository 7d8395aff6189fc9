"""What the job store's write transactions share: how an attempt ends, and writing endings and moves in batches.

Every write is one ``executemany`` over the batch (a statement per row is what made a busy store slow), and every
move is reported as a ``job.transition`` event only after its transaction committed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollbox import telemetry

from ._model import Requirements, Transition, canonical_json, storable
from ._sql import Dialect, Serial, Session
from ._states import TERMINAL, JobState

__all__ = ["Ending", "announce", "end_jobs", "give_up", "needs_json", "write_moves"]


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


def give_up(end: Ending) -> Ending:
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


_COMPACT = json.JSONEncoder(separators=(",", ":"))


def end_jobs(db: Session, dialect: Dialect, ends: Sequence[Ending]) -> None:
    """Write endings (their moves already checked): each job's new state, its lease released, its attempt's end,
    and for a final state its one result (its error as every store keeps it: :func:`storable`). The results are
    written last, once no row lock is left to wait for: from there to the commit, writers of results go one at a
    time (:attr:`Serial.RESULTS`)."""
    db.executemany(
        "UPDATE jobs SET state = ?, lease_owner = NULL, lease_expires = NULL, not_before = ?, "
        "failures = failures + ?, updated_at = ? WHERE id = ?",
        [
            (end.target.value, end.not_before, int(end.outcome in ("infra_error", "lease_expired")), end.at, end.job_id)
            for end in ends
        ],
    )
    db.executemany(  # an attempt that ended already keeps its end (a pending job's last attempt is over)
        "UPDATE attempts SET ended_at = ?, outcome = ?, error = ? WHERE job_id = ? AND number = ? AND ended_at IS NULL",
        [(end.at, end.outcome, storable(end.error), end.job_id, end.attempt) for end in ends],
    )
    results = [
        (end.job_id, end.target.value, end.status, end.reward, _COMPACT.encode(end.output), storable(end.error), end.at)
        for end in ends
        if end.target in TERMINAL
    ]
    if results:
        dialect.serialize(db, Serial.RESULTS)
        db.executemany(
            "INSERT INTO results (job_id, state, status, reward, output, error, at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            results,
        )


def write_moves(db: Session, moves: Sequence[Transition]) -> None:
    """Record moves (already checked against the state machine), each with its time, attempt and reason."""
    db.executemany(
        "INSERT INTO transitions (job_id, attempt, source, target, at, reason) VALUES (?, ?, ?, ?, ?, ?)",
        [(m.job_id, m.attempt, m.source and m.source.value, m.target.value, m.at, storable(m.reason)) for m in moves],
    )


def announce(moves: Sequence[Transition], runs: Mapping[int, str]) -> None:
    """Report committed moves as ``job.transition`` events, each with its job's run."""
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


_needs: dict[tuple[float, int, tuple[tuple[str, float], ...]], str] = {}


def needs_json(needs: Requirements) -> str:
    """``needs`` as stored, encoded once for each distinct value (the jobs of a batch mostly share one)."""
    key = (needs.cpus, needs.memory_bytes, tuple(sorted(needs.resources.items())))
    found = _needs.get(key)
    if found is None:
        if len(_needs) >= 4096:
            _needs.clear()
        found = _needs[key] = canonical_json(needs.to_json())
    return found
