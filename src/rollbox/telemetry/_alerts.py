"""Alerts: rules over the live figures, evaluated by the service and exported for Prometheus.

Each rule exists twice, with the same meaning and thresholds: as a check over :class:`LiveStats` (what the
service evaluates, emits as ``alert.fired`` / ``alert.resolved`` events and shows on the dashboard), and as a
PromQL expression over the metrics that :class:`~rollbox.telemetry.PrometheusSink` exports (what
:func:`prometheus_rules` writes, for those who run Prometheus and Alertmanager).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._events import emit
from ._stats import LiveStats

__all__ = ["Alert", "AlertRule", "AlertThresholds", "Alerts", "default_rules", "prometheus_rules"]


@dataclass(frozen=True, kw_only=True)
class AlertThresholds:
    """When each rule fires. Every window is at most the live figures' 10 minutes."""

    #: Infra errors (sandboxes or gradings that failed through rollbox's or the host's fault) as a share of all
    #: outcomes over ``window_s``, with at least ``min_outcomes`` outcomes.
    infra_error_rate: float = 0.05
    min_outcomes: int = 5
    #: Sandbox starts that failed over ``window_s``.
    start_failures: int = 3
    #: The 90th percentile of queue waits, in seconds.
    queue_wait_p90_s: float = 60.0
    #: The mean reward of the last ``reward_window`` rewards against that of the ``reward_window`` before them.
    reward_shift: float = 0.25
    reward_window: int = 50
    window_s: float = 300.0


@dataclass(frozen=True)
class Alert:
    """A rule that fires now: its name, severity, what it says and the value that made it fire."""

    name: str
    severity: str
    summary: str
    value: float
    since: float

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "name": self.name,
            "severity": self.severity,
            "summary": self.summary,
            "value": self.value,
            "since": self.since,
        }


@dataclass(frozen=True)
class AlertRule:
    """One rule: ``check`` reads the figures of a window and gives the value when it fires, ``None`` when not;
    ``expr`` is the same rule in PromQL."""

    name: str
    severity: str
    summary: str
    expr: str
    check: Callable[[dict[str, Any]], float | None]


def _reward_shift(rewards: list[float], window: int) -> float | None:
    if len(rewards) < 2 * window:
        return None
    recent, before = rewards[-window:], rewards[-2 * window : -window]
    return statistics.fmean(recent) - statistics.fmean(before)


def default_rules(t: AlertThresholds | None = None) -> list[AlertRule]:
    """The four rules: infra error rate, sandbox start failures, queue latency, reward distribution shift."""
    t = t or AlertThresholds()
    window = f"{int(t.window_s)}s"

    def infra(w: dict[str, Any]) -> float | None:
        rate = w["infra_errors"] / w["outcomes"] if w["outcomes"] else 0.0
        return rate if w["outcomes"] >= t.min_outcomes and rate > t.infra_error_rate else None

    def starts(w: dict[str, Any]) -> float | None:
        return float(w["start_failures"]) if w["start_failures"] >= t.start_failures else None

    def queue(w: dict[str, Any]) -> float | None:
        waits = sorted(w["queue_waits"])
        if not waits:
            return None
        p90 = waits[min(len(waits) - 1, int(0.9 * len(waits)))]
        return p90 if p90 > t.queue_wait_p90_s else None

    def reward(w: dict[str, Any]) -> float | None:
        shift = _reward_shift(w["rewards"], t.reward_window)
        return shift if shift is not None and abs(shift) > t.reward_shift else None

    return [
        AlertRule(
            "RollboxInfraErrorRate",
            "critical",
            f"more than {t.infra_error_rate:.0%} of outcomes are infra errors (rollbox's or the host's failures)",
            f"sum(increase(rollbox_infra_errors_total[{window}])) / clamp_min(sum(increase("
            f"rollbox_outcomes_total[{window}])), 1) > {t.infra_error_rate} and sum(increase("
            f"rollbox_outcomes_total[{window}])) >= {t.min_outcomes}",
            infra,
        ),
        AlertRule(
            "RollboxSandboxStartFailures",
            "critical",
            f"{t.start_failures} or more sandboxes failed to start within {window}",
            f"sum(increase(rollbox_sandbox_start_failures_total[{window}])) >= {t.start_failures}",
            starts,
        ),
        AlertRule(
            "RollboxQueueLatency",
            "warning",
            f"the 90th percentile of queue waits is above {t.queue_wait_p90_s:g} s",
            f"histogram_quantile(0.9, sum by (le) (rate(rollbox_queue_wait_seconds_bucket[{window}]))) > "
            f"{t.queue_wait_p90_s}",
            queue,
        ),
        AlertRule(
            "RollboxRewardShift",
            "warning",
            f"the mean of the last {t.reward_window} rewards moved more than {t.reward_shift:g} from the "
            f"{t.reward_window} before",
            f"abs(rollbox_reward_shift) > {t.reward_shift}",
            reward,
        ),
    ]


class Alerts:
    """Evaluates rules over live figures; each change (a rule starts or stops firing) is emitted as an event."""

    def __init__(self, stats: LiveStats, thresholds: AlertThresholds | None = None) -> None:
        self.stats = stats
        self.thresholds = thresholds or AlertThresholds()
        self.rules = default_rules(self.thresholds)
        self._firing: dict[str, Alert] = {}

    @property
    def firing(self) -> list[Alert]:
        """The alerts firing at the last :meth:`evaluate`."""
        return list(self._firing.values())

    def evaluate(self, now: float) -> list[Alert]:
        """Check every rule now; returns the alerts that fire."""
        window = self.stats.window(seconds=self.thresholds.window_s)
        for rule in self.rules:
            value = rule.check(window)
            current = self._firing.get(rule.name)
            if value is not None and current is None:
                self._firing[rule.name] = Alert(rule.name, rule.severity, rule.summary, round(value, 6), now)
                emit("alert.fired", alert=rule.name, severity=rule.severity, summary=rule.summary, value=value)
            elif value is not None and current is not None:
                self._firing[rule.name] = Alert(rule.name, rule.severity, rule.summary, round(value, 6), current.since)
            elif value is None and current is not None:
                del self._firing[rule.name]
                emit("alert.resolved", alert=rule.name, firing_s=now - current.since)
        return self.firing

    def reward_shift(self) -> float:
        """The reward shift the reward rule reads (0 while too few rewards): exported as a gauge."""
        t = self.thresholds
        shift = _reward_shift(self.stats.window(seconds=t.window_s)["rewards"], t.reward_window)
        return shift or 0.0


def prometheus_rules(rules: list[AlertRule] | None = None) -> str:
    """The rules as a Prometheus alerting rules file (YAML), for ``rule_files:`` in prometheus.yml."""
    lines = ["groups:", "  - name: rollbox", "    rules:"]
    for rule in rules if rules is not None else default_rules():
        lines += [
            f"      - alert: {rule.name}",
            f"        expr: {_quote(rule.expr)}",
            "        for: 1m",
            "        labels:",
            f"          severity: {rule.severity}",
            "        annotations:",
            f"          summary: {_quote(rule.summary)}",
        ]
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is valid YAML)."""
    return json.dumps(text)
