"""A run's report: one self-contained HTML page (inline SVG plots, no scripts, nothing fetched) made from the run's
events: reward over time, the verdict and status mix, latency distributions, the slowest and the failed work."""

from __future__ import annotations

import datetime
import html
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ._events import Event
from ._stats import LiveStats

__all__ = ["render_report"]

_COLORS = {
    "passed": "#2e7d32",
    "ok": "#2e7d32",
    "succeeded": "#2e7d32",
    "failed": "#c62828",
    "nonzero_exit": "#ef6c00",
    "error": "#ad1457",
    "timeout": "#6a1b9a",
    "infra_error": "#455a64",
    "tampered": "#000000",
}
_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
.cards{display:flex;gap:12px;flex-wrap:wrap}.card{border:1px solid #ddd;border-radius:6px;padding:10px 14px}
.card b{display:block;font-size:20px}table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #eee;
padding:4px 6px;text-align:left;vertical-align:top}pre{white-space:pre-wrap;max-height:160px;overflow:auto;margin:0;
background:#f6f6f6;padding:4px}.grid{display:grid;grid-template-columns:1fr 1fr;gap:18px}svg text{font-size:11px}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _svg_line(points: Sequence[tuple[float, float]], *, width: int = 520, height: int = 220, label: str) -> str:
    if not points:
        return "<p>no rewards in this run</p>"
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y0, y1 = min(0.0, *ys), max(1.0, *ys)
    pad = 36

    def sx(x: float) -> float:
        return pad + (x - x0) / (x1 - x0) * (width - 2 * pad)

    def sy(y: float) -> float:
        return height - pad - (y - y0) / (y1 - y0) * (height - 2 * pad)

    window = max(1, len(points) // 20)
    smooth = []
    for i in range(len(xs)):
        recent = ys[max(0, i - window + 1) : i + 1]
        smooth.append((xs[i], sum(recent) / len(recent)))
    dots = "".join(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2" fill="#90caf9"/>' for x, y in points)
    line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in smooth)
    axes = (
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{height - pad}" stroke="#999"/>'
        f'<text x="4" y="{sy(y1) + 4:.0f}">{y1:g}</text><text x="4" y="{sy(y0) + 4:.0f}">{y0:g}</text>'
        f'<text x="{pad}" y="{height - 8}">0 s</text>'
        f'<text x="{width - pad - 40}" y="{height - 8}">{x1 - x0:.3g} s</text>'
    )
    return (
        f'<svg width="{width}" height="{height}" role="img" aria-label="{_e(label)}">{axes}{dots}'
        f'<polyline points="{line}" fill="none" stroke="#1565c0" stroke-width="2"/></svg>'
    )


def _svg_bars(counts: dict[str, float], *, width: int = 520, label: str, colors: bool = True) -> str:
    if not counts:
        return "<p>none</p>"
    top = max(counts.values()) or 1
    row = 22
    height = row * len(counts) + 10
    bars = []
    for i, (name, value) in enumerate(counts.items()):
        w = value / top * (width - 200)
        color = _COLORS.get(name, "#1976d2") if colors else "#1976d2"
        bars.append(
            f'<text x="0" y="{i * row + 15}">{_e(name)}</text>'
            f'<rect x="130" y="{i * row + 3}" width="{w:.1f}" height="16" fill="{color}"/>'
            f'<text x="{135 + w:.1f}" y="{i * row + 15}">{value:g}</text>'
        )
    return f'<svg width="{width}" height="{height}" role="img" aria-label="{_e(label)}">{"".join(bars)}</svg>'


def _histogram(histogram: dict[str, Any], label: str) -> str:
    edges = histogram["buckets"]
    names = [f"≤{b:g}s" for b in edges] + [f">{edges[-1]:g}s"]
    counts = {n: c for n, c in zip(names, histogram["counts"], strict=True) if c}
    quantiles = (
        f"p50 {histogram['p50']} s · p90 {histogram['p90']} s · p99 {histogram['p99']} s · n={histogram['count']}"
    )
    return f"<h3>{_e(label)}</h3><p>{quantiles}</p>{_svg_bars(counts, label=label, colors=False)}"


def render_report(run: str, events: Sequence[Event]) -> str:
    """The report of ``run`` from its events, as one HTML page: its counts, rates, quantiles and rewards are over
    every event, not the live figures' last minutes."""
    stats = LiveStats(clock=lambda: max((e.at for e in events), default=0.0), exact=True)
    for event in events:
        stats.write(event)
    snap = stats.snapshot()
    start = min((e.at for e in events), default=0.0)
    rewards = sorted((at - start, r) for series in snap["rewards"].values() for at, r in series)
    finished = [e for e in events if e.kind in ("sandbox.exec", "judge.verdict", "episode.end", "job.result")]
    slowest = sorted(finished, key=_duration, reverse=True)[:15]
    failed = [e for e in finished if _status(e) not in ("ok", "passed")][-30:]
    kinds = Counter(e.kind for e in events)
    mean_reward = sum(r for _, r in rewards) / len(rewards) if rewards else math.nan
    began = datetime.datetime.fromtimestamp(start, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC") if events else "-"
    cards = [
        ("events", len(events)),
        ("executions", sum(snap["executions"].values())),
        ("verdicts", sum(snap["verdicts"].values())),
        ("jobs finished", sum(snap["jobs"]["finished"].values())),
        ("mean reward", "-" if math.isnan(mean_reward) else f"{mean_reward:.3f}"),
        ("infra error rate", f"{snap['infra_error_rate']:.1%}"),
    ]
    parts = [
        f"<!doctype html><html lang=en><meta charset=utf-8><title>rollbox run {_e(run)}</title><style>{_STYLE}</style>",
        f"<h1>rollbox run <code>{_e(run)}</code></h1><p>began {began}; event kinds: "
        + ", ".join(f"{_e(k)} {v}" for k, v in kinds.most_common())
        + "</p>",
        '<div class="cards">' + "".join(f'<div class="card">{_e(n)}<b>{_e(v)}</b></div>' for n, v in cards) + "</div>",
        "<h2>Reward over time</h2>",
        _svg_line(rewards, label="reward over time"),
        '<h2>Outcomes</h2><div class="grid"><div><h3>Verdicts</h3>',
        _svg_bars(dict(snap["verdicts"]), label="verdict mix"),
        "</div><div><h3>Executions</h3>",
        _svg_bars(dict(snap["executions"]), label="execution statuses"),
        "</div></div><h2>Latency</h2><div class='grid'>",
        *(f"<div>{_histogram(h, name)}</div>" for name, h in snap["latency"].items()),
        "</div><h2>Slowest</h2>",
        _table(slowest, start),
        "<h2>Failed</h2>",
        _table(failed, start, logs=True),
        "</html>",
    ]
    return "\n".join(parts)


def _status(event: Event) -> str:
    f = event.fields
    return str(f.get("status") or f.get("state") or "")


def _duration(event: Event) -> float:
    f = event.fields
    for key in ("wall_s", "duration_s"):
        if isinstance(f.get(key), int | float):
            return float(f[key])
    return 0.0


def _summary(fields: Mapping[str, Any]) -> str:
    """What an event without a log says of its end: why it ended, how many tests passed."""
    said = [f"ended: {fields['end_reason']}"] if fields.get("end_reason") else []
    if fields.get("tests_total"):
        said.append(f"tests passed: {fields.get('tests_passed', 0)}/{fields['tests_total']}")
    return "; ".join(said)


def _table(events: Sequence[Event], start: float, *, logs: bool = False) -> str:
    if not events:
        return "<p>none</p>"
    rows = ["<table><tr><th>at</th><th>kind</th><th>what</th><th>status</th><th>seconds</th>"]
    rows[0] += "<th>log</th></tr>" if logs else "</tr>"
    for e in events:
        f = e.fields
        what = f.get("task") or f.get("task_id") or f.get("language") or f.get("command") or f.get("job_id") or ""
        row = f"<tr><td>{e.at - start:.1f}</td><td>{_e(e.kind)}</td><td>{_e(what)}</td><td>{_e(_status(e))}</td>"
        row += f"<td>{_duration(e):.3f}</td>"
        if logs:
            log = "\n".join(str(f[k]) for k in ("error", "stderr") if f.get(k)) or _summary(f)
            row += f"<td><pre>{_e(log[-2000:])}</pre></td>"
        rows.append(row + "</tr>")
    return "".join(rows) + "</table>"
