"""``rollbox run``: a batch of (task, sample) jobs through the durable scheduler, with a live progress line,
resumable by its run id."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import httpx

from rollbox import telemetry
from rollbox.curate import ValidateOptions
from rollbox.env import policy_from_name
from rollbox.scheduler import (
    API_KEY_VARIABLE,
    IdempotencyConflict,
    JobSpec,
    JobStore,
    QueueFull,
    Scheduler,
    SchedulerError,
    episode_payload,
    rollbox_home,
    run_dir,
    store_target,
    validate_payload,
)
from rollbox.scheduler._runs import ResultsFile
from rollbox.tasks import Task, TaskFormatError, load_tasks

from ._args import positive_seconds, run_name, whole
from ._run_summary import read_lines, summarize, write_episodes
from ._terminal import printable
from ._workers import add_processes_option, workers_for

_EPILOG = """\
TASKS are task directories (with a task.toml) or folders of them. Each (task, sample) is one durable job in
$ROLLBOX_HOME/jobs.db (default ~/.rollbox): an episode in which the policy acts in the task's sandbox through
the tools, then the judge grades the workspace it left in a fresh one. Episodes whose infrastructure failed are
retried with backoff; after the last attempt they complete as infra_error (reward null: mask them, never learn
from them). Whatever the agent did is a result, never retried; a policy that cannot act at all (a replay
without the task, a server refusing its requests) ends the job failed, with no reward.

Results: $ROLLBOX_HOME/runs/RUN_ID/results.jsonl, one line per (task, sample): task_id, sample, job_id, state,
status, reward, error, attempts, trajectory (its file, relative to the run's directory: trajectories/JOB.json,
read with rollbox.env.read_trajectories). Every job transition is in events.jsonl there too. When the run ends:
episodes.parquet there (one row per episode: run_id, sample, job_id, state, attempts, error, then the trajectory's
typed columns: task_id, status, reward, tests_passed, tests_total, num_turns, tokens, cpu_s, peak_memory_bytes,
runtime, and turns as a nested list; for pyarrow, DuckDB, pandas), a summary on stdout (mean reward, pass@k per
task, wrong answers apart from dead-policy jobs and infra errors), and every event archived as Parquet under
--archive (default $ROLLBOX_HOME/archive, as rollbox serve does; '' turns it off; needs the archive extra).

Resume: run the same command with --run-id RUN_ID (printed at the start): finished jobs are not run again, jobs
that were under way when the run stopped (Ctrl-C, a crash, kill -9) run again, and the results file is made
whole from the store.

policies: reference (the task's solution/ through the tools), noop (submit at once), replay:FILE (the actions of
the trajectory of each task recorded in FILE), openai:MODEL (a chat-completions server at --base-url; the key
from --api-key or $ROLLBOX_API_KEY, never written to the job store).

--validate: one validation job per task instead of episodes (what `rollbox validate` does, with its defaults and
its cache, durably and resumably, on a Ray cluster too), but without the reruns under CPU pressure: each job would
load the whole machine with busy loops of its own while the others run, so timing_dependent is left to
`rollbox validate`, which applies pressure once for all tasks. Each result line's status is the decision (admit,
weak, reject) and its reasons the reason codes; a rejected task counts as failed in the progress line. A
validation that rollbox or the host could not carry out (validation_error) is retried, then ends in infra_error.

A model server (openai:MODEL) that does not answer at --base-url stops the run before any job starts.

exit status: 0 when every job completed (whatever the model did), 1 when any job ended in infra_error, failed,
timed out or was cancelled, 2 for invalid arguments or tasks, or a model server that does not answer, 130 when
interrupted (resume with --run-id).

