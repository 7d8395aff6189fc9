#!/usr/bin/env python3
"""The scheduler's targets, side by side in one run:

    python scripts/guard.py --memory 8G --pids 8192 -- python bench/bench_scheduler.py [--repeats 5] [--json PATH]

- dispatch: no-op jobs through the durable store (submitted in batches, leased, completed; every step committed
  with ``synchronous=FULL`` before it counts) [>= 2,000 jobs/s];
- end to end at saturation: the same programs through ``run_batch`` (raw, no scheduler) and through the scheduler
  (``exec`` jobs), interleaved, the ratio of their rates [>= 90%], and the queue wait (submission to start) p50/p99;
- crash recovery: a store of 10,000 jobs, a hundred of them leased by a scheduler whose process is gone; the time
  from opening a new scheduler to its first resumed job starting [< 1 s].

Medians over ``--repeats`` rounds, with the spread (min..max). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollbox import telemetry
from rollbox.sandbox import Limits, Program, WarmSandboxes, run_batch
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
    exec_payload,
    register_kind,
)

TARGETS = {"dispatch_per_s": 2000.0, "end_to_end_ratio": 0.90, "recovery_s": 1.0}
LIMITS = Limits(timeout_s=10, memory_bytes=128 * 2**20)


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


async def dispatch(jobs: int) -> float:
    """No-op jobs per second: submit (batches of 500), lease, complete."""
    with tempfile.TemporaryDirectory() as home:
        worker = LocalWorker(capacity=Capacity(cpus=1000, memory_bytes=2**30, max_jobs=512))
        async with Scheduler(JobStore(Path(home) / "jobs.db"), workers=[worker], home=Path(home)) as scheduler:
            start = time.perf_counter()
            specs = [JobSpec(kind="noop", payload={"i": i}) for i in range(jobs)]
            for first in range(0, jobs, 500):
                scheduler.submit(specs[first : first + 500])
            await scheduler.run()
            return jobs / (time.perf_counter() - start)


def _programs(count: int) -> list[Program]:
    return [Program(argv=["python3", "-c", f"print(sum(range({i} * 100)))"]) for i in range(count)]


async def raw(count: int, workers: int) -> float:
    """The programs through ``run_batch`` in warm sandboxes (as many as the scheduler's pools hold)."""
    async with WarmSandboxes(size=2 * workers, warm_python=False) as sandboxes:
        start = time.perf_counter()
        async for _ in run_batch(_programs(count), limits=LIMITS, workers=workers, sandboxes=sandboxes):
            pass
        return count / (time.perf_counter() - start)


async def scheduled(count: int, workers: int) -> tuple[float, list[float]]:
    """The same programs as ``exec`` jobs through the scheduler; their rate and queue waits."""
    with tempfile.TemporaryDirectory() as home:
        worker = LocalWorker(capacity=Capacity(cpus=workers, memory_bytes=8 * 2**30))
        store = JobStore(Path(home) / "jobs.db")
        async with Scheduler(store, workers=[worker], home=Path(home)) as scheduler:
            specs = [JobSpec(kind="exec", payload=exec_payload(p.argv, limits=LIMITS)) for p in _programs(count)]
            start = time.perf_counter()
            scheduler.submit(specs)
            await scheduler.run()
            rate = count / (time.perf_counter() - start)
        waits = []
        for job in store.jobs():
            moves = store.transitions(job.id)
            began = next(m.at for m in moves if m.target is JobState.RUNNING)
            waits.append(began - moves[0].at)
        store.close()
        return rate, waits


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
    rates, raws, ratios, waits, recoveries = [], [], [], [], []
    for round_ in range(args.repeats):
        rates.append(await dispatch(args.dispatch_jobs))
        raw_rate = await raw(args.programs, workers)
        sched_rate, wait = await scheduled(args.programs, workers)
        raws.append(raw_rate)
        ratios.append(sched_rate / raw_rate)
        waits.extend(wait)
        recoveries.append(await recovery(args.store_jobs))
        print(
            f"round {round_ + 1}: dispatch {rates[-1]:.0f}/s  raw {raw_rate:.1f}/s  scheduled {sched_rate:.1f}/s "
            f"({ratios[-1]:.0%})  recovery {recoveries[-1] * 1000:.0f} ms",
            file=sys.stderr,
        )
    report = {
        "dispatch_per_s": _spread(rates),
        "raw_per_s": _spread(raws),
        "end_to_end_ratio": _spread(ratios),
        "queue_wait_s": {"p50": _percentile(waits, 0.5), "p99": _percentile(waits, 0.99)},
        "recovery_s": _spread(recoveries),
        "targets": TARGETS,
        "setup": {"workers": workers, "programs": args.programs, "dispatch_jobs": args.dispatch_jobs,
                  "store_jobs": args.store_jobs, "repeats": args.repeats},
    }  # fmt: skip
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dispatch-jobs", type=int, default=5000)
    parser.add_argument("--programs", type=int, default=400)
    parser.add_argument("--store-jobs", type=int, default=10_000)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    result = asyncio.run(main(options))
    print(json.dumps(result, indent=2))
    if options.json:
        options.json.write_text(json.dumps(result, indent=2) + "\n")
