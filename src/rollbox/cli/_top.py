"""``rollbox top``: a service's live figures in the terminal, refreshed until interrupted."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from ._args import positive_seconds
from ._terminal import printable

_HELP = """\
Show a rollbox service's live figures (what its dashboard shows) in the terminal: throughput, queue, job
states, verdict and status mix, latency quantiles, rewards per run, active alerts and the latest failures.

examples:
  rollbox top                                   the service on 127.0.0.1:8080
  rollbox top --url http://trainer-3:8080 --key rbx_...
  rollbox top --once                            print one screen and exit
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``top`` to the command line."""
    parser = commands.add_parser(
        "top",
        help="a service's live figures in the terminal",
        description=_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the service (default http://127.0.0.1:8080)")
    parser.add_argument("--key", default=os.environ.get("ROLLBOX_API_KEY"), help="API key ($ROLLBOX_API_KEY)")
    parser.add_argument("--interval", type=positive_seconds, default=2.0, help="seconds between refreshes (default 2)")
    parser.add_argument("--once", action="store_true", help="print one screen and exit")
    parser.set_defaults(run=_top)


def _bar(value: float, top: float, width: int = 30) -> str:
    return "█" * (round(value / top * width) if top else 0)


def render(snap: dict[str, Any]) -> str:
    """One screen of ``rollbox top`` from ``/v1/stats``'s object, safe to print (what runs there and the tenants
    name, a candidate's stderr above all, may hold a terminal's escapes)."""
    lines = [
        f"rollbox · run {snap.get('run')} · up {snap['uptime_s']:.0f} s · "
        f"{snap['throughput']['per_s_last_minute']:.2f}/s (last minute) · queue {snap['jobs']['queue_depth']} · "
        f"infra errors {snap['infra_error_rate']:.1%}",
        "gauges: " + "  ".join(f"{k} {v:g}" for k, v in sorted(snap.get("gauges", {}).items())),
    ]
    alerts = snap.get("alerts") or []
    lines.append("alerts: " + ("; ".join(f"{a['name']} ({a['severity']}) {a['summary']}" for a in alerts) or "none"))
    for title, counts in (
        ("jobs", snap["jobs"]["states"]),
        ("verdicts", snap["verdicts"]),
        ("executions", snap["executions"]),
    ):
        lines.append(f"{title}:")
        top = max(counts.values(), default=0)
        lines += [f"  {name:<16}{count:>8}  {_bar(count, top)}" for name, count in sorted(counts.items())] or ["  -"]
    lines.append("latency (p50 / p90 / p99 s):")
    for name, h in sorted(snap["latency"].items()):
        lines.append(f"  {name:<16}{h['p50']!s:>9} {h['p90']!s:>9} {h['p99']!s:>9}   n={h['count']}")
    lines.append("rewards (mean of the last 50 per run):")
    for run, series in snap["rewards"].items():
        recent = [r for _at, r in series[-50:]]
        lines.append(f"  {run or '-':<28}{sum(recent) / len(recent):8.3f}   n={len(series)}")
    lines.append("latest failures:")
    for f in snap["failures"][:8]:
        what = f.get("task") or f.get("language") or f.get("sandbox") or ""
        detail = (f.get("error") or f.get("stderr") or "").strip().splitlines()[-1:] or [""]
        lines.append(
            f"  {time.strftime('%H:%M:%S', time.localtime(f['at']))} {f['status']:<14}{what:<20}{detail[0][:60]}"
        )
    return printable("\n".join(lines))


def _top(args: argparse.Namespace) -> int:
    try:
        from rollbox.client import Client, ClientError
    except ImportError as exc:
        print(f"rollbox top needs the client extra: pip install 'rollbox[client]' ({exc})", file=sys.stderr)
        return 2
    with Client(args.url, api_key=args.key, retries=0, timeout_s=10) as client:
        while True:
            try:
                screen = render(client.stats())
            except ClientError as exc:
                print(f"rollbox top: {exc}", file=sys.stderr)
                return 1
            if args.once:
                print(screen)
                return 0
            sys.stdout.write("\x1b[H\x1b[2J" + screen + "\n")
            sys.stdout.flush()
            time.sleep(args.interval)
