"""The data of jobs as they cross the store's boundary: what is submitted, what is stored, what happened."""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._errors import PayloadError
from ._states import JobState

__all__ = [
    "MIN_CPUS",
    "Attempt",
    "Job",
    "JobResult",
    "JobSpec",
    "Requirements",
    "Transition",
    "canonical_json",
    "check_needs",
    "encoded",
]

#: The smallest share of a CPU a job may reserve (a thousandth, as the finest CPU share Kubernetes schedules): below
#: it, placement would start jobs without bound.
MIN_CPUS = 0.001
#: The largest integer SQLite stores (priorities, attempts).
_INT64 = 2**63 - 1


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no spaces: equal values give equal text (and digests)."""
    return _CANONICAL.encode(value)


@dataclass(frozen=True, kw_only=True)
class Requirements:
    """What a job needs while it runs; placement reserves it on one worker, and never promises more than a
    worker has."""

    #: CPU cores (fractions allowed: an episode that mostly waits for its policy needs little).
    cpus: float = 1.0
    #: Memory its sandboxes may use together: the sum of the memory limits they promise.
    memory_bytes: int = 0
    #: Other resources by name (a Ray cluster's custom resources, ``{"gpu": 1}``), matched against each worker's.
    resources: Mapping[str, float] = field(default_factory=dict)
    #: Which warm pool serves it: jobs with the same pool key use sandboxes of the same configuration.
    pool: str = ""

    def __post_init__(self) -> None:
        cpus, memory_bytes, resources = check_needs(self.cpus, self.memory_bytes, self.resources)
        object.__setattr__(self, "cpus", cpus)
        object.__setattr__(self, "memory_bytes", memory_bytes)
        object.__setattr__(self, "resources", resources)

    def to_json(self) -> dict[str, Any]:
        """As stored."""
        return {"cpus": self.cpus, "memory_bytes": self.memory_bytes, "resources": dict(self.resources)}


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """One job to submit.

    ``kind`` names how it runs (``exec``, ``grade``, ``episode``, ``validate``); ``payload`` is that kind's plain
    JSON input. A job with an idempotency ``key`` is submitted once: submitting the same key again returns the
    job (and, once it has one, its result) instead of adding another.
    """

    kind: str
    payload: Mapping[str, Any]
    #: Names the job across submissions (``run/task/sample``); ``None``: every submission is a new job.
    key: str | None = None
    #: The run the job belongs to (its results file, events file and progress).
    run_id: str = "default"
    #: Higher runs first; jobs of equal priority run in submission order.
    priority: int = 0
    #: Whose job it is: per-tenant quotas bound how many of a tenant's jobs hold a worker at once.
    tenant: str = "default"
    #: Leases it may take before it is given up as ``infra_error``: infrastructure failures and expired leases
    #: count, the model's failures never do (they are results).
    max_attempts: int = 3
    #: Seconds after submission by which it must have completed; then it ends ``timed_out``.
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("priority", "max_attempts"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not -_INT64 <= value <= _INT64:
                raise ValueError(f"JobSpec.{name} must be a whole number (a 64-bit integer), got {value!r}")
        if self.max_attempts < 1:
            raise ValueError(f"JobSpec.max_attempts must be at least 1, got {self.max_attempts}")
        if self.deadline_s is not None and not _real("JobSpec.deadline_s", self.deadline_s) > 0:
            raise ValueError(f"JobSpec.deadline_s must be positive, got {self.deadline_s}")
        if not self.run_id or "/" in self.run_id or self.run_id.startswith("."):
            raise ValueError(f"JobSpec.run_id must be a plain name (no '/', no leading '.'), got {self.run_id!r}")
        for name in ("kind", "key", "run_id", "tenant"):
            value = getattr(self, name)
            if value is not None and unstorable(value):
                raise ValueError(
                    f"JobSpec.{name} must be text without NUL characters or lone surrogates (every store can hold "
                    f"it), got {value!r:.80}"
                )

    def digest(self) -> str:
        """What makes two submissions of one key the same job: its kind and payload."""
        return encoded(self)[1]


def _real(name: str, value: object) -> float:
    """``value`` as a float, if it is a finite real number (not a bool, not text)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r:.80}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r:.80}")
    return number


def check_needs(cpus: object, memory_bytes: object, resources: object) -> tuple[float, int, dict[str, float]]:
    """What a job needs, checked: ``(cpus, memory_bytes, resources)`` as placement adds and subtracts them.

    A negative, zero or non-finite need would let placement start jobs without bound (a job asking for -100 CPUs
    gave its worker 100 more), so each must be a finite number: at least :data:`MIN_CPUS` CPUs, a whole number of
    bytes from 0, resources from 0.

    Raises:
        ValueError: which need is wrong, with its value.
    """
    cpus = _real("cpus", cpus)
    if not cpus >= MIN_CPUS:
        raise ValueError(f"cpus must be at least {MIN_CPUS:g} (a share of one CPU), got {cpus!r}")
    if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, numbers.Integral):
        raise ValueError(f"memory_bytes must be a whole number of bytes, got {memory_bytes!r:.80}")
    memory = int(memory_bytes)
    if not 0 <= memory <= _INT64:
        raise ValueError(f"memory_bytes must be between 0 and 2**63 - 1, got {memory!r}")
    if not isinstance(resources, Mapping):
        raise ValueError(f"resources must map names to amounts, got {resources!r:.80}")
    checked: dict[str, float] = {}
    for name, amount in resources.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"a resource is named by a non-empty string, got {name!r:.80}")
        checked[name] = _real(f"resources[{name!r}]", amount)
        if checked[name] < 0:
            raise ValueError(f"resources[{name!r}] must be at least 0, got {amount!r}")
    return cpus, memory, checked


