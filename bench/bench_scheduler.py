#!/usr/bin/env python3
"""The scheduler's targets, side by side in one run:

    python scripts/guard.py --memory 8G --pids 8192 -- python bench/bench_scheduler.py [--repeats 5] [--json PATH]

- dispatch: no-op jobs through the durable store (submitted in batches, leased, completed; every step committed
  durably before it counts), on SQLite [>= 2,000 jobs/s] and on PostgreSQL [>= 2,000 jobs/s] in turn, beside the
  floor of the design: the same rows written to the same SQLite schema in transactions of the same sizes by a bare
  loop (no scheduler, no Python objects per job). PostgreSQL is a server this benchmark starts (Debian's, as the
  tests do) on 127.0.0.1, or the database ``--postgres URL`` names (a schema of its own each round);
- end to end at saturation, for three kinds of program: ``true``, a warm-Python program (``python3 main.py`` forked
  from the sandbox's warm interpreter) and a ~20 ms ``python3 -c`` program: the same programs through ``run_batch``
  (raw, no scheduler, in this process) and through the scheduler (``exec`` jobs) two ways: its jobs run in its own
  process (``in_process``: one ``LocalWorker``), or in worker processes of its own, one a CPU (``processes``:
  ``process_workers``); which side goes first turns with the rounds; each way's rate as a ratio to the raw
  batch's [>= 0.9 for each kind], this process's CPU per program each way (the event loop's thread, and the
  store's in the scheduler: what the scheduler adds to each program's Python; the worker processes' own not
  counted), the share of the machine's CPU time left idle each way (``/proc/stat``: whether either side was held
  by the machine's cores or by something serial), and the queue wait (submission to start) p50/p99;
- crash recovery: a store of 10,000 jobs, a hundred of them leased by a scheduler whose process is gone; the time
  from opening a new scheduler to its first resumed job starting [< 1 s].

With ``--loop-cost``, only this instead: what the event loop's time costs a raw batch of ``true``: ``run_batch``'s
own loop (the same warm pool, ``as_finished``) with 0, 50, 100 and 200 us of busy CPU added on the event loop's
thread to each program, in rotating order; each rate's ratio to the first. The scheduler's ratio is read against it:
the event loop's thread is what a batch of ``true`` waits for.

Medians over ``--repeats`` rounds, with the spread (min..max), and the machine's load average in each round (the
figures of a loaded machine are lower: compare the ratios, measured side by side). Every dispatch round runs first,
then every end-to-end round, once the PostgreSQL server has stopped. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from rollbox import telemetry
from rollbox.sandbox import ExecResult, Limits, Program, SandboxConfig, WarmSandboxes, run_batch
from rollbox.sandbox.pool._batch import as_finished
from rollbox.scheduler import (
    Capacity,
    JobContext,
    JobSpec,
    JobState,
    JobStore,
    LocalWorker,
    Outcome,
    Requirements,
    Scheduler,
    Worker,
    exec_payload,
    process_workers,
    register_kind,
)

TARGETS = {"dispatch_per_s": 2000.0, "end_to_end_ratio": 0.90, "recovery_s": 1.0}
LIMITS = Limits(timeout_s=10, memory_bytes=128 * 2**20)
#: The programs of the end-to-end comparison, by kind, and how many of each a round runs: about 2.5 s of
#: ``run_batch`` on this 2-core machine each, so that the rate is the steady one, not that of a batch's first and
#: last milliseconds (``--programs`` sets one count for every kind).
PROGRAMS = {"true": 1600, "warm_python": 800, "python": 320}
KINDS = tuple(PROGRAMS)
#: How the scheduler's side runs its jobs: in its own process, or in worker processes of its own (a CPU each).
WAYS = ("in_process", "processes")
_schemas = itertools.count()


class Noop:
    """A kind that does nothing: what is left is the scheduler's and the store's own work."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        return Requirements(cpus=0.001)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        return Outcome(status="ok")


noop = Noop()
register_kind("noop", f"{__name__}:noop")


