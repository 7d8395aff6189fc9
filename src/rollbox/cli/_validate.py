"""``rollbox validate``: check tasks before training sees them, and say why any is rejected."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import TextIO

from rollbox.curate import (
    ClockUnavailable,
    Decision,
    Progress,
    ReasonCode,
    TaskReport,
    ValidateOptions,
    ValidationCache,
    render_html,
    validate,
)
from rollbox.sandbox import IsolationUnavailable
from rollbox.tasks import Task, TaskFormatError, find_tasks, load_task

from ._args import share, whole
from ._terminal import printable

#: The exit status when validation itself failed, which a rejection must not be mistaken for.
_INTERNAL_ERROR = 3

_EPILOG = """\
Each task gets a decision, admit, weak (its tests let too many mutants of the reference survive) or reject, with
reasons: reference_fails, reference_reads_tests, flaky, order_dependent, hash_seed_dependent, date_dependent,
timing_dependent, tight_time_limit, trivial_passes, hack_passes, shortcut_passes, test_data_in_workspace,
f2p_passes_before, p2p_fails, weak_tests, contradictory_cases, answer_leak, duplicate, nondeterministic,
validation_error.

While every run of the reference passed, it runs again in the tests' own order, under the hash seeds 1 to 8 in
turn, up to --steady-runs (29) runs in all: a test that fails 1 run in 10 is then missed with probability
0.9**29 = 4.7%.
Two runs move the clock 3750 days ahead and back (libfaketime: apt-get install libfaketime; --no-clock skips them).
The wall and CPU limits must be at least 3 times the reference's worst CPU time.
--json prints {"tasks": [{"task_id", "decision", "reasons": [{"code", "detail"}], ...}]}.

Results are cached per task content under $ROLLBOX_HOME/validate (default ~/.rollbox): validating an unchanged
task again is instant.

exit status: 0 when no task is rejected, 1 when one is, 2 when a task or the arguments are invalid, 3 when
validation itself failed (a task's validation_error: rollbox or the host; validate again) or cannot run here, 130
when interrupted.

examples:
  rollbox validate tasks/                       every task directory under tasks/
  rollbox validate tasks/add --runs 5 --json
  rollbox validate tasks/ --report report.html --fix
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``validate`` subcommand."""
    p = commands.add_parser(
        "validate",
        help="check tasks: reference, flakiness, trivial and hack candidates, mutants, leaks",
        description="Validate tasks in sandboxes, in parallel: the reference passes in seeded orders and under CPU "
        "pressure, trivial solutions and hacks fail, mutants of the reference are killed, nothing leaks the answer.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("tasks", nargs="+", type=Path, metavar="TASKS", help="task directories, or directories of them")
    p.add_argument(
        "--runs", type=whole(1, 1000), default=3, metavar="N", help="reference runs, each in another test order"
    )
    p.add_argument(
        "--steady-runs",
        type=whole(0, 10_000),
        default=29,
        metavar="N",
        help="reference runs, all passing, before a task counts as steady (a test failing a share p of its runs is "
        "missed with probability (1-p)**N)",
    )
    p.add_argument("--json", action="store_true", help="print the reports as one JSON object")
    p.add_argument("--report", type=Path, metavar="FILE", help="write an HTML summary to FILE")
    p.add_argument(
        "--fix",
        action="store_true",
        help="write generated cases that kill surviving mutants, differential tests that a special-case patch fails, "
        "and limits that leave the reference its headroom",
    )
    p.add_argument("--workers", type=whole(1, 1024), metavar="N", help="gradings at once (default: the CPUs)")
    p.add_argument("--min-kill-ratio", type=share, default=0.6, metavar="R", help="below it a task is weak")
    p.add_argument(
        "--max-mutants",
        type=whole(0, 100_000),
        default=40,
        metavar="N",
        help="mutants graded per task at most: N branch removals and N of the other operators",
    )
    p.add_argument("--no-pressure", action="store_true", help="skip the reruns under CPU pressure")
    p.add_argument("--no-clock", action="store_true", help="skip the runs with the clock moved (needs no libfaketime)")
    p.add_argument("--no-cache", action="store_true", help="validate again even tasks validated before")
    p.set_defaults(run=_run)


class ProgressBar:
    """One line on a terminal: gradings done of planned, tasks done of all."""

    def __init__(self, stream: TextIO, label: str = "validate") -> None:
        self.stream, self.label, self.shown, self.last = stream, label, False, 0.0

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        finished = progress.tasks_done == progress.tasks
        if now - self.last < 0.1 and not finished:
            return
        self.last = now
        share = progress.done / progress.planned if progress.planned else 0.0
        width = 30
        bar = "#" * int(share * width) + "-" * (width - int(share * width))
        self.stream.write(
            f"\r{self.label} [{bar}] {progress.done}/{progress.planned} gradings, "
            f"{progress.tasks_done}/{progress.tasks} tasks"
        )
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _print(reports: list[TaskReport]) -> None:
    for report in reports:
        ratio = f", kill ratio {report.kill_ratio:.0%}" if report.kill_ratio is not None else ""
        cached = " (cached)" if report.cached else ""
        print(printable(f"{report.decision.value:6s} {report.task_id}{ratio}{cached}"))
        for reason in report.reasons:
            print(printable(f"         {reason.code.value}: {reason.detail}"))
        if report.fixed_file:
            print(printable(f"         fixed: wrote {report.fixed_file} ({report.generated_cases} generated cases)"))
        if report.widened_limits:
            print(printable(f"         fixed: [limits] {report.widened_limits}"))
    counts = {d: sum(r.decision is d for r in reports) for d in Decision}
    print(", ".join(f"{count} {decision.value}" for decision, count in counts.items()))


def _run(args: argparse.Namespace) -> int:
    try:
        options = ValidateOptions(
            runs=args.runs,
            steady_runs=args.steady_runs,
            min_kill_ratio=args.min_kill_ratio,
            max_mutants=args.max_mutants,
            pressure=not args.no_pressure,
            clock=not args.no_clock,
            fix=args.fix,
        )
    except ValueError as exc:
        print(printable(f"rollbox validate: {exc}"), file=sys.stderr)
        return 2
    try:
        tasks: list[Task] = [load_task(path) for path in find_tasks(args.tasks)]
    except TaskFormatError as exc:
        print(printable(f"rollbox validate: invalid task: {exc}"), file=sys.stderr)
        return 2
    bar = ProgressBar(sys.stderr) if sys.stderr.isatty() else None
    try:
        reports = asyncio.run(
            validate(
                tasks,
                options=options,
                workers=args.workers,
                cache=None if args.no_cache else ValidationCache(),
                on_progress=bar,
            )
        )
    except (IsolationUnavailable, ClockUnavailable) as exc:
        print(printable(f"rollbox validate: cannot validate here: {exc}"), file=sys.stderr)
        return _INTERNAL_ERROR
    finally:
        if bar is not None:
            bar.close()
    if args.report is not None:
        args.report.write_text(render_html(reports), encoding="utf-8")
    if args.json:
        print(json.dumps({"tasks": [report.to_json() for report in reports]}))
    else:
        _print(reports)
    if any(ReasonCode.VALIDATION_ERROR in report.codes() for report in reports):
        return _INTERNAL_ERROR  # not the task's verdict: validating it again may admit it
    return 1 if any(report.decision is Decision.REJECT for report in reports) else 0
