#!/usr/bin/env python3
"""The loop's targets, side by side in one run:

    python scripts/guard.py --memory 8G --pids 8192 -- python bench/bench_train.py [--iterations 4] [--json PATH]

On the default demo's task stream (built and validated once, then from the cache under ``$ROLLBOX_HOME``):

- loop overhead: for each iteration of ``rollbox.train.train``, its wall time and the part spent outside running
  the jobs (sampling, submitting, reading results, the GRPO step, writing ``rollouts.jsonl``) [< 5%];
- rollout throughput: the same episodes (every rollout the loop ran, the same task and action) run directly
  through the scheduler — one batch per iteration, as the loop submits them, and all in one batch — against the
  loop's own rate [>= 90%].

The two are interleaved: loop, direct, loop, direct... (``--repeats`` rounds). Medians, with the spread. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from rollbox.scheduler import JobSpec, JobStore, Scheduler, rollbox_home, run_dir, store_path
from rollbox.train import TrainConfig, rollout_payload, train
from rollbox.train._stream import StreamSpec, build_stream


async def _loop(tasks: list[Any], iterations: int, home: Path, run_id: str) -> dict[str, Any]:
    config = TrainConfig(iterations=iterations, run_id=run_id)
    async with Scheduler(JobStore(store_path(home)), runs=[run_id], home=home) as scheduler:
        result = await train(tasks, config, scheduler=scheduler)
    rows = [json.loads(x) for x in (run_dir(run_id, home) / "rollouts.jsonl").read_text().splitlines()]
    wall = sum(t["wall_s"] for t in result.timings)
    loop = sum(t["loop_s"] for t in result.timings)
    return {"rows": rows, "wall_s": wall, "loop_s": loop, "timings": result.timings}


async def _direct(tasks: list[Any], rows: list[dict[str, Any]], home: Path, run_id: str, *, batched: bool) -> float:
    """The loop's episodes again, straight through the scheduler; returns the wall time."""
    paths = {t.id: t.path for t in tasks}
    batches: dict[int, list[JobSpec]] = {}
    for index, row in enumerate(rows):
        payload = rollout_payload(paths[row["task_id"]], action=row["action"])
        spec = JobSpec(kind="rollout", payload=payload, key=f"{run_id}/{index}", run_id=run_id)
        batches.setdefault(row["iteration"] if batched else 0, []).append(spec)
    async with Scheduler(JobStore(store_path(home)), runs=[run_id], home=home) as scheduler:
        began = time.monotonic()
        for _, specs in sorted(batches.items()):
            scheduler.submit(specs)
            await scheduler.run()
        return time.monotonic() - began


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3g} ({min(values):.3g}..{max(values):.3g})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    stream = asyncio.run(build_stream(StreamSpec(), home=rollbox_home(), on_status=print))
    tasks = stream.tasks
    print(f"{len(tasks)} tasks, {args.iterations} iterations of 4 samples x 2 arms")
    loops, iterations, directs, singles, overheads, ratios = [], [], [], [], [], []
    for round_ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="rollbox-bench-train-") as scratch:
            home = Path(scratch)
            loop = asyncio.run(_loop(tasks, args.iterations, home, f"loop{round_}"))
            direct = asyncio.run(_direct(tasks, loop["rows"], home, f"direct{round_}", batched=True))
            single = asyncio.run(_direct(tasks, loop["rows"], home, f"single{round_}", batched=False))
        rollouts = len(loop["rows"])
        loops.append(rollouts / loop["wall_s"])
        directs.append(rollouts / direct)
        singles.append(rollouts / single)
        overheads.append(loop["loop_s"] / loop["wall_s"])
        iterations += [t["loop_s"] / t["wall_s"] for t in loop["timings"]]
        ratios.append(loops[-1] / directs[-1])
        print(
            f"round {round_ + 1}: {rollouts} rollouts; loop {loop['wall_s']:.1f} s ({loops[-1]:.1f}/s, its own work "
            f"{loop['loop_s']:.2f} s = {overheads[-1]:.1%}); direct per iteration {direct:.1f} s ({directs[-1]:.1f}/s);"
            f" direct in one batch {single:.1f} s ({singles[-1]:.1f}/s)"
        )
    figures = {
        "rollouts_per_s_loop": _spread(loops),
        "rollouts_per_s_direct_per_iteration": _spread(directs),
        "rollouts_per_s_direct_one_batch": _spread(singles),
        "loop_over_direct": _spread(ratios),
        "loop_overhead_share": _spread(overheads),
        "loop_overhead_share_worst_iteration": f"{max(iterations):.3g}",
    }
    for name, value in figures.items():
        print(f"{name:40s} {value}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
