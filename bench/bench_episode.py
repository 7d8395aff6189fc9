#!/usr/bin/env python3
"""What an episode costs: a tool call in a live episode next to a bare exec in a live sandbox; and an episode's
start (its reset) on a large repository next to one on an empty workspace. Measured side by side.

    python bench/bench_episode.py [--iterations N] [--rounds R] [--json PATH]
    python bench/bench_episode.py --start [--files N] [--megabytes M] [--end] [--iterations N] [--rounds R]
                                  [--json PATH]

Tool-call cases, each one command per iteration:

- ``episode bash("true")``: ``await env.step({"name": "bash", "arguments": {"command": "true"}})`` in one live
  episode (action checked, command run by ``bash -c``, observation formatted, cut to budget, turn recorded);
- ``bare exec bash -c true``: ``await sb.exec(["bash", "-c", "true"])`` in one live sandbox: the same command,
  without the episode;
- ``bare exec true``: ``await sb.exec(["true"])`` in one live sandbox;
- ``episode write_file``: ``write_file`` of a one-line file in the same episode (one host-side write into the
  workspace, no process in the sandbox), beside ``bash("true")``.

With ``--start``: ``rollbox.make(task)`` then ``await env.reset()`` (timed; the episode is closed after), on a
task whose workspace is empty but for one file, and on the same task in a repository of N files (default 10,000)
and M megabytes (default 100; ``bench_workspace.make_repository``, on the host's disk), each from a fresh
sandbox and from a warm pool (``WarmSandboxes(size=1)``: the sandbox handed back between episodes). The reset
opens the agent's sandbox over a copy-on-write /workspace and walks the task's workspace (its listing and
visible tests). With ``--end``, also the episode's end on each: ``submit`` right after reset (the agent's
workspace exported and graded by the judge in a fresh sandbox).

Rounds rotate the order of the cases so that a shared machine's noise falls on all alike; warm-up iterations
are discarded. The target (a tool call within 1.5x of a bare exec of the same command) is printed with PASS or
MISS; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import rollbox
from bench_workspace import make_repository
from rollbox.sandbox import SandboxSource, WarmSandboxes
from rollbox.tasks import Task, load_task

TARGET = 1.5


def _task(root: Path) -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "workspace" / "main.py").write_text("print('hi')\n")
    (root / "tests" / "cases.jsonl").write_text('{"input": "", "output": "hi"}\n')
    (root / "task.toml").write_text('[grading]\nrunner = "stdio"\ncommand = "python3 main.py"\n')
    return root


async def _rotated(
    cases: dict[str, Callable[[], Awaitable[float]]], iterations: int, rounds: int
) -> dict[str, list[float]]:
    """Each case's seconds (what its function returns), the cases' order rotated round by round; round 0 warms up."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for round_ in range(rounds + 1):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            for _ in range(iterations):
                seconds = await cases[name]()
                if round_:
                    times[name].append(seconds)
        print(f"  round {round_}/{rounds}", file=sys.stderr)
    return times


async def measure_start(files: int, megabytes: int, end: bool, iterations: int, rounds: int) -> dict[str, list[float]]:
    """The reset (and with ``end``, the submit) of episodes on an empty workspace and on a repository."""
    scratch = Path(tempfile.mkdtemp(prefix="rollbox-bench-episode-", dir=os.environ.get("TMPDIR", "/var/tmp")))
    try:
        empty = load_task(_task(scratch / "empty"))
        root = _task(scratch / "repository")
        size = make_repository(root / "workspace", files, megabytes)
        repository = load_task(root)
        print(f"repository: {files} files, {size / 2**20:.0f} MiB", file=sys.stderr)
        # A workspace changed within the last 2 s is walked at every reset (its directories' times cannot yet show
        # the next change); a task's workspace is older than that, and so is this one once the cases start.
        time.sleep(2.5)
        async with WarmSandboxes(size=1) as warm:

            def starting(task: Task, sandboxes: SandboxSource | None) -> Callable[[], Awaitable[float]]:
                async def run() -> float:
                    async with rollbox.make(task, sandboxes=sandboxes) as env:
                        begin = time.perf_counter()
                        await env.reset()
                        seconds = time.perf_counter() - begin
                        if task is repository and env.workspace_mode != "overlay":
                            raise RuntimeError(f"the workspace was not overlaid ({env.workspace_mode})")
                    return seconds

                return run

            def ending(task: Task) -> Callable[[], Awaitable[float]]:
                async def run() -> float:
                    async with rollbox.make(task) as env:
                        await env.reset()
                        begin = time.perf_counter()
                        _obs, _reward, _done, info = await env.step({"name": "submit", "arguments": {}})
                        seconds = time.perf_counter() - begin
                    if info.verdict is None or info.verdict.reward is None:
                        raise RuntimeError(f"the episode was not judged: {info.verdict}")
                    return seconds

                return run

            cases = {
                "reset, empty": starting(empty, None),
                "reset, repository": starting(repository, None),
                "reset, empty, warm pool": starting(empty, warm),
                "reset, repository, warm pool": starting(repository, warm),
            }
            if end:
                cases |= {"submit, empty": ending(empty), "submit, repository": ending(repository)}
            return await _rotated(cases, iterations, rounds)
    finally:
        await asyncio.to_thread(shutil.rmtree, scratch)


