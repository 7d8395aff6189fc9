#!/usr/bin/env python3
"""What a tool call in a live episode costs, next to a bare exec in a live sandbox, measured side by side.

    python bench/bench_episode.py [--iterations N] [--rounds R] [--json PATH]

Cases, each one command per iteration:

- ``episode bash("true")``: ``await env.step({"name": "bash", "arguments": {"command": "true"}})`` in one live
  episode (action checked, command run by ``bash -c``, observation formatted, cut to budget, turn recorded);
- ``bare exec bash -c true``: ``await sb.exec(["bash", "-c", "true"])`` in one live sandbox: the same command,
  without the episode;
- ``bare exec true``: ``await sb.exec(["true"])`` in one live sandbox.

Rounds rotate the order of the cases so that a shared machine's noise falls on all alike; warm-up iterations
are discarded. The target (a tool call within 1.5x of a bare exec of the same command) is printed with PASS or
MISS; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import rollbox
from rollbox.tasks import load_task

TARGET = 1.5


def _task(root: Path) -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "workspace" / "main.py").write_text("print('hi')\n")
    (root / "tests" / "cases.jsonl").write_text('{"input": "", "output": "hi"}\n')
    (root / "task.toml").write_text('[grading]\nrunner = "stdio"\ncommand = "python3 main.py"\n')
    return root


async def measure(iterations: int, rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as scratch:
        task = load_task(_task(Path(scratch) / "task"))
        budget = {"max_turns": 10**9, "output_bytes": 10**12, "wall_s": 10**6}
        async with rollbox.make(task, **budget) as env, rollbox.Sandbox() as sb:
            await env.reset()
            step = {"name": "bash", "arguments": {"command": "true"}}
            cases: dict[str, Callable[[], Awaitable[object]]] = {
                'episode bash("true")': lambda: env.step(step),
                "bare exec bash -c true": lambda: sb.exec(["bash", "-c", "true"]),
                "bare exec true": lambda: sb.exec(["true"]),
            }
            times: dict[str, list[float]] = {name: [] for name in cases}
            names = list(cases)
            for round_ in range(rounds + 1):  # round 0 warms up
                order = names[round_ % len(names) :] + names[: round_ % len(names)]
                for name in order:
                    for _ in range(iterations):
                        begin = time.perf_counter()
                        await cases[name]()
                        if round_:
                            times[name].append(time.perf_counter() - begin)
            return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    times = asyncio.run(measure(args.iterations, args.rounds))
    medians = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    p99 = {name: statistics.quantiles(values, n=100)[98] * 1e3 for name, values in times.items()}
    print(f"{platform.node()}: {args.rounds} rounds x {args.iterations} iterations per case")
    for name in times:
        print(f"  {name:24s} median {medians[name]:7.3f} ms   p99 {p99[name]:7.3f} ms")
    ratio = medians['episode bash("true")'] / medians["bare exec bash -c true"]
    ratio_true = medians['episode bash("true")'] / medians["bare exec true"]
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(f"  tool call / bare exec of the same command: {ratio:.2f}x (target <= {TARGET}x: {verdict})")
    print(f"  tool call / bare exec of true:             {ratio_true:.2f}x")
    if args.json:
        args.json.write_text(
            json.dumps({"median_ms": medians, "p99_ms": p99, "ratio": ratio, "ratio_true": ratio_true})
        )


if __name__ == "__main__":
    main()
