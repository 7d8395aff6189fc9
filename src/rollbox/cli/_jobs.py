"""``rollbox jobs`` and ``rollbox runs``: what the durable job store holds."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rollbox.scheduler import JobNotFound, JobState, JobStore, StoreError, store_target

from ._args import whole
from ._terminal import printable

_JOBS_EPILOG = """\
The store is --db, else $ROLLBOX_DB, else $ROLLBOX_HOME/jobs.db (default ~/.rollbox/jobs.db). States: pending,
scheduled, running, grading, completed, failed, timed_out, cancelled. A completed job's status is its result's:
the model's success or failure, or infra_error when rollbox or the host failed on every attempt.

examples:
  rollbox jobs --run nightly --state completed
  rollbox jobs show 42            every transition (with its time) and every attempt of job 42, and its result
  rollbox runs                    every run with its jobs counted by state
"""

_DB = "the job store: postgresql://... or a file (default $ROLLBOX_DB, else $ROLLBOX_HOME/jobs.db)"


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``jobs`` and ``runs`` subcommands."""
    p = commands.add_parser(
        "jobs",
        help="list the scheduler's jobs, or show one",
        description="List the jobs of the durable store, newest last; 'jobs show JOB' shows one in full.",
        epilog=_JOBS_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--run", dest="run_id", default=None, metavar="ID", help="only this run's jobs")
    p.add_argument("--state", default=None, choices=[s.value for s in JobState], help="only jobs in this state")
    p.add_argument("--limit", type=whole(1, 10**9), default=None, metavar="N", help="at most N jobs (the first by id)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.add_argument("--db", metavar="URL", help=_DB)
    actions = p.add_subparsers(dest="action", metavar="show")
    show = actions.add_parser("show", help="one job: its transitions, attempts and result")
    show.add_argument("job", type=whole(1, 2**63 - 1), metavar="JOB")
    show.add_argument("--json", action="store_true", help="one JSON object")
    show.add_argument("--db", metavar="URL", default=argparse.SUPPRESS, help=_DB)  # given before 'show' is kept
    p.set_defaults(run=_reading("jobs", _jobs))
    r = commands.add_parser(
        "runs",
        help="list runs with their jobs counted by state",
        description="List every run in the durable store with its jobs counted by state.",
    )
    r.add_argument("--json", action="store_true", help="one JSON object per line")
    r.add_argument("--db", metavar="URL", help=_DB)
    r.set_defaults(run=_reading("runs", _runs))


def _reading(command: str, read: Callable[[JobStore, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``read`` on the job store, with one line for a store that is not there or cannot be read."""

    def run(args: argparse.Namespace) -> int:
        target = store_target(args.db)
        if not isinstance(target, str) and _absent(target):
            print(
                f"rollbox {command}: no job store at {target} yet: 'rollbox run' makes it (set ROLLBOX_HOME, or "
                "ROLLBOX_DB or --db, to look elsewhere)",
                file=sys.stderr,
            )
            return 1
        try:
            store = JobStore(target)
            try:
                return read(store, args)
            finally:
                store.close()
        except StoreError as exc:
            print(f"rollbox {command}: {exc}", file=sys.stderr)
            return 1

    return run


def _absent(path: Path) -> bool:
    """Nothing is at ``path``, or a symbolic link to nothing: no store yet. Whatever else is there (a directory, a
    named pipe, a link loop) is handed to the store, which says what is wrong with it and leaves it as it is."""
    try:
        path.stat()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _when(at: float | None) -> str:
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) + f".{int(at % 1 * 1000):03d}"


def _jobs(store: JobStore, args: argparse.Namespace) -> int:
    if args.action == "show":
        return _show(store, args.job, args.json)
    state = JobState(args.state) if args.state else None
    jobs = store.jobs(run_id=args.run_id, state=state, limit=args.limit)
    if not args.json:
        print(f"{'JOB':>6}  {'RUN':<24} {'KIND':<8} {'STATE':<10} {'TRIES':>5}  {'STATUS':<14} {'REWARD':>6}  KEY")
    for job in jobs:
        result = store.result(job.id)
        if args.json:
            print(json.dumps({**job.to_json(), "result": result and result.to_json()}))
            continue
        status = (result.status or "-") if result else "-"
        reward = "-" if result is None or result.reward is None else f"{result.reward:g}"
        print(
            printable(
                f"{job.id:>6}  {job.run_id:<24.24} {job.kind:<8} {job.state.value:<10} {job.attempts:>5}  "
                f"{status:<14} {reward:>6}  {job.key or '-'}"
            )
        )
    return 0


def _show(store: JobStore, job_id: int, as_json: bool) -> int:
    try:
        job = store.job(job_id)
    except JobNotFound as exc:
        print(f"rollbox jobs: {exc}", file=sys.stderr)
        return 1
    moves, attempts, result = store.transitions(job_id), store.attempts(job_id), store.result(job_id)
    if as_json:
        print(
            json.dumps(
                {
                    **job.to_json(),
                    "transitions": [
                        {
                            "attempt": m.attempt,
                            "from": m.source and m.source.value,
                            "to": m.target.value,
                            "at": m.at,
                            "reason": m.reason,
                        }
                        for m in moves
                    ],
                    "attempts": [a.__dict__ for a in attempts],
                    "result": result and result.to_json(),
                }
            )
        )
        return 0
    # What the store holds came from submitters and from the work (keys, reasons, errors): printed, never acted on.
    lines = [
        f"job {job.id}  kind {job.kind}  run {job.run_id}  key {job.key or '-'}  tenant {job.tenant}",
        f"state {job.state.value}  attempts {job.attempts}/{job.max_attempts}  priority {job.priority}",
        f"payload {json.dumps(job.payload)[:300]}",
        "transitions:",
    ]
    for m in moves:
        why = f"  ({m.reason})" if m.reason else ""
        lines.append(
            f"  {_when(m.at)}  #{m.attempt}  {m.source.value if m.source else '-':>9} -> {m.target.value}{why}"
        )
    lines.append("attempts:")
    for a in attempts:
        error = f"  {a.error}" if a.error else ""
        span = f"{_when(a.started_at)} .. {_when(a.ended_at)}"
        lines.append(f"  #{a.number}  {span}  {a.outcome or 'under way'}  on {a.worker}{error}")
    if result is not None:
        lines.append(
            f"result: {result.state.value}  status {result.status}  reward {result.reward}  error {result.error}"
        )
    print(printable("\n".join(lines)))
    return 0


def _runs(store: JobStore, args: argparse.Namespace) -> int:
    for run_id, created, meta, counts in store.runs():
        if args.json:
            print(json.dumps({"run_id": run_id, "created_at": created, "meta": meta, "counts": counts}))
        else:
            total = sum(counts.values())
            states = "  ".join(f"{state} {n}" for state, n in sorted(counts.items()))
            print(printable(f"{run_id:<32} {_when(created)}  {total} jobs  {states}"))
    return 0
