#!/usr/bin/env python3
"""Validation's cost per grading next to ``rollbox eval``'s, on the same tasks, in one run.

    python bench/bench_validate.py [--tasks N] [--dir DIR] [--rounds R] [--workers W] [--json PATH]

On the first ``N`` HumanEval tasks (written by ``rollbox eval humaneval`` under ``~/.cache/rollbox/humaneval``),
or the first ``N`` task directories in ``DIR`` (synthesized pytest tasks: ``rollbox tasks synth``), each round
times, in this process, with ``W`` gradings at once:

- validation: ``rollbox.curate.validate`` of the ``N`` tasks (default options, pressure runs off: those load the
  CPU on purpose, and time under load is what they measure), wall time over the gradings its reports count;
- eval: ``rollbox.judge.grade_batch`` (what ``rollbox eval`` runs) of as many gradings per task as validation made
  of it: the task's reference (``solution/``) with a trailing comment of its own in its first Python file, so that
  no two are alike and each is graded.

Per grading = wall seconds / gradings. The two alternate (validation first in odd rounds) so that the noise of a
shared machine falls on both; the median over rounds is reported with the ratio validation / eval. Validation's
figure includes everything validation does on the host (mutants, canaries, its reports), which is its cost.
Validation's gradings are also split by how they ran: under a variable validation varies (a hash seed, the clock
moved: a fork of a pre-started Python that started under it) or as the judge always grades, with the median of
each kind's own duration (``Verdict.duration_s``). Under the guard (``scripts/guard.py``), whose cgroup holds this
process and every sandbox it makes, each side's CPU seconds per grading are given too: unlike wall time, they do not
grow with the other tenants' load. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

from rollbox.curate import ValidateOptions, validate
from rollbox.curate._grader import Grader, Measured
from rollbox.judge import grade_batch
from rollbox.judge._humaneval import default_tasks_dir
from rollbox.tasks import Task, load_task

T = TypeVar("T")


def run_cpu_s() -> float | None:
    """CPU seconds so far of this process and its sandboxes, from the guard's cgroup: on cgroup v1 the process's own
    cpuacct group (the sandboxes nest in it), on v2 its parent (the sandboxes are beside it); None without the
    guard."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "cpuacct" in controllers.split(",") and Path(path).name.startswith("rollbox-guard-"):
            return int(Path(f"/sys/fs/cgroup/cpuacct{path}/cpuacct.usage").read_text()) / 1e9
        if controllers == "" and Path(path).parent.name.startswith("rollbox-guard-"):
            stat = Path(f"/sys/fs/cgroup{Path(path).parent}/cpu.stat").read_text().split()
            return int(stat[stat.index("usage_usec") + 1]) / 1e6
    return None


def cpu_of(run: Coroutine[Any, Any, T]) -> tuple[T, float | None]:
    """``run``'s result (run in an event loop of its own), and the CPU seconds it took (None without the guard)."""
    before = run_cpu_s()
    result = asyncio.run(run)
    after = run_cpu_s()
    return result, (after - before if before is not None and after is not None else None)


def bench_tasks(count: int, root: Path | None) -> list[Task]:
    if root is None:
        root = default_tasks_dir()
        found = [p for p in root.glob("HumanEval_*") if p.is_dir()]
        paths = sorted(found, key=lambda p: int(p.name.split("_")[1]))
    else:
        paths = sorted(p.parent for p in root.glob("*/task.toml"))
    if len(paths) < count:
        raise SystemExit(f"{root} holds {len(paths)} tasks, fewer than --tasks {count}")
    return [load_task(p) for p in paths[:count]]


def distinct_references(task: Task, count: int) -> list[dict[str, bytes]]:
    """``count`` copies of the task's reference files, each with a comment of its own in its first Python file."""
    assert task.solution is not None, f"{task.id} has no solution/"
    files = {str(p.relative_to(task.solution)): p.read_bytes() for p in task.solution.rglob("*") if p.is_file()}
    first = min(p for p in files if p.endswith(".py"))
    return [{**files, first: files[first] + f"\n# {n}\n".encode()} for n in range(count)]


