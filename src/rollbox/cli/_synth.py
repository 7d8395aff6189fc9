"""``rollbox tasks synth``: bug-fix tasks from real Python packages."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from rollbox.curate import ClockUnavailable, SynthOptions, synthesize
from rollbox.sandbox import IsolationUnavailable

from ._args import whole
from ._terminal import printable
from ._validate import ProgressBar

_EPILOG = """\
Each package's source distribution is fetched from the package index (it ships the package's tests), its tests
run in sandboxes, and bugs are injected with AST operators; a bug is kept when some tests fail because of it, the
others pass, and again on a second run. A bug whose failing tests are fewer than --min-evidence and give its
module fewer distinct inputs is set aside (a patch answering those inputs from a table would pass it); each other
bug becomes a pytest task in DEST, broadest first (the package with the bug as the workspace, its tests hidden,
the original module as the reference, an instruction describing the failures); every task is validated and only
admitted ones stay: a task that duplicates another (the same bug written another way) is removed, and so is one a
special-case patch passes (the failing tests' inputs answered from a table, the bug left in place) unless
differential tests (the fix against the bug on nearby inputs, hidden) make it fail.
DEST/synth-report.json holds the yield per package and per operator, what was removed and why, and the time.

Each package gets a runtime layer of its own (its declared requirements, test extras included, and pytest; wheels
only), and its tasks carry it as [environment] with every package pinned, so the judge builds and uses that layer
when grading them. A package whose layer cannot be built is reported and skipped.

exit status: 0 when at least one task was made, 1 when none was, 2 on a usage error, 130 when interrupted.

examples:
  rollbox tasks synth inflection iniconfig isodate tasks/synth
  rollbox tasks synth isodate==0.7.2 tasks/synth --max-mutants 100 --json
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``synth`` verb to ``commands`` (the ``tasks`` group's verbs)."""
    p = commands.add_parser(
        "synth",
        usage="rollbox tasks synth [-h] [--max-mutants N] [--min-evidence N] [--workers N] [--no-validate] "
        "[--json] PACKAGE... DEST",
        help="make bug-fix tasks from real Python packages",
        description="Make native pytest bug-fix tasks from PACKAGES (name or name==version) into DEST.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("packages", nargs="+", metavar="PACKAGE", help="package names, then the destination directory")
    p.add_argument(
        "--max-mutants", type=whole(1, 100_000), default=200, metavar="N", help="mutants graded per package at most"
    )
    p.add_argument(
        "--min-evidence",
        type=whole(1, 100_000),
        default=SynthOptions.min_evidence,
        metavar="N",
        help="set aside a bug whose failing tests are fewer than N and give its module fewer distinct inputs: a "
        f"special-case patch would pass it (default {SynthOptions.min_evidence})",
    )
    p.add_argument("--workers", type=whole(1, 1024), metavar="N", help="gradings at once (default: the CPUs)")
    p.add_argument("--no-validate", action="store_true", help="keep every bug found, without validating the tasks")
    p.add_argument("--json", action="store_true", help="print the yield as JSON")
    p.set_defaults(run=_run)


def _run(args: argparse.Namespace) -> int:
    if len(args.packages) < 2:
        print("rollbox tasks synth: give at least one PACKAGE and then DEST", file=sys.stderr)
        return 2
    *packages, dest = args.packages
    options = SynthOptions(max_mutants=args.max_mutants, min_evidence=args.min_evidence, validate=not args.no_validate)
    bar = ProgressBar(sys.stderr, "synth") if sys.stderr.isatty() else None
    try:
        report = asyncio.run(synthesize(packages, Path(dest), options=options, workers=args.workers, on_progress=bar))
    except (IsolationUnavailable, ClockUnavailable) as exc:
        print(printable(f"rollbox tasks synth: cannot run packages' tests here: {exc}"), file=sys.stderr)
        return 1
    finally:
        if bar is not None:
            bar.close()
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(printable(report.markdown()), end="")
        for package in report.packages:
            if package.error:
                print(printable(f"{package.name}: {package.error}"), file=sys.stderr)
        print(printable(f"{len(report.tasks)} tasks in {dest}"))
    return 0 if report.tasks else 1