examples:
  rollbox run tasks/ --policy reference --samples 4
  rollbox run tasks/ --policy openai:qwen --base-url http://127.0.0.1:8000/v1 --samples 8 --workers 32
  rollbox run tasks/add tasks/sort --policy replay:runs.jsonl --run-id nightly
  rollbox run tasks/ --policy reference --ray auto          (every node of the Ray cluster this machine is in)
  rollbox run tasks/ --validate --run-id curation
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
    policies = "reference, noop, replay:FILE or openai:MODEL (default: reference)"
    p.add_argument("--policy", default="reference", metavar="P", help=policies)
    p.add_argument("--samples", type=whole(1, 1_000_000), default=1, metavar="K", help="samples per task (default 1)")
    p.add_argument("--validate", action="store_true", help="validate each task (one job per task) instead")
    p.add_argument("--workers", type=whole(1, 1024), default=None, metavar="N", help="jobs at once (default: the CPUs)")
    add_processes_option(p)
    p.add_argument(
        "--run-id", type=run_name, default=None, metavar="ID", help="name the run, or resume it (default: a new id)"
    )
    p.add_argument("--max-attempts", type=whole(1, 1000), default=3, metavar="N", help="attempts per job (default 3)")
    p.add_argument("--max-turns", type=whole(1, 1_000_000), metavar="N", help="override each task's turn budget")
    p.add_argument("--wall-time", type=positive_seconds, metavar="S", help="override each episode's wall-time budget")
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="openai: the server's API root")
    p.add_argument("--api-key", default=None, help="openai: a bearer token (default: $ROLLBOX_API_KEY)")
    p.add_argument(
        "--ray", default=None, metavar="ADDRESS", help="run on a Ray cluster (its address, or 'auto'; see docs)"
    )
    p.add_argument(
        "--db", metavar="URL", help="the job store: postgresql://... or a file (default $ROLLBOX_DB, else HOME/jobs.db)"
    )
    p.add_argument(
        "--archive",
        default=None,
        metavar="URL",
        help="fsspec URL of the event archive (default HOME/archive; '' turns it off)",
    )
    p.set_defaults(run=_main)


#: How long the model server has to answer before the run is refused (it answers in milliseconds when it is up).
_PROBE_S = 5.0
#: ``rollbox run --validate``'s checks: curate's defaults but the CPU-pressure phase (see the epilog).
_VALIDATION = ValidateOptions(pressure=False)


class _Usage(Exception):
    """Invalid arguments or tasks: exit 2 with the message."""


def _find_tasks(roots: list[Path]) -> list[Task]:
    try:
        return load_tasks(roots)
    except TaskFormatError as exc:
        raise _Usage(str(exc)) from None