def encoded(spec: JobSpec) -> tuple[str, str]:
    """The payload as stored (:func:`canonical_json`) and the spec's digest: that of ``canonical_json([kind,
    payload])``, whose text is built from the payload's, encoded once.

    Raises:
        PayloadError: the payload holds text that is not Unicode (a lone surrogate): no store can hold it.
    """
    payload = canonical_json(spec.payload)
    try:
        return payload, hashlib.sha256(f"[{canonical_json(spec.kind)},{payload}]".encode()).hexdigest()
    except UnicodeEncodeError as exc:
        raise PayloadError(
            f"a {spec.kind!r} job's payload holds text that is not Unicode ({exc.reason}: "
            f"{exc.object[exc.start : exc.end]!r}); send text, or bytes as base64"
        ) from None


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def unstorable(text: str) -> bool:
    """Whether ``text`` holds what a store cannot keep: a NUL (PostgreSQL's text has none) or a lone surrogate
    (not UTF-8)."""
    return _UNSTORABLE.search(text) is not None


def storable(text: str | None) -> str | None:
    """``text`` as every store keeps it: each NUL and lone surrogate (see :func:`unstorable`) becomes U+FFFD. For
    what rollbox writes about a job (an attempt's error, a move's reason), which may quote what a program printed."""
    if text is None or not _UNSTORABLE.search(text):
        return text
    return _UNSTORABLE.sub("\ufffd", text)


@dataclass(frozen=True, kw_only=True)
class Job:
    """A job as the store holds it."""

    id: int
    run_id: str
    key: str | None
    kind: str
    payload: dict[str, Any]
    state: JobState
    priority: int
    tenant: str
    requirements: Requirements
    #: Leases taken so far (each is an attempt).
    attempts: int
    max_attempts: int
    submitted_at: float
    updated_at: float
    #: Who holds its lease now (``None`` outside the leased states).
    lease_owner: str | None = None
    #: The worker it was placed on by its latest lease.
    worker: str | None = None
    #: When (seconds since the epoch) it must have completed by, if ever.
    deadline: float | None = None

    def to_json(self) -> dict[str, Any]:
        """As ``rollbox jobs --json`` prints it."""
        return {
            "id": self.id,
            "run_id": self.run_id,
            "key": self.key,
            "kind": self.kind,
            "state": self.state.value,
            "priority": self.priority,
            "tenant": self.tenant,
            "requirements": self.requirements.to_json(),
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "submitted_at": self.submitted_at,
            "updated_at": self.updated_at,
            "lease_owner": self.lease_owner,
            "worker": self.worker,
            "payload": self.payload,
        }


@dataclass(frozen=True, kw_only=True)
class JobResult:
    """A job's one result: written in the transaction that ends its last lease, never twice."""

    job_id: int
    #: The final state the result was written with.
    state: JobState
    #: The outcome's status in its kind's taxonomy (:class:`rollbox.Status` for ``exec``,
    #: :class:`rollbox.judge.VerdictStatus` for ``grade`` and ``episode``, :class:`rollbox.curate.Decision` for
    #: ``validate``); ``None`` when the job never produced
    #: an outcome (``failed``, ``timed_out``, ``cancelled``).
    status: str | None
    #: ``None`` whenever there is nothing a trainer should learn from (``infra_error`` included).
    reward: float | None
    #: The kind's full output (``ExecResult.to_json()``, ``Verdict.to_json()``, an episode's summary,
    #: ``TaskReport.to_json()``).
    output: dict[str, Any]
    error: str | None
    at: float
    #: Commit order of results in the store (results of a run stream out in this order).
    seq: int = 0

    def to_json(self) -> dict[str, Any]:
        """As stored and printed."""
        return {
            "job_id": self.job_id,
            "state": self.state.value,
            "status": self.status,
            "reward": self.reward,
            "error": self.error,
            "at": self.at,
            "output": self.output,
        }


@dataclass(frozen=True)
class Transition:
    """One move of a job, with its time and the attempt it happened in."""

    job_id: int
    attempt: int
    source: JobState | None
    target: JobState
    at: float
    reason: str | None = None


@dataclass(frozen=True)
class Attempt:
    """One lease of a job: who held it, where it ran, and how it ended (``None`` while it lasts)."""

    job_id: int
    number: int
    owner: str
    worker: str | None
    started_at: float
    ended_at: float | None
    #: ``ok`` (a result, whatever it says), ``infra_error`` (retried), ``lease_expired``, ``released``
    #: (its scheduler stopped cleanly), ``failed``, ``timed_out``, ``cancelled``, or ``lost`` (another owner's
    #: result or cancellation came first).
    outcome: str | None
    error: str | None
