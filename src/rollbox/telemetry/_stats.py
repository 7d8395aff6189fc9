"""Live figures: a sink that folds events into what the dashboard, ``rollbox top`` and the alerts show.

Bounded in memory whatever the traffic: counts, fixed-bucket histograms, a few minutes of timestamps, the last
rewards of each run and the last failures. Made ``exact``, it forgets no timestamp, latency or reward, so that its
rates, quantiles and rewards are over every event written (what a run's report needs). Everything is kept once for
the whole service and once per tenant, so that a tenant is shown only its own work.

The events it reads, and the fields it relies on (others are ignored; every field is optional unless marked):

- ``sandbox.start``: ``ok`` (bool, required), ``wall_s``, ``error``, ``tenant``, ``run``.
- ``sandbox.exec``: ``status`` (a :class:`rollbox.Status` value, required), ``wall_s``, ``queue_s``, ``tenant``,
  ``run``, ``error``, ``stderr`` (its tail), ``language``, ``id``.
- ``judge.verdict``: ``status`` (a verdict status, required), ``reward``, ``duration_s``, ``task``, ``tenant``,
  ``run``, ``error``, ``id``.
- ``job.transition`` (the scheduler's): ``job_id`` and ``target`` (the new state; both required), ``source``,
  ``run_id``, ``tenant``. A job in a state of :data:`TERMINAL_STATES` stops being tracked.
- ``job.result`` (the service's, one per stored result): ``status`` (required), ``reward``, ``queue_wait_s``,
  ``run_s``, ``grade_s``, ``run_id``, ``tenant``, ``task``, ``error``, ``stderr``.
- ``pool.resize`` (the scheduler's elastic warm pools): ``pool`` (its key), ``change``, ``size``, ``busy``,
  ``waiting``, ``queued``; a pool ``closed`` is forgotten. Shown for the whole service only.
- ``episode.turn``: ``wall_s``, ``episode_id``, ``tenant``, ``run``. ``episode.end``: ``status`` (the verdict's),
  ``reward``, ``wall_s``, ``episode_id``, ``task_id``, ``end_reason``, ``tenant``, ``run``.

``tenant`` and ``run`` need not be emitted by the layer itself: the service binds them around each request
(:func:`rollbox.telemetry.bound`).
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from ._events import Event

__all__ = ["LATENCY_BUCKETS_S", "TERMINAL_STATES", "LiveStats"]

#: Upper bounds of the latency histograms' buckets, in seconds (the last bucket is everything above).
LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Job states after which a job changes no more.
TERMINAL_STATES = frozenset({"completed", "failed", "timed_out", "cancelled"})
#: Job states counted as waiting in the queue.
QUEUED_STATES = frozenset({"pending"})
_WINDOW_S = 600.0  # the throughput and rate windows
_BUCKET_S = 10.0  # the throughput series' step
_MAX_JOBS = 100_000  # live jobs tracked per view; beyond, the oldest are forgotten
_REWARDS_PER_RUN = 2000
_RECENT = 2000  # the latencies each histogram's quantiles are read from
_RUNS = 50
_FAILURES = 50
_TAIL_BYTES = 4000


class _Histogram:
    def __init__(self, keep: int | None) -> None:
        self.counts = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.total = 0
        self.sum = 0.0
        self.recent: deque[float] = deque(maxlen=keep)

    def add(self, value: float) -> None:
        self.counts[bisect.bisect_left(LATENCY_BUCKETS_S, value)] += 1
        self.total += 1
        self.sum += value
        self.recent.append(value)

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.recent)
        return {
            "buckets": list(LATENCY_BUCKETS_S),
            "counts": list(self.counts),
            "count": self.total,
            "sum": round(self.sum, 6),
            "p50": _quantile(ordered, 0.5),
            "p90": _quantile(ordered, 0.9),
            "p99": _quantile(ordered, 0.99),
        }


def _quantile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return round(ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)], 6)


@dataclass
class _View:
    """Everything kept for one audience: the whole service, or one tenant (``exact``: nothing forgotten)."""

    exact: bool = False
    executions: Counter[str] = field(default_factory=Counter)
    verdicts: Counter[str] = field(default_factory=Counter)
    transitions: Counter[str] = field(default_factory=Counter)
    finished_jobs: Counter[str] = field(default_factory=Counter)
    jobs: OrderedDict[str, tuple[str, float]] = field(default_factory=OrderedDict)  # job -> (state, since)
    latency: dict[str, _Histogram] = field(default_factory=dict)
    done_at: deque[float] = field(default_factory=deque)  # when each execution, verdict or job ended
    infra_at: deque[float] = field(default_factory=deque)
    outcome_at: deque[float] = field(default_factory=deque)
    start_failures_at: deque[float] = field(default_factory=deque)
    rewards: OrderedDict[str, deque[tuple[float, float]]] = field(default_factory=OrderedDict)  # run -> (at, r)
    failures: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=_FAILURES))
    sandbox_starts: int = 0
    sandbox_start_failures: int = 0

    def histogram(self, name: str) -> _Histogram:
        if name not in self.latency:
            self.latency[name] = _Histogram(None if self.exact else _RECENT)
        return self.latency[name]


class LiveStats:
    """A :class:`~rollbox.telemetry.Sink` that keeps the live figures; :meth:`snapshot` reads them.

    Thread-safe: events may come from any thread. Gauges that no event carries (sandboxes open, requests in
    flight, pool sizes) are set by their owner with :meth:`set_gauge`.

    Args:
        clock: What "now" is, for the windows.
        exact: Keep every timestamp, latency and reward instead of the last 10 minutes and the last 2,000: the
            infra error rate, the latency quantiles and the rewards are then over every event written, and memory
            grows with them. For a finished run's events (:func:`rollbox.telemetry.render_report`), not a service.
    """

    def __init__(self, *, clock: Any = time.time, exact: bool = False) -> None:
        self._clock = clock
        self._exact = exact
        self._lock = threading.Lock()
        self._all = _View(exact=exact)
        self._tenants: dict[str, _View] = {}
        self._gauges: dict[str, dict[str, float]] = {}  # name -> tenant ("" for the service) -> value
        self._job_tenants: OrderedDict[str, str] = OrderedDict()
        self._pools: dict[str, dict[str, int]] = {}  # the scheduler's warm pools, by key
        self.started_at = clock()

    def set_gauge(self, name: str, value: float, *, tenant: str = "") -> None:
        """Set a gauge shown beside the figures (``tenant``: for that tenant's view; empty: the service's)."""
        with self._lock:
            self._gauges.setdefault(name, {})[tenant] = value

    def gauges(self) -> dict[str, dict[str, float]]:
        """Every gauge set: name -> tenant ("" for the service's) -> value."""
        with self._lock:
            return {name: dict(values) for name, values in self._gauges.items()}

    def write(self, event: Event) -> None:
        fields = event.fields
        tenant = str(fields.get("tenant") or "")
        with self._lock:
            if event.kind == "pool.resize":
                self._pool(fields)
                return
            if event.kind == "job.transition":
                # A job's later moves happen in the scheduler's loop, where no tenant is bound: its first says whose.
                job = str(fields.get("job_id"))
                if tenant:
                    self._job_tenants[job] = tenant
                    while len(self._job_tenants) > _MAX_JOBS:
                        self._job_tenants.popitem(last=False)
                else:
                    tenant = self._job_tenants.get(job, "")
            views = [self._all]
            if tenant:
                views.append(self._tenants.setdefault(tenant, _View(exact=self._exact)))
            for view in views:
                self._fold(view, event)

    def _fold(self, view: _View, event: Event) -> None:
        f, at = event.fields, event.at
        kind = event.kind
        if kind == "sandbox.start":
            view.sandbox_starts += 1
            if f.get("wall_s") is not None:
                view.histogram("sandbox_start").add(float(f["wall_s"]))
            if not f.get("ok", True):
                view.sandbox_start_failures += 1
                view.start_failures_at.append(at)
                self._failure(view, event, "sandbox start failed")
                self._outcome(view, at, infra=True)
        elif kind == "sandbox.exec":
            status = str(f.get("status"))
            view.executions[status] += 1
            view.done_at.append(at)
            for name, key in (("exec", "wall_s"), ("queue", "queue_s")):
                if f.get(key) is not None:
                    view.histogram(name).add(float(f[key]))
            self._outcome(view, at, infra=status == "infra_error")
            if status != "ok":
                self._failure(view, event, status)
        elif kind == "judge.verdict":
            self._verdict(view, event, str(f.get("status")), f.get("duration_s"))
        elif kind == "job.result":
            if f.get("queue_wait_s") is not None:
                view.histogram("queue").add(float(f["queue_wait_s"]))
            if f.get("run_s") is not None:
                view.histogram("job_run").add(float(f["run_s"]))
            self._verdict(view, event, str(f.get("status") or f.get("state")), f.get("grade_s"))
        elif kind == "job.transition":
            self._job(view, event)
        elif kind == "episode.turn" and f.get("wall_s") is not None:
            view.histogram("turn").add(float(f["wall_s"]))
        elif kind == "episode.end":
            if f.get("wall_s") is not None:
                view.histogram("episode").add(float(f["wall_s"]))
            self._verdict(view, event, str(f.get("status") or "ended"), None)
        self._trim(view, at)

    def _pool(self, f: Any) -> None:
        key = str(f.get("pool"))
        if f.get("change") == "closed":
            self._pools.pop(key, None)
        else:
            self._pools[key] = {name: int(f.get(name) or 0) for name in ("size", "busy", "waiting", "queued")}
        while len(self._pools) > _RUNS:
            self._pools.pop(next(iter(self._pools)))

    def _verdict(self, view: _View, event: Event, status: str, grade_s: Any) -> None:
        f = event.fields
        view.verdicts[status] += 1
        view.done_at.append(event.at)
        if grade_s is not None:
            view.histogram("grade").add(float(grade_s))
        self._outcome(view, event.at, infra=status == "infra_error")
        reward = f.get("reward")
        if isinstance(reward, int | float) and not isinstance(reward, bool) and math.isfinite(reward):
            run = str(f.get("run") or f.get("run_id") or "")
            series = view.rewards.pop(run, None) or deque(maxlen=None if view.exact else _REWARDS_PER_RUN)
            series.append((event.at, float(reward)))
            view.rewards[run] = series  # the most recent run last
            while len(view.rewards) > _RUNS and not view.exact:
                view.rewards.popitem(last=False)
        if status not in ("passed", "ok"):
            self._failure(view, event, status)

    def _job(self, view: _View, event: Event) -> None:
        f = event.fields
        job, state = str(f.get("job_id")), str(f.get("target"))
        view.transitions[state] += 1
        view.jobs.pop(job, None)
        if state in TERMINAL_STATES:
            view.finished_jobs[state] += 1
        else:
            view.jobs[job] = (state, event.at)
            while len(view.jobs) > _MAX_JOBS:
                view.jobs.popitem(last=False)

    @staticmethod
    def _outcome(view: _View, at: float, *, infra: bool) -> None:
        view.outcome_at.append(at)
        if infra:
            view.infra_at.append(at)

    @staticmethod
    def _failure(view: _View, event: Event, status: str) -> None:
        f = event.fields
        entry = {"at": event.at, "kind": event.kind, "status": status}
        keys = ("id", "job_id", "task", "task_id", "run", "run_id", "tenant", "sandbox", "language", "episode_id")
        for key in (*keys, "error", "stderr"):
            value = f.get(key)
            if value is not None:
                entry[key] = str(value)[-_TAIL_BYTES:]
        view.failures.append(entry)

    def _trim(self, view: _View, now: float) -> None:
        if view.exact:
            return
        horizon = now - _WINDOW_S
        for times in (view.done_at, view.infra_at, view.outcome_at, view.start_failures_at):
            while times and times[0] < horizon:
                times.popleft()

    def snapshot(self, tenant: str | None = None) -> dict[str, Any]:
        """The live figures as one JSON object: the service's (``tenant=None``) or one tenant's."""
        now = self._clock()
        with self._lock:
            view = self._all if tenant is None else self._tenants.get(tenant, _View())
            self._trim(view, now)
            return self._render(view, tenant, now)

    def window(self, tenant: str | None = None, *, seconds: float) -> dict[str, Any]:
        """Counts over the last ``seconds`` (at most the 10-minute window): outcomes, infra errors, sandbox start
        failures, and the queue waits and rewards kept; what the alert rules read."""
        now = self._clock()
        since = now - seconds
        with self._lock:
            view = self._all if tenant is None else self._tenants.get(tenant, _View())
            rewards = [r for series in view.rewards.values() for at, r in series]
            return {
                "outcomes": sum(at >= since for at in view.outcome_at),
                "infra_errors": sum(at >= since for at in view.infra_at),
                "start_failures": sum(at >= since for at in view.start_failures_at),
                "queue_waits": list(view.histogram("queue").recent),
                "rewards": rewards,
            }

    def _render(self, view: _View, tenant: str | None, now: float) -> dict[str, Any]:
        states = Counter(state for state, _since in view.jobs.values())
        steps = int(_WINDOW_S / _BUCKET_S)
        series = [0] * steps
        for at in view.done_at:
            index = steps - 1 - int((now - at) // _BUCKET_S)
            if 0 <= index < steps:
                series[index] += 1
        minute = sum(at >= now - 60 for at in view.done_at)
        outcomes = len(view.outcome_at)
        gauges = {name: values.get(tenant or "", 0.0) for name, values in self._gauges.items()}
        return {
            "at": now,
            "tenant": tenant,
            "uptime_s": round(now - self.started_at, 3),
            "throughput": {
                "per_s_last_minute": round(minute / 60, 4),
                "step_s": _BUCKET_S,
                "series": series,
            },
            "executions": dict(view.executions),
            "verdicts": dict(view.verdicts),
            "jobs": {
                "states": dict(states),
                "finished": dict(view.finished_jobs),
                "transitions": dict(view.transitions),
                "queue_depth": sum(states[s] for s in QUEUED_STATES),
            },
            "infra_error_rate": round(len(view.infra_at) / outcomes, 6) if outcomes else 0.0,
            "sandbox_starts": {"total": view.sandbox_starts, "failed": view.sandbox_start_failures},
            "latency": {name: histogram.to_json() for name, histogram in view.latency.items()},
            "rewards": {
                run: [[round(at, 3), reward] for at, reward in series_] for run, series_ in view.rewards.items()
            },
            "failures": list(reversed(view.failures)),
            "gauges": gauges,
            "pools": {key: dict(values) for key, values in self._pools.items()},
        }
