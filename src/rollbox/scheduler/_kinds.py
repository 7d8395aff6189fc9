"""Job kinds: how the payload of one kind of job runs, and how its outcome becomes the job's result.

A kind is a small object with a name, :meth:`JobKind.requirements` (read from the payload when the job is
submitted: an invalid payload is refused then, before anything is queued) and :meth:`JobKind.run`. Kinds are
named by ``module:attribute`` so that a worker on another machine (a Ray node) finds the same kind by its name.
``exec``, ``grade``, ``episode`` and ``validate`` are built in, one module each.
"""

from __future__ import annotations

import asyncio
import importlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from rollbox.sandbox import SandboxSource

from ._errors import PayloadError
from ._model import Requirements, unstorable

__all__ = [
    "JobContext",
    "JobKind",
    "Outcome",
    "failed_attempt",
    "get_kind",
    "kind_names",
    "own_cancellation",
    "register_kind",
    "requested",
]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one attempt of a job produced.

    A status of ``infra_error`` means rollbox or the host failed: the job is retried, and only its last failure
    becomes its result. Any other status (the model's success or failure alike) is the job's result.
    """

    #: In the kind's own taxonomy: a :class:`rollbox.Status` or :class:`rollbox.judge.VerdictStatus` value.
    status: str
    reward: float | None = None
    #: The kind's full output, plain JSON.
    output: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    #: An episode's record (turns, actions, observations), written to the run's ``trajectories/JOB.json``.
    trajectory: Any = None

    @property
    def infra(self) -> bool:
        """Whether rollbox or the host failed (the job is retried)."""
        return self.status == "infra_error"


@dataclass(kw_only=True)
class JobContext:
    """What a kind gets while it runs one attempt of one job."""

    job_id: int
    attempt: int
    run_id: str
    #: Where its sandboxes come from: the worker's warm pools.
    sandboxes: SandboxSource
    #: Say that the run is over and grading begins (``running -> grading``).
    grading: Callable[[], None] = lambda: None


class JobKind(Protocol):
    """How one kind of job runs."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        """What a job of this payload needs (CPU, memory, its warm pool).

        Raises:
            PayloadError: the payload cannot be run; the message says which field and how to fix it.
        """
        ...

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        """Run one attempt. Return the outcome: the model's failures are outcomes, and so are rollbox's own
        (``infra_error``, retried).

        Raises:
            PayloadError: the payload turned out not to be runnable (the job ends ``failed``). Any other exception
                is taken as rollbox's failure, and retried.
        """
        ...


def own_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is the cancellation of the running task by its owner (the scheduler stopping, a deadline, a
    cancelled job), which must propagate; a ``CancelledError`` that a kind raised of itself is its failure."""
    task = asyncio.current_task()
    return isinstance(exc, asyncio.CancelledError) and task is not None and task.cancelling() > 0


def failed_attempt(exc: BaseException) -> Outcome:
    """The outcome of an attempt that raised ``exc`` (any exception, ``SystemExit`` and ``KeyboardInterrupt``
    included, but the owner's cancellation): rollbox's failure, retried and counted, never the model's."""
    return Outcome(status="infra_error", error=f"{type(exc).__name__}: {exc}")


_PLAIN = frozenset({str, int, float, bool, type(None)})
_OUTPUT = json.JSONEncoder(separators=(",", ":"))  # as the stores write an output


def unstorable_outcome(outcome: object) -> str | None:
    """Why no store can hold what a kind's attempt returned, or None. Such an outcome is the kind's bug, failed
    as if it had raised (:func:`failed_attempt`): left to the store, it stopped the scheduler's transaction, and
    the scheduler with it. An output of plain values (what the built-in kinds return) is known good unencoded."""
    if not isinstance(outcome, Outcome):
        return f"the kind returned {type(outcome).__name__}, not an Outcome"
    if type(outcome.status) is not str or unstorable(outcome.status):
        return (
            f"the kind's outcome cannot be stored: its status is {type(outcome.status).__name__} {outcome.status!r:.80}"
        )
    if outcome.reward is not None and type(outcome.reward) not in (int, float):
        return f"the kind's outcome cannot be stored: its reward is {type(outcome.reward).__name__}"
    if outcome.error is not None and type(outcome.error) is not str:
        return f"the kind's outcome cannot be stored: its error is {type(outcome.error).__name__}"
    output = outcome.output
    if not isinstance(output, Mapping):
        return f"the kind's outcome cannot be stored: its output is {type(output).__name__}, not a mapping"
    if all(type(k) is str and type(v) in _PLAIN for k, v in output.items()):
        return None
    try:
        _OUTPUT.encode(dict(output))
    except (TypeError, ValueError, RecursionError) as exc:
        return f"the kind's outcome cannot be stored: its output is not JSON ({type(exc).__name__}: {exc})"
    return None


def requested(payload: Mapping[str, Any], kind: str, *, memory_bytes: int, pool: str = "") -> Requirements:
    """What a job needs: its payload's ``cpus`` (default 1) and ``resources`` (default none), with the memory and
    pool its kind works out.

    Raises:
        PayloadError: ``cpus`` or a resource is not a finite number in range (a need placement could not honour).
    """
    cpus, resources = payload.get("cpus", 1.0), payload.get("resources") or {}
    # Made once for each value (the jobs of a batch mostly share one): a submission checks every job's.
    plain = not resources and type(cpus) in (int, float) and type(memory_bytes) is int
    key = (type(cpus), cpus, memory_bytes, pool) if plain else None
    found = _requested.get(key) if key is not None else None
    if found is not None:
        return found
    try:
        found = Requirements(cpus=cpus, memory_bytes=memory_bytes, resources=resources, pool=pool)
    except ValueError as exc:
        raise PayloadError(f"invalid {kind} payload: {exc}") from None
    if key is not None:
        if len(_requested) >= 1024:
            _requested.clear()
        _requested[key] = found
    return found


_requested: dict[tuple[type, float, int, str], Requirements] = {}


_KINDS: dict[str, str] = {
    "exec": "rollbox.scheduler._exec_kind:ExecKind",
    "grade": "rollbox.scheduler._grade_kind:GradeKind",
    "episode": "rollbox.scheduler._episode_kind:EpisodeKind",
    "validate": "rollbox.scheduler._validate_kind:ValidateKind",
}
_loaded: dict[str, JobKind] = {}


def register_kind(name: str, target: str) -> None:
    """Add a kind (or replace one) by ``module:attribute``, a class made with no arguments or a kind object.

    Every process that runs jobs (a Ray node's worker too) must be able to import ``module``.
    """
    if ":" not in target:
        raise ValueError(f"a kind is named by 'module:attribute', got {target!r}")
    _KINDS[name] = target
    _loaded.pop(name, None)


def kind_target(name: str) -> str | None:
    """The ``module:attribute`` a kind is registered by here (``None`` for an unknown name): a job sent to
    another process carries it, so that a kind registered in the driver is found there too."""
    return _KINDS.get(name)


def kind_names() -> list[str]:
    """The names of the kinds known here."""
    return sorted(_KINDS)


def get_kind(name: str) -> JobKind:
    """The kind called ``name``.

    Raises:
        PayloadError: no kind has that name, or its module cannot be imported.
    """
    if name in _loaded:
        return _loaded[name]
    target = _KINDS.get(name)
    if target is None:
        raise PayloadError(f"unknown job kind {name!r}: expected one of {', '.join(kind_names())}")
    module, _, attribute = target.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (Exception, SystemExit, GeneratorExit) as exc:  # whatever its module does on import, this process lives
        raise PayloadError(f"job kind {name!r} ({target}) cannot be loaded here: {type(exc).__name__}: {exc}") from exc
    kind: JobKind = found() if isinstance(found, type) else found
    _loaded[name] = kind
    return kind