def _spread(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def dispatch(jobs: int, store: str | None = None) -> float:
    """No-op jobs per second: submit (batches of 500), lease, complete; in a new SQLite file, or ``store``."""
    with tempfile.TemporaryDirectory() as home:
        worker = LocalWorker(capacity=Capacity(cpus=1000, memory_bytes=2**30, max_jobs=512))
        target = store or Path(home) / "jobs.db"
        async with Scheduler(JobStore(target), workers=[worker], home=Path(home)) as scheduler:
            start = time.perf_counter()
            specs = [JobSpec(kind="noop", payload={"i": i}) for i in range(jobs)]
            for first in range(0, jobs, 500):
                scheduler.submit(specs[first : first + 500])
            await scheduler.run()
            rate = jobs / (time.perf_counter() - start)
        scheduler.store.close()
        return rate


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[str]:
    """A PostgreSQL database to measure on: ``url``, or a server started here as the tests start theirs."""
    if url is not None:
        yield url
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from postgres_server import PostgresServer, binaries

    found = binaries()
    if found is None:
        raise SystemExit("no PostgreSQL server here: apt-get install postgresql-15, or give --postgres URL")
    server = PostgresServer(found)
    try:
        yield server.url
    finally:
        server.stop()


@contextlib.contextmanager
def fresh_schema(url: str) -> Iterator[str]:
    """A new schema of the database at ``url``, dropped afterwards; the URL whose connections use it."""
    import psycopg

    name = f"bench_{os.getpid()}_{next(_schemas)}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f"CREATE SCHEMA {name}")
    joiner = "&" if "?" in url else "?"
    try:
        yield f"{url}{joiner}options=-csearch_path%3D{name}"
    finally:
        with psycopg.connect(url, autocommit=True) as connection:
            connection.execute(f"DROP SCHEMA {name} CASCADE")


def bare_sqlite(jobs: int, batch: int = 256) -> float:
    """The floor of the dispatch design on this machine: what the store writes for each no-op job (the job, its
    four transitions, its attempt, its result) as bare ``executemany`` loops over the same schema, WAL and
    ``synchronous=FULL``: submitted in transactions of 500, leased and completed in transactions of ``batch``."""
    with tempfile.TemporaryDirectory() as home:
        path = Path(home) / "jobs.db"
        JobStore(path).close()  # the schema
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        move = "INSERT INTO transitions (job_id, attempt, source, target, at, reason) VALUES (?, ?, ?, ?, ?, NULL)"
        needs = json.dumps({"cpus": 0.001, "memory_bytes": 0, "resources": {}})
        start = time.perf_counter()
        for first in range(1, jobs + 1, 500):
            now, ids = time.time(), range(first, min(first + 500, jobs + 1))
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO jobs (id, run_id, kind, payload, digest, state, priority, tenant, requirements, pool, "
                "max_attempts, submitted_at, updated_at) VALUES (?, 'default', 'noop', ?, '', 'pending', 0, "
                "'default', ?, '', 3, ?, ?)",
                [(i, json.dumps({"i": i}), needs, now, now) for i in ids],
            )
            db.executemany(move, [(i, 0, None, "pending", now) for i in ids])
            db.execute("COMMIT")
        while True:
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            rows = db.execute(
                "SELECT id FROM jobs WHERE state = 'pending' ORDER BY priority DESC, id LIMIT ?", (batch,)
            ).fetchall()
            if not rows:
                db.execute("COMMIT")
                break
            ids = [i for (i,) in rows]
            db.executemany(
                "UPDATE jobs SET state = 'scheduled', lease_owner = 'o', attempts = 1, updated_at = ? WHERE id = ?",
                [(now, i) for i in ids],
            )
            db.executemany(
                "INSERT INTO attempts (job_id, number, owner, worker, started_at) VALUES (?, 1, 'o', 'w', ?)",
                [(i, now) for i in ids],
            )
            db.executemany(move, [(i, 1, "pending", "scheduled", now) for i in ids])
            db.execute("COMMIT")
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "UPDATE jobs SET state = 'completed', lease_owner = NULL, updated_at = ? WHERE id = ?",
                [(now, i) for i in ids],
            )
            db.executemany(
                "UPDATE attempts SET ended_at = ?, outcome = 'ok' WHERE job_id = ? AND number = 1",
                [(now, i) for i in ids],
            )
            db.executemany(
                "INSERT INTO results (job_id, state, status, output, at) VALUES (?, 'completed', 'ok', '{}', ?)",
                [(i, now) for i in ids],
            )
            ends = (("scheduled", "running"), ("running", "completed"))
            db.executemany(move, [(i, 1, source, target, now) for i in ids for source, target in ends])
            db.execute("COMMIT")
        took = time.perf_counter() - start
        db.close()
        return jobs / took