def _specs(tasks: list[Task], args: argparse.Namespace, run_id: str) -> list[JobSpec]:
    if args.validate:
        return [
            JobSpec(
                kind="validate",
                payload={**validate_payload(task.path, _VALIDATION), "task_id": task.id, "sample": 0},
                key=f"{run_id}/{task.id}/validate",
                run_id=run_id,
                max_attempts=args.max_attempts,
            )
            for task in tasks
        ]
    try:
        policy_from_name(args.policy)  # a name it does not know, or a replay file that is not there
    except ValueError as exc:
        raise _Usage(str(exc)) from None
    if args.policy == "reference" and (missing := [t.id for t in tasks if t.solution is None]):
        raise _Usage(f"--policy reference needs solution/ in every task; missing in {', '.join(missing[:5])}")
    budget = {"max_turns": args.max_turns, "wall_s": args.wall_time}
    return [
        JobSpec(
            kind="episode",
            payload={
                **episode_payload(
                    task.path,
                    args.policy,
                    base_url=args.base_url,
                    budget={k: v for k, v in budget.items() if v is not None},
                ),
                "task_id": task.id,
                "sample": sample,
            },
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
        elif state != "completed" or status not in ("ok", "passed", "admit", "weak"):
            # The model's failures, rejected tasks, and jobs that ended without a result of their own.
            self.counts["failed"] += 1
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


def _probe(base_url: str) -> None:
    """Fail fast when the model server does not answer: any HTTP answer at all (even 401 or 404) means it is up."""
    try:
        httpx.get(base_url.rstrip("/") + "/models", timeout=_PROBE_S)
    except httpx.HTTPError as exc:
        raise _Usage(
            f"the model server at {base_url} does not answer ({type(exc).__name__}: {exc or 'no answer'}): start it, "
            "or point --base-url at it"
        ) from None


@contextlib.contextmanager
def _archive(args: argparse.Namespace) -> Iterator[None]:
    """Inside this block, events are also kept in the event archive (as ``rollbox serve`` keeps them), unless it
    is off; the archive is closed when the block ends, however it ends."""
    url = str(rollbox_home() / "archive") if args.archive is None else args.archive
    if not url:
        yield
        return
    try:
        archive = telemetry.Archive(url)
    except ImportError as exc:
        if args.archive is not None:
            raise _Usage(f"--archive needs the archive extra: pip install 'rollbox[archive]' ({exc})") from None
        print("rollbox run: events are not archived as Parquet: pip install 'rollbox[archive]'", file=sys.stderr)
        yield
        return
    try:
        with telemetry.recording(archive):
            yield
    finally:
        archive.close()


async def _go(args: argparse.Namespace, tasks: list[Task], run_id: str, progress: _Progress) -> Counter[str]:
    with _archive(args):
        return await _run(args, tasks, run_id, progress)


async def _run(args: argparse.Namespace, tasks: list[Task], run_id: str, progress: _Progress) -> Counter[str]:
    home = rollbox_home()
    store = JobStore(store_target(args.db, home))  # a store that cannot be used is said before anything else
    results = ResultsFile(store, run_id, home)
    print(printable(f"rollbox run: run {run_id}: {progress.total} jobs; results in {results.path}"), file=sys.stderr)
    try:
        async with Scheduler(store, workers=workers_for(args), runs=[run_id], home=home) as scheduler:
            specs = _specs(tasks, args, run_id)
            try:
                scheduler.submit(specs)
            except IdempotencyConflict as exc:
                raise _Usage(f"run {run_id} was started with other tasks or settings: {exc}") from None
            meta = {"tasks": [str(t.path) for t in tasks], "policy": args.policy, "samples": args.samples}
            if args.validate:
                meta = {"tasks": meta["tasks"], "validate": True}
            elif args.policy.startswith("openai:"):
                meta["base_url"] = args.base_url
            store.set_run_meta(run_id, meta)
            results.rewrite()
            for _, result in store.results(run_id=run_id):
                progress.add(result.state.value, result.status, fresh=False)
            with telemetry.bound(run=run_id):  # every event of the run's tasks, archived under its id
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


def _report(run_id: str, results: Path, *, validate: bool) -> None:
    """The summary on stdout, and episodes.parquet beside the results (where pyarrow is installed)."""
    lines = read_lines(results)
    sys.stdout.write(printable(summarize(lines).render()))
    if validate:
        return
    try:
        path = write_episodes(run_id, lines, results.parent)
    except ImportError:
        print("rollbox run: no episodes.parquet: pip install 'rollbox[parquet]'", file=sys.stderr)
        return
    print(printable(f"episodes: {path} (one row per episode; pyarrow, DuckDB)"))


def _main(args: argparse.Namespace) -> int:
    if min(args.samples, args.workers or 1, args.max_attempts, args.max_turns or 1) < 1 or (
        args.wall_time is not None and not args.wall_time > 0
    ):
        print(
            "rollbox run: --samples, --workers, --max-attempts and --max-turns must be at least 1, --wall-time "
            "positive",
            file=sys.stderr,
        )
        return 2
    if args.api_key:  # for the episodes run here; a Ray cluster's nodes get it with their actors
        os.environ[API_KEY_VARIABLE] = args.api_key
    if args.validate and args.samples != 1:
        print("rollbox run: --validate validates each task once: leave out --samples", file=sys.stderr)
        return 2
    run_id = args.run_id or f"run-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
    try:
        tasks = _find_tasks(args.tasks)
        if args.policy.startswith("openai:") and not args.validate:
            _probe(args.base_url)
        where = run_dir(run_id) / "results.jsonl"
        progress = _Progress(len(tasks) * args.samples, sys.stderr)
        try:
            counts = asyncio.run(_go(args, tasks, run_id, progress))
        except KeyboardInterrupt:
            progress.draw(final=True)
            print(printable(f"rollbox run: stopped; resume with --run-id {run_id}"), file=sys.stderr)
            raise
        progress.draw(final=True)
        _report(run_id, where, validate=args.validate)
    except _Usage as exc:
        print(printable(f"rollbox run: {exc}"), file=sys.stderr)
        return 2
    except QueueFull as exc:
        print(printable(f"rollbox run: {exc}"), file=sys.stderr)
        return 1
    except (SchedulerError, OSError) as exc:
        print(printable(f"rollbox run: {exc}"), file=sys.stderr)
        return 1
    return 1 if counts["infra"] or counts["ended"] else 0
