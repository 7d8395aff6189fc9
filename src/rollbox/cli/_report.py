"""``rollbox report RUN_ID``: a run's self-contained HTML report, from its events (its JSONL file or the archive)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rollbox.telemetry import Event, render_report, rollbox_home

from ._args import run_name
from ._terminal import printable

_HELP = """\
Write the HTML report of a run: reward over time, verdict and status mix, latency distributions, the slowest
and the failed work with their logs. One file, no scripts, nothing fetched: mail it, archive it.

The events come from the run's own file ($ROLLBOX_HOME/runs/RUN_ID/events.jsonl, written by 'rollbox run' and
'rollbox serve') or from the archive (default $ROLLBOX_HOME/archive, where both archive by default), whichever
holds more of the run's events: the file on a tie, since the archive is written every few seconds and misses the
last of a run that was killed. --archive URL reads the archive only, --archive '' the run's file only, --events
FILE that JSONL file. The line that says what was written names the source.

examples:
  rollbox report run-7                          a run of 'rollbox run'
  rollbox report serve-20250101-120000
  rollbox report run-7 --archive s3://bucket/rollbox -o run-7.html
  rollbox report run-7 --archive ''             the run's file only
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
    parser.add_argument("--archive", help="read the archive at this fsspec URL only ('': the run's file only)")
    parser.add_argument("--events", type=Path, help="read the events from this JSONL file instead")
    parser.add_argument("-o", "--output", type=Path, help="the HTML file (default RUN_ID.html)")
    parser.set_defaults(run=_report)


@dataclass(frozen=True)
class _Read:
    """A run's events, where they were read, and ``PATH:LINE: why`` for each line skipped there as not an event."""

    events: list[Event]
    source: str
    skipped: list[str] = field(default_factory=list)
    #: What was skipped, and why such a thing is there.
    skipped_what: str = "lines skipped as not events"
    skipped_why: str = "a run killed mid-write leaves its last line torn"


def _read_archive(url: str, run_id: str) -> _Read:
    """The run's events in the archive at ``url``; its files that are not an archive's are skipped, listed.

    Raises:
        OSError: the storage refused or failed (the message says what to check).
    """
    from rollbox.telemetry import read_archive

    skipped: list[str] = []
    events = read_archive(url, run=run_id, skipped=skipped)
    why = "damaged, or cut short by an older rollbox; move them aside"
    return _Read(events, url, skipped, "archive files skipped as not Parquet", why)


def _events(args: argparse.Namespace) -> _Read:
    if args.events is not None:
        return _read_jsonl(args.events, args.run_id)
    run_file = rollbox_home() / "runs" / args.run_id / "events.jsonl"
    if args.archive == "":
        return _read_jsonl(run_file, args.run_id)
    archive = args.archive or str(rollbox_home() / "archive")
    if args.archive is not None or not os.path.lexists(run_file):  # a directory there is an error to report
        return _read_archive(archive, args.run_id)
    from_file = _read_jsonl(run_file, args.run_id)
    # The archive is written every few seconds: a run killed outright has the last of its events in its file only.
    try:
        archived = _read_archive(archive, args.run_id)
    except (OSError, ValueError, ImportError):
        return from_file
    return archived if len(archived.events) > len(from_file.events) else from_file


def _read_jsonl(path: Path, run_id: str) -> _Read:
    """The run's events of a JSONL file, skipping the lines that are not events: a run killed mid-write leaves its
    last line torn, and one such line must not cost the report of the rest.

    Raises:
        OSError: the file cannot be read.
    """
    events: list[Event] = []
    skipped: list[str] = []
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
            skipped.append(f"{path}:{number}: not an event ({type(exc).__name__}: {exc})")
    return _Read(events, str(path), skipped)


def _report(args: argparse.Namespace) -> int:
    try:
        read = _events(args)
    except OSError as exc:
        where = exc.filename or args.events or args.archive or rollbox_home() / "archive"
        print(
            f"rollbox report: cannot read the events at {where} ({exc.strerror or exc}); give a run's events.jsonl "
            "with --events FILE, or its archive with --archive URL",
            file=sys.stderr,
        )
        return 2
    except ValueError as exc:
        print(printable(f"rollbox report: cannot read the events: {exc}"), file=sys.stderr)
        return 2
    except ImportError as exc:
        print(
            printable(f"rollbox report needs the archive extra: pip install 'rollbox[archive]' ({exc})"),
            file=sys.stderr,
        )
        return 2
    if not read.events:
        # One line: a file that holds no event at all is most likely not an events file.
        more = f" (and {len(read.skipped) - 1} more skipped)" if len(read.skipped) > 1 else ""
        why = f": {read.skipped[0]}{more}" if read.skipped else ""
        print(
            printable(f"rollbox report: no events of run {args.run_id!r} were found in {read.source}{why}"),
            file=sys.stderr,
        )
        return 1
    if read.skipped:
        print(
            f"rollbox report: {read.skipped_what}: {len(read.skipped)} ({read.skipped_why}); the first: "
            f"{read.skipped[0]}",
            file=sys.stderr,
        )
    output = args.output or Path(f"{args.run_id}.html")
    try:
        output.write_text(render_report(args.run_id, read.events), encoding="utf-8")
    except OSError as exc:
        print(
            printable(f"rollbox report: cannot write {output} ({exc.strerror or exc}): choose another -o FILE"),
            file=sys.stderr,
        )
        return 2
    print(printable(f"wrote {output} ({len(read.events)} events, from {read.source})"))
    return 0
