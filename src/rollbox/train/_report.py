"""The run's report: a self-contained HTML page with a line chart per metric (both arms), the summary table, the
task stream, and where each arm's policy ended; and the same figures as text for the terminal."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from ._metrics import IterationStats

__all__ = ["METRICS", "render_report", "sparkline", "summary_table"]

#: The metrics plotted, with their titles and whether they are rates in [0, 1].
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("reward_mean", "Reward the arm trained on (mean)", False),
    ("true_pass_rate", "True pass rate (every chosen action regraded by rollbox's judge)", True),
    ("hack_rate", "Hack rate (share of rollouts that are reward hacks)", True),
    ("masked", "Masked rollouts (no reward for the arm: left out, never counted as 0)", False),
    ("infra_errors", "Infrastructure errors (masked: rollbox or the host failed)", False),
)
_COLOURS = {"naive": "#d9480f", "rollbox": "#1971c2"}
_W, _H, _PAD = 520, 230, 44


def _values(stats: Sequence[IterationStats], metric: str) -> list[float | None]:
    return [getattr(s, metric) for s in stats]


def _chart(title: str, series: Mapping[str, list[float | None]], unit_range: bool) -> str:
    """One line chart as inline SVG: iterations on x, the metric on y, a line and dots per arm, and a legend."""
    points = [v for values in series.values() for v in values if v is not None]
    low, high = (0.0, 1.0) if unit_range else (min([0.0, *points]), max([1.0, *points]))
    if high == low:
        high = low + 1.0
    count = max((len(v) for v in series.values()), default=1)

    def x(i: int) -> float:
        return _PAD + (_W - 2 * _PAD) * (i / max(count - 1, 1))

    def y(v: float) -> float:
        return _H - _PAD + (v - low) / (high - low) * (2 * _PAD - _H)

    parts = [f'<svg viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}" role="img" aria-label="{html.escape(title)}">']
    for tick in range(5):
        value = low + (high - low) * tick / 4
        parts.append(
            f'<line x1="{_PAD}" x2="{_W - _PAD}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="#e9ecef"/>'
            f'<text x="{_PAD - 6}" y="{y(value) + 4:.1f}" text-anchor="end" font-size="11">{value:.2g}</text>'
        )
    for i in range(count):
        parts.append(f'<text x="{x(i):.1f}" y="{_H - _PAD + 16}" text-anchor="middle" font-size="11">{i + 1}</text>')
    parts.append(f'<text x="{_W / 2}" y="{_H - 6}" text-anchor="middle" font-size="11">iteration</text>')
    for index, (arm, values) in enumerate(series.items()):
        colour = _COLOURS.get(arm, "#495057")
        drawn = [(x(i), y(v)) for i, v in enumerate(values) if v is not None]
        if drawn:
            path = " ".join(f"{'M' if j == 0 else 'L'}{px:.1f},{py:.1f}" for j, (px, py) in enumerate(drawn))
            # The second arm's line is dashed: where the arms agree, both stay visible.
            dash = ' stroke-dasharray="7 4"' if index else ""
            parts.append(f'<path d="{path}" fill="none" stroke="{colour}" stroke-width="2.5"{dash}/>')
            parts += [f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"/>' for px, py in drawn]
        legend_x = _PAD + 10 + index * 120
        parts.append(
            f'<rect x="{legend_x}" y="10" width="14" height="4" fill="{colour}"/>'
            f'<text x="{legend_x + 20}" y="16" font-size="12">{html.escape(arm)} arm</text>'
        )
    parts.append("</svg>")
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{''.join(parts)}</figure>"


def _cell(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)


def summary_table(arms: Mapping[str, Sequence[IterationStats]]) -> list[list[str]]:
    """Rows (a header first) of each arm's first and last iteration, per metric."""
    rows = [["arm", *(f"{m} (first -> last)" for m, _, _ in METRICS)]]
    for arm, stats in arms.items():
        rows.append([arm, *(f"{_cell(_values(stats, m)[0])} -> {_cell(_values(stats, m)[-1])}" for m, _, _ in METRICS)])
    return rows