class _Idle:
    """The share of the machine's CPU time (every core, ``/proc/stat``) left idle from its making to :meth:`share`."""

    def __init__(self) -> None:
        self._start = self._times()

    @staticmethod
    def _times() -> tuple[int, int]:
        values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(values), values[3] + values[4]  # idle and waiting for I/O

    def share(self) -> float:
        total, idle = self._times()
        return (idle - self._start[1]) / max(1, total - self._start[0])


def _programs(kind: str, count: int) -> list[Program]:
    """``count`` programs of one kind: ``true``; a warm-Python script (forked from the sandbox's interpreter); a
    ``python3 -c`` program (an interpreter's start, about 20 ms)."""
    if kind == "true":
        return [Program(argv=["true"]) for _ in range(count)]
    if kind == "warm_python":
        return [
            Program(argv=["python3", "main.py"], files={"main.py": f"print(sum(range({i} * 100)))\n"}, warm_python=True)
            for i in range(count)
        ]
    return [Program(argv=["python3", "-c", f"print(sum(range({i} * 100)))"]) for i in range(count)]


async def raw(kind: str, count: int, workers: int) -> tuple[float, float, float]:
    """The programs through ``run_batch`` in warm sandboxes (as many as the scheduler's pools hold); their rate,
    this process's CPU milliseconds per program (its sandboxes' processes not counted), and the machine's idle
    share meanwhile."""
    programs = _programs(kind, count)
    async with WarmSandboxes(size=2 * workers, warm_python=kind == "warm_python") as sandboxes:
        start, cpu, idle = time.perf_counter(), time.process_time(), _Idle()
        async for _ in run_batch(programs, limits=LIMITS, workers=workers, sandboxes=sandboxes):
            pass
        return count / (time.perf_counter() - start), (time.process_time() - cpu) / count * 1e3, idle.share()


LOOP_COSTS_US = (0, 50, 100, 200)


async def raw_with_loop_cost(count: int, workers: int, cost_us: float) -> float:
    """``true`` as ``run_batch`` runs it (its warm pool, ``as_finished``), each program first spending ``cost_us`` of
    the event loop's CPU; the rate."""
    config = SandboxConfig(limits=LIMITS)
    async with WarmSandboxes(size=2 * workers, warm_python=False) as sandboxes:

        async def one() -> ExecResult:
            busy_until = time.perf_counter() + cost_us / 1e6
            while time.perf_counter() < busy_until:
                pass
            async with sandboxes.sandbox(config) as sb:
                return await sb.exec(["true"])

        start = time.perf_counter()
        async for _ in as_finished([one] * count, workers=workers):
            pass
        return count / (time.perf_counter() - start)


async def loop_cost(rounds: int, count: int, workers: int) -> dict[str, Any]:
    """The rate of ``true`` at each of :data:`LOOP_COSTS_US`, as a ratio to the rate with none added."""
    rates: dict[float, list[float]] = {cost: [] for cost in LOOP_COSTS_US}
    for round_ in range(rounds):
        order = LOOP_COSTS_US[round_ % len(LOOP_COSTS_US) :] + LOOP_COSTS_US[: round_ % len(LOOP_COSTS_US)]
        for cost in order:
            rates[cost].append(await raw_with_loop_cost(count, workers, cost))
        print(
            f"loop-cost round {round_ + 1}: "
            + ", ".join(f"+{cost:g} us {rates[cost][-1]:.0f}/s" for cost in LOOP_COSTS_US),
            file=sys.stderr,
        )
    return {
        "raw_per_s": {f"{cost:g}us": _spread(samples) for cost, samples in rates.items()},
        "ratio_to_none": {
            f"{cost:g}us": _spread([r / b for r, b in zip(samples, rates[0], strict=True)])
            for cost, samples in rates.items()
        },
        "setup": {"workers": workers, "programs": count, "rounds": rounds},
    }


