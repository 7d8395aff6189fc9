"""``rollbox run``: a batch of (task, sample) jobs through the durable scheduler, with a live progress line,
resumable by its run id."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import secrets
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from rollbox.scheduler import (
    IdempotencyConflict,
    JobSpec,
    JobStore,
    LocalWorker,
    QueueFull,
    Scheduler,
    SchedulerError,
    Worker,
    machine_capacity,
    rollbox_home,
    run_dir,
    store_path,
)
from rollbox.scheduler._runs import ResultsFile
from rollbox.tasks import Task, TaskFormatError, load_task

_EPILOG = """\
TASKS are task directories (with a task.toml) or folders of them. Each (task, sample) is one durable job in
$ROLLBOX_HOME/jobs.db (default ~/.rollbox): the policy acts in the task's environment, then the judge grades
what it left. Jobs whose infrastructure failed are retried with backoff; after the last attempt they complete
as infra_error (reward null: mask them, never learn from them).

Results: $ROLLBOX_HOME/runs/RUN_ID/results.jsonl, one line per (task, sample): task_id, sample, job_id, state,
status, reward, error, attempts, trajectory (a file beside it, under trajectories/). Every job transition is in
events.jsonl there too.

Resume: run the same command with --run-id RUN_ID (printed at the start): finished jobs are not run again, jobs
that were under way when the run stopped (Ctrl-C, a crash, kill -9) run again, and the results file is made
whole from the store.

policies: reference (the task's own solution/, graded). Episodes with other policies (noop, replay:FILE, a
model) come with rollbox.env.

exit status: 0 when every job completed (whatever the model did), 1 when any job ended in infra_error, failed,
timed out or was cancelled, 2 for invalid arguments or tasks, 130 when interrupted (resume with --run-id).

