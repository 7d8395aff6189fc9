"""Exceptions raised by the scheduler.

A job's own failures are never exceptions: what the model's code did is the job's result, and an infrastructure
failure is retried, then recorded as an ``infra_error`` result. Exceptions are for refused requests and misuse::

    RollboxError
    └── SchedulerError
        ├── QueueFull              the queue is at its bound; retry after ``retry_after_s``
        ├── IdempotencyConflict    a key already names a job with another payload
        ├── Unplaceable            a job needs more CPU or memory than any worker has, or its tenant's quota is 0
        ├── IllegalTransition      a job was asked to move between states the state machine does not link
        ├── JobNotFound            no job has that id or key
        ├── PayloadError           a job's payload cannot be run as given (its kind, task or fields)
        └── StoreError             the job store's file cannot be read or written (damaged, disk full, locked)
"""

from __future__ import annotations

from rollbox.sandbox import RollboxError

__all__ = [
    "IdempotencyConflict",
    "IllegalTransition",
    "JobNotFound",
    "PayloadError",
    "QueueFull",
    "SchedulerError",
    "StoreError",
    "Unplaceable",
]


class SchedulerError(RollboxError):
    """The root of the scheduler's exceptions."""


class QueueFull(SchedulerError):
    """The bounded queue refused new work; nothing of the refused submission was admitted.

    Attributes:
        retry_after_s: When to submit again: the time the queue needs, at its recent completion rate, to make room.
    """

    def __init__(self, message: str, *, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class IdempotencyConflict(SchedulerError):
    """An idempotency key was submitted again with a different job: a key names one job, forever."""


class Unplaceable(SchedulerError):
    """A job asks for more CPU, memory or resources than any worker of the scheduler has, or its tenant may hold no
    job at once: it could never run."""


class IllegalTransition(SchedulerError):
    """A job was asked to move between two states that the state machine does not link."""


class JobNotFound(SchedulerError):
    """No job in the store has that id or idempotency key."""


class PayloadError(SchedulerError):
    """A job's payload cannot be run as given (unknown kind, missing task, invalid fields): the submitter's fault,
    so the job ends ``failed`` instead of being retried."""


class StoreError(SchedulerError):
    """The job store's SQLite file could not be read or written: it is damaged or is not a job store, its disk is
    full, it cannot be written, or another process held it locked too long. The message says which, where the file
    is and what to do. Nothing committed is lost: a transaction that fails is rolled back whole.

    Attributes:
        path: The store's file.
    """

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path
