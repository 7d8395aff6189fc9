"""Prometheus metrics: a sink that turns events into counters and histograms, and gauges read at each scrape.

Needs the ``server`` extra (``prometheus-client``). Metrics, by the events they come from (see ``_stats`` for the
fields read):

- ``rollbox_executions_total{status,tenant}`` and ``rollbox_exec_seconds`` (``sandbox.exec``);
- ``rollbox_sandbox_starts_total{tenant}``, ``rollbox_sandbox_start_failures_total{tenant}`` and
  ``rollbox_sandbox_start_seconds`` (``sandbox.start``);
- ``rollbox_verdicts_total{status,tenant}``, ``rollbox_grade_seconds`` and ``rollbox_reward`` (``judge.verdict``,
  ``episode.end``, ``job.result``), ``rollbox_queue_wait_seconds`` (``job.result``);
- ``rollbox_job_transitions_total{state}`` (``job.transition``);
- ``rollbox_outcomes_total`` and ``rollbox_infra_errors_total{source}``: every execution, verdict and finished
  job, and those that ended in ``infra_error`` (with failed sandbox starts): the infra error rate's terms;
- ``rollbox_alerts_total{alert}`` (``alert.fired``);
- gauges, read from :class:`LiveStats` at each scrape: ``rollbox_queue_depth``, ``rollbox_jobs{state}``,
  ``rollbox_infra_error_rate``, ``rollbox_throughput_per_second``, ``rollbox_alerts_firing{alert}``,
  ``rollbox_reward_shift``, ``rollbox_scheduler_pool_sandboxes{pool,state}`` (``pool.resize``), and whatever the
  service sets with ``LiveStats.set_gauge`` (``rollbox_<name>``, with a ``tenant`` label where it was set per
  tenant: requests in flight, sandboxes and episodes open, its own warm pools).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ._events import Event
from ._stats import LATENCY_BUCKETS_S, LiveStats

__all__ = ["PrometheusSink"]

_NAME = re.compile(r"[^a-zA-Z0-9_]")


class PrometheusSink:
    """A sink that keeps Prometheus metrics in ``registry`` (a new one by default).

    Args:
        stats: The live figures whose gauges each scrape reads.
        firing: Returns the names of the alerts firing now, and the reward shift the reward rule reads.
    """

    def __init__(
        self,
        stats: LiveStats,
        *,
        firing: Callable[[], tuple[list[str], float]] | None = None,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.executions = Counter("rollbox_executions", "Commands run", ["status", "tenant"], registry=r)
        self.exec_seconds = Histogram(
            "rollbox_exec_seconds", "Wall time of commands run", buckets=LATENCY_BUCKETS_S, registry=r
        )
        self.starts = Counter("rollbox_sandbox_starts", "Sandboxes started", ["tenant"], registry=r)
        self.start_failures = Counter(
            "rollbox_sandbox_start_failures", "Sandboxes that failed to start", ["tenant"], registry=r
        )
        self.start_seconds = Histogram(
            "rollbox_sandbox_start_seconds", "Time to start a sandbox", buckets=LATENCY_BUCKETS_S, registry=r
        )
        self.verdicts = Counter("rollbox_verdicts", "Verdicts by status", ["status", "tenant"], registry=r)
        self.grade_seconds = Histogram("rollbox_grade_seconds", "Time to grade", buckets=LATENCY_BUCKETS_S, registry=r)
        self.reward = Histogram(
            "rollbox_reward", "Rewards given", buckets=(-1.0, -0.5, 0.0, 0.25, 0.5, 0.75, 1.0), registry=r
        )
        self.transitions = Counter("rollbox_job_transitions", "Job state changes", ["state"], registry=r)
        self.queue_wait = Histogram(
            "rollbox_queue_wait_seconds", "Time jobs waited in the queue", buckets=LATENCY_BUCKETS_S, registry=r
        )
        self.outcomes = Counter("rollbox_outcomes", "Executions, verdicts and finished jobs", registry=r)
        self.infra = Counter("rollbox_infra_errors", "Outcomes that were infra errors", ["source"], registry=r)
        self.alerts = Counter("rollbox_alerts", "Times each alert started firing", ["alert"], registry=r)
        r.register(_LiveGauges(stats, firing or (lambda: ([], 0.0))))

    def write(self, event: Event) -> None:
        f = event.fields
        tenant = str(f.get("tenant") or "")
        kind = event.kind
        if kind == "sandbox.start":
            self.starts.labels(tenant).inc()
            if f.get("wall_s") is not None:
                self.start_seconds.observe(float(f["wall_s"]))
            if not f.get("ok", True):
                self.start_failures.labels(tenant).inc()
                self.outcomes.inc()
                self.infra.labels("sandbox_start").inc()
        elif kind == "sandbox.exec":
            status = str(f.get("status"))
            self.executions.labels(status, tenant).inc()
            if f.get("wall_s") is not None:
                self.exec_seconds.observe(float(f["wall_s"]))
            self._outcome(status, "exec")
        elif kind in ("judge.verdict", "episode.end", "job.result"):
            self._verdict(event, str(f.get("status") or f.get("state")), tenant)
            if f.get("queue_wait_s") is not None:
                self.queue_wait.observe(float(f["queue_wait_s"]))
        elif kind == "job.transition":
            self.transitions.labels(str(f.get("target"))).inc()
        elif kind == "alert.fired":
            self.alerts.labels(str(f.get("alert"))).inc()

    def _verdict(self, event: Event, status: str, tenant: str) -> None:
        f = event.fields
        self.verdicts.labels(status, tenant).inc()
        grade_s = f.get("grade_s") if event.kind == "job.result" else f.get("duration_s")
        if grade_s is not None:
            self.grade_seconds.observe(float(grade_s))
        reward = f.get("reward")
        if isinstance(reward, int | float) and not isinstance(reward, bool):
            self.reward.observe(float(reward))
        self._outcome(status, event.kind.split(".")[0])

    def _outcome(self, status: str, source: str) -> None:
        self.outcomes.inc()
        if status == "infra_error":
            self.infra.labels(source).inc()


class _LiveGauges(Collector):
    def __init__(self, stats: LiveStats, firing: Callable[[], tuple[list[str], float]]) -> None:
        self.stats, self.firing = stats, firing

    def collect(self) -> Iterator[Metric]:
        snap = self.stats.snapshot()
        yield GaugeMetricFamily("rollbox_queue_depth", "Jobs waiting in the queue", value=snap["jobs"]["queue_depth"])
        jobs = GaugeMetricFamily("rollbox_jobs", "Jobs tracked, by state", labels=["state"])
        for state, count in snap["jobs"]["states"].items():
            jobs.add_metric([state], count)
        yield jobs
        yield GaugeMetricFamily(
            "rollbox_infra_error_rate", "Infra errors per outcome, last 10 minutes", value=snap["infra_error_rate"]
        )
        yield GaugeMetricFamily(
            "rollbox_throughput_per_second",
            "Executions, verdicts and jobs finished per second, last minute",
            value=snap["throughput"]["per_s_last_minute"],
        )
        names, shift = self.firing()
        firing = GaugeMetricFamily("rollbox_alerts_firing", "Alerts firing now (1)", labels=["alert"])
        for name in names:
            firing.add_metric([name], 1)
        yield firing
        yield GaugeMetricFamily("rollbox_reward_shift", "Recent mean reward minus the one before", value=shift)
        pools = GaugeMetricFamily(
            "rollbox_scheduler_pool_sandboxes",
            "The scheduler's warm pools, by pool and state",
            labels=["pool", "state"],
        )
        for key, values in snap["pools"].items():
            for state in ("size", "busy", "waiting", "queued"):
                pools.add_metric([key, state], values[state])
        yield pools
        for name, values in self.stats.gauges().items():
            gauge = GaugeMetricFamily(
                f"rollbox_{_NAME.sub('_', name)}", f"{name} (set by the service)", labels=["tenant"]
            )
            for tenant, value in values.items():
                gauge.add_metric([tenant], value)
            yield gauge
