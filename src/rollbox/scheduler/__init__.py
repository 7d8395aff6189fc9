"""rollbox.scheduler: durable jobs, leases, retries, admission control, elastic warm pools, and Ray.

Every job and every move of it lives in a SQLite file under ``$ROLLBOX_HOME`` (default ``~/.rollbox``), or in a
PostgreSQL database (``$ROLLBOX_DB``) that schedulers on many hosts share; a scheduler killed at any moment loses
nothing and, started again (or another one), records every result exactly once. Imports
:mod:`rollbox.judge`, :mod:`rollbox.tasks` and :mod:`rollbox.sandbox` (and, for their kinds, ``rollbox.env`` and
``rollbox.curate``).
"""

from ._episode_kind import API_KEY_VARIABLE, episode_payload
from ._errors import (
    IdempotencyConflict,
    IllegalTransition,
    JobNotFound,
    PayloadError,
    QueueFull,
    SchedulerError,
    StoreError,
    Unplaceable,
)
from ._events import recorded_file
from ._exec_kind import exec_payload
from ._home import RUN_ID_MAX, RUN_ID_PATTERN, rollbox_home, run_dir, store_path, store_target
from ._kinds import JobContext, JobKind, Outcome, get_kind, kind_names, register_kind
from ._model import Attempt, Job, JobResult, JobSpec, Requirements, Transition
from ._placement import Capacity, machine_capacity
from ._pool_key import pool_key
from ._pools import ElasticSandboxes
from ._processes import ProcessWorker, process_workers
from ._retry import RetryPolicy
from ._scheduler import Scheduler
from ._states import TERMINAL, TRANSITIONS, JobState
from ._store import JobStore
from ._validate_kind import validate_payload
from ._workers import LocalWorker, Worker, WorkerLost

__all__ = [
    "API_KEY_VARIABLE",
    "RUN_ID_MAX",
    "RUN_ID_PATTERN",
    "TERMINAL",
    "TRANSITIONS",
    "Attempt",
    "Capacity",
    "ElasticSandboxes",
    "IdempotencyConflict",
    "IllegalTransition",
    "Job",
    "JobContext",
    "JobKind",
    "JobNotFound",
    "JobResult",
    "JobSpec",
    "JobState",
    "JobStore",
    "LocalWorker",
    "Outcome",
    "PayloadError",
    "ProcessWorker",
    "QueueFull",
    "Requirements",
    "RetryPolicy",
    "Scheduler",
    "SchedulerError",
    "StoreError",
    "Transition",
    "Unplaceable",
    "Worker",
    "WorkerLost",
    "episode_payload",
    "exec_payload",
    "get_kind",
    "kind_names",
    "machine_capacity",
    "pool_key",
    "process_workers",
    "recorded_file",
    "register_kind",
    "rollbox_home",
    "run_dir",
    "store_path",
    "store_target",
    "validate_payload",
]
