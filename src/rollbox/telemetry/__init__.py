"""rollbox.telemetry: what happened, reported by every layer through one small interface.

The interface (:func:`emit`, sinks) imports nothing else of rollbox, so that every layer, the sandbox included,
may report into it. Beside it: :class:`LiveStats` (the live figures the dashboard and ``rollbox top`` show),
:class:`Alerts` (rules over them; :func:`prometheus_rules` exports them), and, with the optional extras,
:class:`PrometheusSink` (``server``: prometheus-client) and :class:`Archive` / :func:`read_archive`
(``archive``: fsspec and pyarrow), which are imported only when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._alerts import Alert, AlertRule, Alerts, AlertThresholds, default_rules, prometheus_rules
from ._events import Event, JsonlSink, Sink, add_sink, bound, emit, end_torn_line, recording, remove_sink
from ._home import rollbox_home
from ._report import render_report
from ._stats import LiveStats

if TYPE_CHECKING:
    from ._archive import Archive, read_archive
    from ._metrics import PrometheusSink

__all__ = [
    "Alert",
    "AlertRule",
    "AlertThresholds",
    "Alerts",
    "Archive",
    "Event",
    "JsonlSink",
    "LiveStats",
    "PrometheusSink",
    "Sink",
    "add_sink",
    "bound",
    "default_rules",
    "emit",
    "end_torn_line",
    "prometheus_rules",
    "read_archive",
    "recording",
    "remove_sink",
    "render_report",
    "rollbox_home",
]

#: Names whose modules need an optional extra: imported on first use, so that every layer can import telemetry.
_LAZY = {"Archive": "._archive", "read_archive": "._archive", "PrometheusSink": "._metrics"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'rollbox.telemetry' has no attribute {name!r}")