def sparkline(values: Sequence[float | None], low: float = 0.0, high: float = 1.0) -> str:
    """``values`` as a row of block characters (a blank for a missing one)."""
    blocks = "▁▂▃▄▅▆▇█"
    span = (high - low) or 1.0
    return "".join(
        " " if v is None else blocks[min(max(int((v - low) / span * (len(blocks) - 1) + 0.5), 0), len(blocks) - 1)]
        for v in values
    )


def _table(rows: list[list[str]]) -> str:
    head, *body = rows
    cells = "".join(f"<th>{html.escape(c)}</th>" for c in head)
    lines = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in body)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{lines}</tbody></table>"


def _favourites(final: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """Per arm: the mass its final policy puts on each action, summed over tasks (the top ten)."""
    if not final:
        return "<p>A served model is not updated by this loop (the trainer updates it); no final policy to show.</p>"
    rows = [["arm", "actions with the most probability, summed over tasks and divided by their number"]]
    for arm, tasks in final.items():
        mass: dict[str, float] = {}
        for distribution in tasks.values():
            for name, p in distribution.items():
                family = "mutant" if name.startswith("mutant_") else name
                mass[family] = mass.get(family, 0.0) + p / max(len(tasks), 1)
        top = sorted(mass.items(), key=lambda kv: -kv[1])[:10]
        rows.append([arm, ", ".join(f"{name} {p:.0%}" for name, p in top)])
    return _table(rows)


def render_report(
    *,
    run_id: str,
    command: str,
    arms: Mapping[str, Sequence[IterationStats]],
    final: Mapping[str, Mapping[str, Mapping[str, float]]],
    stream: Mapping[str, Any],
    policy: str,
    wall_s: float,
) -> str:
    """The whole page."""
    charts = "".join(
        _chart(title, {arm: _values(stats, metric) for arm, stats in arms.items()}, unit)
        for metric, title, unit in METRICS
    )
    sources = [["source", "offered", "admitted", "used", "refused (reason: tasks)"]]
    for name, counts in stream.get("sources", {}).items():
        why = ", ".join(f"{code}: {n}" for code, n in sorted(counts["refused"].items())) or "-"
        sources.append([name, str(counts["offered"]), str(counts["admitted"]), str(counts["used"]), why])
    described = (
        "a softmax over a pool of candidate actions per task (the reference fix, wrong and mutated solutions, and "
        "reward hacks), carried out through the episode tools, its logits updated by GRPO"
        if policy == "pool"
        else f"the served model {html.escape(policy)}, through the episode tools (rollouts and rewards only)"
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>rollbox train: {html.escape(run_id)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1120px; color: #212529; }}
.charts {{ display: grid; grid-template-columns: repeat(2, 1fr); gap: 1em; }}
figure {{ margin: 0; border: 1px solid #dee2e6; border-radius: 6px; padding: .5em; }}
figcaption {{ font-weight: 600; font-size: 14px; margin-bottom: .3em; }}
table {{ border-collapse: collapse; margin: 1em 0; }} td, th {{ border: 1px solid #dee2e6; padding: .3em .6em; }}
code {{ background: #f1f3f5; padding: 0 .3em; }}
</style></head><body>
<h1>rollbox train — run {html.escape(run_id)}</h1>
<p>Two arms, the same tasks and seed: the <b style="color:{_COLOURS["naive"]}">naive</b> arm trains on the
exit code of the test command run in the agent's own sandbox (what common harnesses do); the
<b style="color:{_COLOURS["rollbox"]}">rollbox</b> arm trains on rollbox's judge. Every rollout of both arms is
regraded by the judge for the true pass rate. Policy: {described}. Wall time {wall_s:.0f} s.</p>
<p>Command: <code>{html.escape(command)}</code></p>
<div class="charts">{charts}</div>
<h2>Summary</h2>{_table(summary_table(arms))}
<h2>Where each arm's policy ended</h2>{_favourites(final)}
<h2>Task stream</h2>{_table(sources)}
</body></html>
"""