def _timed(action: Callable[[], Awaitable[object]]) -> Callable[[], Awaitable[float]]:
    async def run() -> float:
        begin = time.perf_counter()
        await action()
        return time.perf_counter() - begin

    return run


async def measure(iterations: int, rounds: int) -> dict[str, list[float]]:
    """A tool call in a live episode beside bare execs in a live sandbox."""
    with tempfile.TemporaryDirectory() as scratch:
        task = load_task(_task(Path(scratch) / "task"))
        budget = {"max_turns": 10**9, "output_bytes": 10**12, "wall_s": 10**6}
        async with rollbox.make(task, **budget) as env, rollbox.Sandbox() as sb:
            await env.reset()
            step = {"name": "bash", "arguments": {"command": "true"}}
            write = {"name": "write_file", "arguments": {"path": "notes.txt", "content": "a line\n"}}
            cases = {
                'episode bash("true")': _timed(lambda: env.step(step)),
                "episode write_file": _timed(lambda: env.step(write)),
                "bare exec bash -c true": _timed(lambda: sb.exec(["bash", "-c", "true"])),
                "bare exec true": _timed(lambda: sb.exec(["true"])),
            }
            return await _rotated(cases, iterations, rounds)


def _report(times: dict[str, list[float]], header: str) -> dict[str, float]:
    """Print each case's median, minimum and maximum; returns the medians in ms."""
    medians = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    print(f"{platform.node()}: {header}")
    for name, values in times.items():
        low, high = min(values) * 1e3, max(values) * 1e3
        print(f"  {name:30s} median {medians[name]:9.3f} ms   min {low:9.3f} ms   max {high:9.3f} ms")
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--start", action="store_true", help="time resets on a repository and an empty workspace")
    parser.add_argument("--end", action="store_true", help="with --start: time submits too")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--iterations", type=int)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.start:
        iterations = args.iterations or 3
        times = asyncio.run(measure_start(args.files, args.megabytes, args.end, iterations, args.rounds))
        medians = _report(times, f"{args.rounds} rounds x {iterations} episodes per case")
        for where in ("", ", warm pool"):
            ratio = medians[f"reset, repository{where}"] / medians[f"reset, empty{where}"]
            print(f"  reset on the repository / on an empty workspace{where}: {ratio:.2f}x")
        if args.json:
            args.json.write_text(json.dumps({"median_ms": medians, "samples_s": times}))
        return
    iterations = args.iterations or 200
    times = asyncio.run(measure(iterations, args.rounds))
    medians = _report(times, f"{args.rounds} rounds x {iterations} iterations per case")
    p99 = {name: statistics.quantiles(values, n=100)[98] * 1e3 for name, values in times.items()}
    ratio = medians['episode bash("true")'] / medians["bare exec bash -c true"]
    ratio_true = medians['episode bash("true")'] / medians["bare exec true"]
    ratio_write = medians["episode write_file"] / medians['episode bash("true")']
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(f"  tool call / bare exec of the same command: {ratio:.2f}x (target <= {TARGET}x: {verdict})")
    print(f"  tool call / bare exec of true:             {ratio_true:.2f}x")
    print(f'  write_file / bash("true"):                 {ratio_write:.2f}x')
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "median_ms": medians,
                    "p99_ms": p99,
                    "ratio": ratio,
                    "ratio_true": ratio_true,
                    "ratio_write": ratio_write,
                }
            )
        )


if __name__ == "__main__":
    main()
