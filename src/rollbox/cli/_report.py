"""``rollbox report RUN_ID``: a run's self-contained HTML report, from its archived (or JSONL) events."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rollbox.telemetry import Event, render_report, rollbox_home

from ._args import run_name

_HELP = """\
Write the HTML report of a run: reward over time, verdict and status mix, latency distributions, the slowest
and the failed work with their logs. One file, no scripts, nothing fetched: mail it, archive it.

The events come from the run's own file when 'rollbox run' made it ($ROLLBOX_HOME/runs/RUN_ID/events.jsonl),
else from the archive (default $ROLLBOX_HOME/archive, where 'rollbox serve' archives); --archive or --events
(a JSONL file of events) choose the source.

examples:
  rollbox report run-7                          a run of 'rollbox run'
  rollbox report serve-20250101-120000
  rollbox report run-7 --archive s3://bucket/rollbox -o run-7.html
  rollbox report run-7 --events run-7/events.jsonl
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``report`` to the command line."""
    parser = commands.add_parser(
        "report",
        help="write a run's HTML report",
        description=_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_id", type=run_name, metavar="RUN_ID")
    parser.add_argument("--archive", help="the archive's fsspec URL (default $ROLLBOX_HOME/archive)")
    parser.add_argument("--events", type=Path, help="read the events from this JSONL file instead")
    parser.add_argument("-o", "--output", type=Path, help="the HTML file (default RUN_ID.html)")
    parser.set_defaults(run=_report)


def _events(args: argparse.Namespace) -> tuple[list[Event], list[str]]:
    """The run's events, and why each line skipped was not one (empty for the archive)."""
    if args.events is not None:
        return _read_jsonl(args.events, args.run_id)
    from rollbox.telemetry import read_archive

    archive = args.archive or str(rollbox_home() / "archive")
    run_file = rollbox_home() / "runs" / args.run_id / "events.jsonl"
    if args.archive is None and os.path.lexists(run_file):  # a directory there is an error to report, not "no run"
        # A run of 'rollbox run' keeps its events beside its results and is archived only where a service ran it.
        try:
            archived = read_archive(archive, run=args.run_id)
        except (OSError, ValueError, ImportError):
            archived = []
        return (archived, []) if archived else _read_jsonl(run_file, args.run_id)
    return read_archive(archive, run=args.run_id), []


def _read_jsonl(path: Path, run_id: str) -> tuple[list[Event], list[str]]:
    """The run's events of a JSONL file, and ``PATH:LINE: why`` for each line skipped as not an event: a run killed
    mid-write leaves its last line torn, and one such line must not cost the report of the rest.

    Raises:
        OSError: the file cannot be read.
    """
    events, skipped = [], []
    # Only a newline ends a line: a torn line may end inside a character, which decoding the whole file would refuse.
    for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            run = data.get("run") or data.get("run_id")
            if run is None or run == run_id:
                events.append(Event(str(data.pop("kind")), float(data.pop("at")), data))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            skipped.append(f"{path}:{number}: {type(exc).__name__}: {exc}")
    return events, skipped


def _report(args: argparse.Namespace) -> int:
    try:
        events, skipped = _events(args)
    except OSError as exc:
        where = exc.filename or args.events or args.archive or rollbox_home() / "archive"
        print(
            f"rollbox report: cannot read the events at {where} ({exc.strerror or exc}); give a run's events.jsonl "
            "with --events FILE, or its archive with --archive URL",
            file=sys.stderr,
        )
        return 2
    except ValueError as exc:
        print(f"rollbox report: cannot read the events: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"rollbox report needs the archive extra: pip install 'rollbox[archive]' ({exc})", file=sys.stderr)
        return 2
    if skipped:
        print(
            f"rollbox report: lines skipped as not events: {len(skipped)} (a run killed mid-write leaves its last "
            f"line torn); the first: {skipped[0]}",
            file=sys.stderr,
        )
    if not events:
        print(f"rollbox report: no events of run {args.run_id!r} were found", file=sys.stderr)
        return 1
    output = args.output or Path(f"{args.run_id}.html")
    try:
        output.write_text(render_report(args.run_id, events), encoding="utf-8")
    except OSError as exc:
        print(f"rollbox report: cannot write {output} ({exc.strerror or exc}): choose another -o FILE", file=sys.stderr)
        return 2
    print(f"wrote {output} ({len(events)} events)")
    return 0