#: Validation's grading durations in this process: under varied variables (True) or the judge's own (False).
DURATIONS: dict[bool, list[float]] = {True: [], False: []}
_measure = Grader.measure


async def _timed(
    self: Grader, task: Task, files: Mapping[str, bytes], env: Mapping[str, str] | None = None
) -> Measured:
    measured = await _measure(self, task, files, env)
    DURATIONS[bool(env)].append(measured.verdict.duration_s)
    return measured


Grader.measure = _timed  # type: ignore[method-assign]


async def time_validation(tasks: list[Task], workers: int) -> tuple[float, dict[str, int]]:
    start = time.monotonic()
    reports = await validate(tasks, options=ValidateOptions(pressure=False), workers=workers)
    return time.monotonic() - start, {r.task_id: r.gradings for r in reports}


async def time_eval(tasks: list[Task], gradings: dict[str, int], workers: int) -> float:
    items = [(task, files) for task in tasks for files in distinct_references(task, gradings[task.id])]
    start = time.monotonic()
    async for _ in grade_batch(items, workers=workers):
        pass
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10)
    parser.add_argument("--dir", type=Path, help="task directories to use instead of HumanEval's")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tasks = bench_tasks(args.tasks, args.dir)
    rows: list[dict[str, Any]] = []
    for n in range(args.rounds):
        load = os.getloadavg()[0]
        if n % 2 == 0:
            (v_s, gradings), v_cpu = cpu_of(time_validation(tasks, args.workers))
            e_s, e_cpu = cpu_of(time_eval(tasks, gradings, args.workers))
        else:
            # The gradings per task are validation's, known from the first round.
            e_s, e_cpu = cpu_of(time_eval(tasks, gradings, args.workers))
            (v_s, gradings), v_cpu = cpu_of(time_validation(tasks, args.workers))
        total = sum(gradings.values())
        row = {"round": n + 1, "gradings": total, "validate_ms": 1000 * v_s / total, "eval_ms": 1000 * e_s / total}
        row["ratio"] = row["validate_ms"] / row["eval_ms"]
        row["load"] = load
        cpu = ""
        if v_cpu is not None and e_cpu is not None:
            row["validate_cpu_ms"], row["eval_cpu_ms"] = 1000 * v_cpu / total, 1000 * e_cpu / total
            row["cpu_ratio"] = v_cpu / e_cpu
            cpu = (
                f"; CPU {row['validate_cpu_ms']:.1f} against {row['eval_cpu_ms']:.1f} ms/grading, "
                f"ratio {row['cpu_ratio']:.2f}"
            )
        rows.append(row)
        print(
            f"round {n + 1}: {total} gradings, validation {row['validate_ms']:.1f} ms/grading, "
            f"eval {row['eval_ms']:.1f} ms/grading, ratio {row['ratio']:.2f} (load {load:.1f}){cpu}",
            flush=True,
        )
    keys = ("validate_ms", "eval_ms", "ratio", "validate_cpu_ms", "eval_cpu_ms", "cpu_ratio")
    median = {k: statistics.median(r[k] for r in rows) for k in keys if all(k in r for r in rows)}
    print(
        f"median: validation {median['validate_ms']:.1f} ms/grading, eval {median['eval_ms']:.1f} ms/grading, "
        f"ratio {median['ratio']:.2f}" + (f"; CPU ratio {median['cpu_ratio']:.2f}" if "cpu_ratio" in median else "")
    )
    kinds = {
        "varied" if varied else "judge's": {"gradings": len(d), "median_ms": 1000 * statistics.median(d)}
        for varied, d in DURATIONS.items()
        if d
    }
    for kind, figures in kinds.items():
        print(
            f"validation's gradings under {kind} variables: {figures['gradings']}, median {figures['median_ms']:.0f} ms"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"rounds": rows, "median": median, "tasks": args.tasks, "dir": str(args.dir), "kinds": kinds}, indent=2
            )
        )


if __name__ == "__main__":
    main()
