"""The job state machine: a closed set of states and the only moves between them.

    pending -> scheduled -> running -> grading -> completed | failed | timed_out | cancelled

A job goes back to ``pending`` from a leased state when its infrastructure failed (it is retried) or its lease
expired (its worker died). Every move is checked here before it is written, and written with its time.
"""

from __future__ import annotations

import enum

from ._errors import IllegalTransition

__all__ = ["ACTIVE", "TERMINAL", "TRANSITIONS", "JobState", "check_transition"]


class JobState(str, enum.Enum):
    """Where a job is in its life. Exactly one at a time; the four last ones are final."""

    #: Queued: submitted, or returned to the queue after an infrastructure failure or an expired lease.
    PENDING = "pending"
    #: Leased by a scheduler and assigned to a worker; it starts as soon as that worker has room for its CPU and
    #: memory.
    SCHEDULED = "scheduled"
    #: Its worker started it, its CPU and memory reserved there: the command, episode or validation is running.
    RUNNING = "running"
    #: Its run ended and the judge is grading what it left.
    GRADING = "grading"
    #: It has its one result: a success, the model's failure, or ``infra_error`` after its last retry.
    COMPLETED = "completed"
    #: It could not be run as submitted (its payload is invalid: a missing task, an unknown kind).
    FAILED = "failed"
    #: Its deadline passed before it completed; it will not run again.
    TIMED_OUT = "timed_out"
    #: It was cancelled before it completed.
    CANCELLED = "cancelled"


#: The final states: a job in one of them has its one result and never moves again.
TERMINAL = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED})
#: The states in which a job is held by a lease (its scheduler must keep renewing it).
ACTIVE = frozenset({JobState.SCHEDULED, JobState.RUNNING, JobState.GRADING})

_ENDS = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.TIMED_OUT, JobState.CANCELLED})

#: Every legal move. ``None`` is where a job comes from when it is submitted.
TRANSITIONS: dict[JobState | None, frozenset[JobState]] = {
    None: frozenset({JobState.PENDING}),
    # Leased; or ended without running: cancelled, its deadline passed, its payload found invalid.
    JobState.PENDING: frozenset({JobState.SCHEDULED, JobState.CANCELLED, JobState.TIMED_OUT, JobState.FAILED}),
    # Started; or back to the queue (its lease expired or was released before it started); or ended.
    JobState.SCHEDULED: frozenset({JobState.RUNNING, JobState.PENDING} | _ENDS),
    # Graded; or retried (back to pending); or ended (kinds that do not grade complete from here).
    JobState.RUNNING: frozenset({JobState.GRADING, JobState.PENDING} | _ENDS),
    JobState.GRADING: frozenset({JobState.PENDING} | _ENDS),
    JobState.COMPLETED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.TIMED_OUT: frozenset(),
    JobState.CANCELLED: frozenset(),
}


def check_transition(job_id: int, source: JobState | None, target: JobState) -> None:
    """Refuse a move the state machine does not have.

    Raises:
        IllegalTransition: ``source -> target`` is not a legal move; the message lists the legal ones.
    """
    allowed = TRANSITIONS[source]
    if target not in allowed:
        legal = ", ".join(sorted(s.value for s in allowed)) or "none: it is final"
        where = source.value if source is not None else "(new)"
        raise IllegalTransition(f"job {job_id} cannot move from {where} to {target.value}; legal moves: {legal}")
