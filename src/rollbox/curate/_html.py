"""The HTML summary of a validation run: one self-contained page (no scripts, no external files)."""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence

from ._reasons import Decision
from ._report import TaskReport

__all__ = ["render_html"]

_STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #1d2430; }
h1 { font-size: 22px; margin-bottom: .2em; }
.summary { display: flex; gap: 1em; margin: 1em 0 1.5em; }
.card { border-radius: 8px; padding: .7em 1.2em; background: #f3f5f8; min-width: 8em; }
.card b { display: block; font-size: 26px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .45em .6em; border-bottom: 1px solid #e3e7ee; vertical-align: top; }
th { background: #f3f5f8; font-weight: 600; }
.badge { border-radius: 4px; padding: .1em .5em; font-weight: 600; font-size: 12px; color: white; }
.admit { background: #2e8540; } .weak { background: #c98500; } .reject { background: #c62828; }
.bar { background: #e3e7ee; border-radius: 3px; width: 110px; height: 10px; display: inline-block; }
.bar span { display: block; height: 10px; border-radius: 3px; background: #3563c9; }
.code { font-family: ui-monospace, monospace; font-size: 12px; background: #eef1f6; padding: 0 .3em;
        border-radius: 3px; }
details { margin: .3em 0 1em; } summary { cursor: pointer; color: #3563c9; }
.small { color: #5b6575; font-size: 12px; }
ul { margin: .2em 0; padding-left: 1.2em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text))


def _ratio(value: float | None) -> str:
    if value is None:
        return '<span class="small">-</span>'
    return f'<span class="bar"><span style="width:{value * 100:.0f}%"></span></span> {value:.0%}'


def _task_row(report: TaskReport) -> str:
    reasons = "".join(f'<li><span class="code">{_e(r.code.value)}</span> {_e(r.detail)}</li>' for r in report.reasons)
    generated = _ratio(report.kill_ratio_generated) if report.kill_ratio_generated is not None else ""
    survivors = [m for m in report.mutants if not m.killed]
    details = ""
    if survivors or report.candidates or report.flaky_tests:
        parts = []
        if report.flaky_tests:
            parts.append("<b>Flaky tests</b><ul>" + "".join(f"<li>{_e(t)}</li>" for t in report.flaky_tests) + "</ul>")
        if survivors:
            items = "".join(
                f"<li>{_e(m.path)} {_e(m.location)}: <span class='code'>{_e(m.operator)}</span> {_e(m.description)}"
                + (" <b>(killed by generated cases)</b>" if m.killed_by_generated else "")
                + "</li>"
                for m in survivors
            )
            parts.append(f"<b>Surviving mutants ({len(survivors)} of {len(report.mutants)})</b><ul>{items}</ul>")
        if report.candidates:
            rows = "".join(
                f"<tr><td>{_e(c.name)}</td><td>{_e(c.kind)}</td><td>{_e(c.status)}</td><td>{_e(c.reward)}</td></tr>"
                for c in report.candidates
            )
            parts.append(
                "<b>Candidates</b><table><tr><th>candidate</th><th>kind</th><th>status</th><th>reward</th></tr>"
                f"{rows}</table>"
            )
        details = f"<details><summary>details</summary>{''.join(parts)}</details>"
    cached = ' <span class="small">(cached)</span>' if report.cached else ""
    return (
        f'<tr><td><span class="badge {report.decision.value}">{report.decision.value}</span></td>'
        f"<td><b>{_e(report.task_id)}</b>{cached}<br><span class='small'>{_e(report.path)}</span>{details}</td>"
        f"<td>{_ratio(report.kill_ratio)}<br>{generated}</td>"
        f"<td><ul>{reasons}</ul></td>"
        f"<td>{report.gradings}<br><span class='small'>{report.duration_s:.1f} s</span></td></tr>"
    )


def render_html(reports: Sequence[TaskReport], *, title: str = "rollbox validate") -> str:
    """The page: counts per decision and per reason, then one row per task (reasons, kill ratios, and details:
    flaky tests, surviving mutants, every candidate's grading)."""
    decisions = Counter(r.decision for r in reports)
    reasons = Counter(reason.code.value for r in reports for reason in r.reasons)
    cards = "".join(
        f'<div class="card"><b>{decisions.get(d, 0)}</b><span class="badge {d.value}">{d.value}</span></div>'
        for d in Decision
    )
    ratios = [r.kill_ratio for r in reports if r.kill_ratio is not None]
    mean = sum(ratios) / len(ratios) if ratios else None
    cards += f'<div class="card"><b>{_ratio(mean) if mean is not None else "-"}</b>mean kill ratio</div>'
    reason_list = ", ".join(f'<span class="code">{_e(code)}</span> {count}' for code, count in reasons.most_common())
    rows = "".join(_task_row(r) for r in sorted(reports, key=lambda r: (r.decision.value != "reject", r.task_id)))
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title><style>{_STYLE}</style>"
        f"</head><body><h1>{_e(title)}</h1><div class='small'>{len(reports)} tasks</div>"
        f"<div class='summary'>{cards}</div>"
        f"<p>Reasons: {reason_list or 'none'}</p>"
        "<table><tr><th>decision</th><th>task</th><th>kill ratio<br><span class='small'>with generated</span></th>"
        f"<th>reasons</th><th>gradings</th></tr>{rows}</table></body></html>\n"
    )