async def scheduled(kind: str, count: int, workers: int, way: str) -> tuple[float, list[float], float, float]:
    """The same programs as ``exec`` jobs through the scheduler, once its pools are as warm as ``run_batch``'s (a
    first batch of ``4 * workers`` jobs, not timed), its jobs run in this process (``way`` ``in_process``: one
    :class:`LocalWorker`) or in ``workers`` worker processes (``processes``: :func:`process_workers`, a CPU each);
    their rate, queue waits, this process's CPU milliseconds per program (the event loop's and the store's
    threads), and the machine's idle share meanwhile."""
    with tempfile.TemporaryDirectory() as home:
        budget = Capacity(cpus=workers, memory_bytes=8 * 2**30)
        places: list[Worker] = (
            [LocalWorker(capacity=budget)] if way == "in_process" else list(process_workers(workers, budget))
        )
        store = JobStore(Path(home) / "jobs.db")
        async with Scheduler(store, workers=places, home=Path(home)) as scheduler:
            warm_up = 4 * workers
            specs = [
                JobSpec(
                    kind="exec",
                    payload=exec_payload(p.argv, files=dict(p.files), limits=LIMITS, warm_python=p.warm_python),
                    run_id="warm-up" if index < warm_up else "timed",
                )
                for index, p in enumerate(_programs(kind, warm_up + count))
            ]
            scheduler.submit(specs[:warm_up])
            await scheduler.run()
            start, cpu, idle = time.perf_counter(), time.process_time(), _Idle()
            scheduler.submit(specs[warm_up:])
            await scheduler.run()
            rate, cpu_ms = count / (time.perf_counter() - start), (time.process_time() - cpu) / count * 1e3
            idle_share = idle.share()
        waits = []
        for job in store.jobs(run_id="timed"):
            moves = store.transitions(job.id)
            began = next(m.at for m in moves if m.target is JobState.RUNNING)
            waits.append(began - moves[0].at)
        store.close()
        return rate, waits, cpu_ms, idle_share


class _FirstStart:
    def __init__(self) -> None:
        self.at: float | None = None

    def write(self, event: telemetry.Event) -> None:
        if self.at is None and event.kind == "job.transition" and event.fields["target"] == "running":
            self.at = time.perf_counter()