examples:
  rollbox run tasks/ --policy reference --samples 4
  rollbox run tasks/add tasks/sort --policy reference --run-id nightly --workers 8
  rollbox run tasks/ --policy reference --ray auto          (every node of the Ray cluster this machine is in)
  rollbox jobs --run nightly --state failed
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``run`` subcommand."""
    p = commands.add_parser(
        "run",
        help="run (task, sample) jobs through the durable scheduler, resumable",
        description="Run every (task, sample) as a durable job: scheduled, retried on infrastructure failures, "
        "recorded exactly once, with a live progress line.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("tasks", nargs="+", type=Path, metavar="TASKS", help="task directories, or folders of them")
    p.add_argument("--policy", default="reference", metavar="P", help="who acts in each episode (default reference)")
    p.add_argument("--samples", type=int, default=1, metavar="K", help="samples per task (default 1)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="jobs at once (default: the CPUs)")
    p.add_argument("--run-id", default=None, metavar="ID", help="name the run, or resume it (default: a new id)")
    p.add_argument("--max-attempts", type=int, default=3, metavar="N", help="attempts per job (default 3)")
    p.add_argument(
        "--ray", default=None, metavar="ADDRESS", help="run on a Ray cluster (its address, or 'auto'; see docs)"
    )
    p.set_defaults(run=_main)


class _Usage(Exception):
    """Invalid arguments or tasks: exit 2 with the message."""


def _find_tasks(roots: list[Path]) -> list[Task]:
    found: dict[str, Task] = {}
    for root in roots:
        if not root.is_dir():
            raise _Usage(f"{root} is not a directory: give task directories, or folders of them")
        paths = [root] if (root / "task.toml").exists() else sorted(p.parent for p in root.glob("*/task.toml"))
        if not paths:
            raise _Usage(f"{root} holds no task: neither {root}/task.toml nor {root}/*/task.toml exists")
        for path in paths:
            try:
                task = load_task(path)
            except TaskFormatError as exc:
                raise _Usage(str(exc)) from None
            if task.id in found and found[task.id].path != task.path:
                raise _Usage(f"two tasks have the id {task.id!r}: {found[task.id].path} and {task.path}")
            found[task.id] = task
    return sorted(found.values(), key=lambda t: t.id)


def _specs(tasks: list[Task], args: argparse.Namespace, run_id: str) -> list[JobSpec]:
    if args.policy != "reference":
        raise _Usage(
            f"policy {args.policy!r} needs episodes (rollbox.env), which this build does not have; "
            "'--policy reference' grades each task's own solution/"
        )
    missing = [t.id for t in tasks if t.solution is None]
    if missing:
        raise _Usage(f"--policy reference needs solution/ in every task; missing in {', '.join(missing[:5])}")
    return [
        JobSpec(
            kind="grade",
            payload={"task": str(task.path), "task_id": task.id, "sample": sample, "reference": True},
            key=f"{run_id}/{task.id}/{sample}",
            run_id=run_id,
            max_attempts=args.max_attempts,
        )
        for task in tasks
        for sample in range(args.samples)
    ]


class _Progress:
    """done / failed / infra, rate and ETA on one line of stderr (redrawn in place on a terminal, at the end
    elsewhere)."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream, self.tty = total, stream, stream.isatty()
        self.counts: Counter[str] = Counter()
        self.start, self.fresh = time.monotonic(), 0

    def add(self, state: str, status: str | None, *, fresh: bool) -> None:
        if status == "infra_error":
            self.counts["infra"] += 1
        elif state != "completed" or status not in ("ok", "passed"):
            self.counts["failed"] += 1  # the model's failures, and jobs that ended without a result of their own
            self.counts["ended"] += state != "completed"
        self.counts["done"] += 1
        self.fresh += fresh

    def line(self) -> str:
        done, elapsed = self.counts["done"], time.monotonic() - self.start
        rate = self.fresh / elapsed if elapsed > 0 else 0.0
        eta = f"{(self.total - done) / rate:.0f} s" if rate > 0 else "?"
        bar = "#" * (30 * done // max(self.total, 1))
        return (
            f"[{bar:<30}] {done}/{self.total}  failed {self.counts['failed']}  infra {self.counts['infra']}  "
            f"{rate:.1f}/s  ETA {eta}"
        )

    def draw(self, final: bool = False) -> None:
        if self.tty or final:
            self.stream.write(("\r" if self.tty else "") + self.line() + ("\n" if final else ""))
            self.stream.flush()


def _workers(args: argparse.Namespace) -> list[Worker]:
    if args.ray is not None:
        from rollbox.scheduler._ray import ray_workers

        return list(ray_workers(args.ray))
    cpus = args.workers if args.workers is not None else None
    return [LocalWorker(capacity=machine_capacity(cpus=cpus))]


async def _go(args: argparse.Namespace, tasks: list[Task], run_id: str, progress: _Progress) -> Counter[str]:
    home = rollbox_home()
    store = JobStore(store_path(home))
    results = ResultsFile(store, run_id, home)
    try:
        async with Scheduler(store, workers=_workers(args), runs=[run_id], home=home) as scheduler:
            specs = _specs(tasks, args, run_id)
            try:
                scheduler.submit(specs)
            except IdempotencyConflict as exc:
                raise _Usage(f"run {run_id} was started with other tasks or settings: {exc}") from None
            meta = {"tasks": [str(t.path) for t in tasks], "policy": args.policy, "samples": args.samples}
            store.set_run_meta(run_id, meta)
            results.rewrite()
            for _, result in store.results(run_id=run_id):
                progress.add(result.state.value, result.status, fresh=False)
            running = asyncio.create_task(scheduler.run())
            while not running.done():
                await asyncio.wait([running], timeout=0.2)
                for _, result in results.follow():
                    progress.add(result.state.value, result.status, fresh=True)
                progress.draw()
            await running
    finally:
        with contextlib.suppress(Exception):
            results.rewrite()
        results.close()
        store.close()
    return progress.counts


def _main(args: argparse.Namespace) -> int:
    if args.samples < 1 or (args.workers is not None and args.workers < 1) or args.max_attempts < 1:
        print("rollbox run: --samples, --workers and --max-attempts must be at least 1", file=sys.stderr)
        return 2
    run_id = args.run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    try:
        tasks = _find_tasks(args.tasks)
        total = len(tasks) * args.samples
        where = run_dir(run_id) / "results.jsonl"
        print(f"rollbox run: run {run_id}: {total} jobs; results in {where}", file=sys.stderr)
        progress = _Progress(total, sys.stderr)
        try:
            counts = asyncio.run(_go(args, tasks, run_id, progress))
        except KeyboardInterrupt:
            progress.draw(final=True)
            print(f"rollbox run: stopped; resume with --run-id {run_id}", file=sys.stderr)
            raise
        progress.draw(final=True)
    except _Usage as exc:
        print(f"rollbox run: {exc}", file=sys.stderr)
        return 2
    except QueueFull as exc:
        print(f"rollbox run: {exc}", file=sys.stderr)
        return 1
    except (SchedulerError, OSError) as exc:
        print(f"rollbox run: {exc}", file=sys.stderr)
        return 1
    return 1 if counts["infra"] or counts["ended"] else 0