async def recovery(jobs: int) -> float:
    """Seconds from opening a scheduler on a store of ``jobs`` jobs, some leased by a dead scheduler, to the first
    job that starts."""
    with tempfile.TemporaryDirectory() as home:
        store = JobStore(Path(home) / "jobs.db")
        needs = Requirements(cpus=0.001)
        for first in range(0, jobs, 1000):
            store.submit([(JobSpec(kind="noop", payload={"i": i}), needs) for i in range(first, first + 1000)])
        gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        started = Path(f"/proc/{gone.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        store.register_owner("dead", "unused", gone.pid, started)
        store.lease("dead", lambda offered: [(c.id, "local") for c in offered], window=100, lease_s=3600)
        gone.kill()
        gone.wait()
        with store.db.write() as db:  # the dead scheduler was on this machine
            from rollbox.scheduler._owners import Identity

            db.execute("UPDATE owners SET host = ? WHERE id = 'dead'", (Identity().host,))
        store.close()
        first = _FirstStart()
        with telemetry.recording(first):
            opened = time.perf_counter()
            worker = LocalWorker(capacity=Capacity(cpus=1000, memory_bytes=2**30, max_jobs=64))
            async with Scheduler(JobStore(Path(home) / "jobs.db"), workers=[worker], home=Path(home)) as scheduler:
                running = asyncio.create_task(scheduler.run())
                while first.at is None:
                    await asyncio.sleep(0.001)
                running.cancel()
                await asyncio.gather(running, return_exceptions=True)
        assert first.at is not None
        return first.at - opened


async def main(args: argparse.Namespace) -> dict[str, Any]:
    workers = len(os.sched_getaffinity(0))
    if args.loop_cost:
        return await loop_cost(args.repeats, args.programs or PROGRAMS["true"], workers)
    rates: dict[str, list[float]] = {"sqlite": [], "postgresql": [], "bare_sqlite": []}
    raws: dict[str, list[float]] = {kind: [] for kind in args.kinds}
    ratios: dict[str, dict[str, list[float]]] = {kind: {way: [] for way in WAYS} for kind in args.kinds}
    cpus: dict[str, dict[str, list[float]]] = {kind: {way: [] for way in ("raw", *WAYS)} for kind in args.kinds}
    idles: dict[str, dict[str, list[float]]] = {kind: {way: [] for way in ("raw", *WAYS)} for kind in args.kinds}
    waits: list[float] = []
    recoveries: list[float] = []
    loads: list[float] = []
    # Dispatch first, every round, then end to end: the PostgreSQL server (stopped in between) and what the
    # dispatch rounds leave the machine to do (its vacuum, the disk's flushes) are not measured with either side.
    with postgres(args.postgres) as url:
        for round_ in range(args.repeats):
            loads.append(os.getloadavg()[0])
            rates["bare_sqlite"].append(bare_sqlite(args.dispatch_jobs))
            for store in ("sqlite", "postgresql") if round_ % 2 == 0 else ("postgresql", "sqlite"):
                with contextlib.ExitStack() as stack:
                    target = stack.enter_context(fresh_schema(url)) if store == "postgresql" else None
                    rates[store].append(await dispatch(args.dispatch_jobs, target))
            print(
                f"dispatch round {round_ + 1} (load {loads[-1]:.1f}): sqlite {rates['sqlite'][-1]:.0f}/s, "
                f"postgresql {rates['postgresql'][-1]:.0f}/s (bare sqlite {rates['bare_sqlite'][-1]:.0f}/s)",
                file=sys.stderr,
            )
    for round_ in range(0 if args.dispatch_only else args.repeats):
        load = os.getloadavg()[0]
        loads.append(load)
        line = f"end-to-end round {round_ + 1} (load {load:.1f})"
        for kind in args.kinds:  # which side goes first turns with the rounds
            count = args.programs or PROGRAMS[kind]
            order = ("raw", *WAYS)[round_ % 3 :] + ("raw", *WAYS)[: round_ % 3]
            rate: dict[str, float] = {}
            for way in order:
                if way == "raw":
                    rate[way], cpu, idle = await raw(kind, count, workers)
                else:
                    rate[way], wait, cpu, idle = await scheduled(kind, count, workers, way)
                    waits.extend(wait)
                cpus[kind][way].append(cpu)
                idles[kind][way].append(idle)
            raws[kind].append(rate["raw"])
            line += f"; {kind} raw {rate['raw']:.0f}/s"
            for way in WAYS:
                ratios[kind][way].append(rate[way] / rate["raw"])
                line += f", {way} {rate[way]:.0f}/s ({ratios[kind][way][-1]:.2f}x)"
            line += (
                " (process CPU "
                + " / ".join(f"{cpus[kind][way][-1]:.2f}" for way in ("raw", *WAYS))
                + " ms a program, machine idle "
                + " / ".join(f"{idles[kind][way][-1]:.0%}" for way in ("raw", *WAYS))
                + ")"
            )
        recoveries.append(await recovery(args.store_jobs))
        print(f"{line}; recovery {recoveries[-1] * 1000:.0f} ms", file=sys.stderr)
    report: dict[str, Any] = {
        "dispatch_per_s": {store: _spread(samples) for store, samples in rates.items()},
        "postgresql_over_sqlite": _spread([p / s for p, s in zip(rates["postgresql"], rates["sqlite"], strict=True)]),
        "sqlite_over_bare_sqlite": _spread([r / f for r, f in zip(rates["sqlite"], rates["bare_sqlite"], strict=True)]),
        "load_average": _spread(loads),
        "targets": TARGETS,
        "setup": {"workers": workers, "programs": {k: args.programs or PROGRAMS[k] for k in args.kinds},
                  "dispatch_jobs": args.dispatch_jobs,
                  "store_jobs": args.store_jobs, "repeats": args.repeats, "kinds": args.kinds},
    }  # fmt: skip
    if not args.dispatch_only:
        report["raw_per_s"] = {kind: _spread(samples) for kind, samples in raws.items()}
        report["end_to_end_ratio"] = {
            kind: {way: _spread(samples) for way, samples in by_way.items()} for kind, by_way in ratios.items()
        }
        report["process_cpu_ms_per_program"] = {
            kind: {way: _spread(samples) for way, samples in by_way.items()} for kind, by_way in cpus.items()
        }
        report["machine_idle_share"] = {
            kind: {way: _spread(samples) for way, samples in by_way.items()} for kind, by_way in idles.items()
        }
        report["queue_wait_s"] = {"p50": _percentile(waits, 0.5), "p99": _percentile(waits, 0.99)}
        report["recovery_s"] = _spread(recoveries)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dispatch-jobs", type=int, default=5000)
    parser.add_argument(
        "--programs",
        type=int,
        default=None,
        help="programs of each kind in each round (default: true 1600, warm_python 800, python 320)",
    )
    parser.add_argument("--kinds", type=lambda text: text.split(","), default=list(KINDS), help=",".join(KINDS))
    parser.add_argument("--store-jobs", type=int, default=10_000)
    parser.add_argument("--postgres", metavar="URL", default=None, help="a database to measure PostgreSQL on")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--dispatch-only", action="store_true", help="measure only dispatch and its floor")
    parser.add_argument(
        "--loop-cost", action="store_true", help="measure only what event-loop CPU per program costs raw `true`"
    )
    options = parser.parse_args()
    result = asyncio.run(main(options))
    print(json.dumps(result, indent=2))
    if options.json:
        options.json.write_text(json.dumps(result, indent=2) + "\n")
