"""A run's results file: ``$ROLLBOX_HOME/runs/ID/results.jsonl``, one line per job, made from the store.

The store is the truth. The file is rewritten whole from it (atomically) when a run starts or resumes and when it
ends, and lines are appended as results are committed between, so that a reader can follow it: a crash between a
commit and its line is mended by the next rewrite, and no line is ever written twice.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import IO, Any

from ._home import run_dir, run_file_error
from ._model import Job, JobResult
from ._store import JobStore

__all__ = ["ResultsFile", "result_line"]

_REMADE = "the job store keeps every result, and the file is made again from it when the run resumes"


def result_line(job: Job, result: JobResult) -> dict[str, Any]:
    """One line of ``results.jsonl``: which task and sample (for jobs of ``rollbox run``), and the outcome; for a
    ``validate`` job, its reasons' codes too (the decision is its status)."""
    line = {
        "task_id": job.payload.get("task_id"),
        "sample": job.payload.get("sample"),
        "job_id": job.id,
        "kind": job.kind,
        "state": result.state.value,
        "status": result.status,
        "reward": result.reward,
        "error": result.error,
        "attempts": job.attempts,
        "trajectory": result.output.get("trajectory"),
    }
    if job.kind == "validate":
        line["reasons"] = [reason["code"] for reason in result.output.get("reasons", [])]
    return line


class ResultsFile:
    """The results file of one run."""

    def __init__(self, store: JobStore, run_id: str, home: Path) -> None:
        self.store, self.run_id = store, run_id
        self.path = run_dir(run_id, home) / "results.jsonl"
        self.seq = 0
        self._file: IO[str] | None = None

    def rewrite(self) -> int:
        """Write every result of the run, in (task, sample, job) order; returns how many.

        Raises:
            OSError: the file could not be written (the message says what to do).
        """
        results = self.store.results(run_id=self.run_id)
        lines = sorted((result_line(job, result) for job, result in results), key=_order)
        partial = self.path.with_name(f".results.{os.getpid()}.partial")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with partial.open("w", encoding="utf-8") as out:
                out.writelines(json.dumps(line) + "\n" for line in lines)
                out.flush()
                os.fsync(out.fileno())
            partial.replace(self.path)
            if self._file is not None:
                self._file.close()
            self._file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
            raise run_file_error(self.path, exc, _REMADE) from exc
        self.seq = max((result.seq for _, result in results), default=0)
        return len(lines)

    def follow(self) -> list[tuple[Job, JobResult]]:
        """Append the results committed since the last call; returns them.

        Raises:
            OSError: the file could not be written (the message says what to do).
        """
        fresh = self.store.results(run_id=self.run_id, after=self.seq)
        if fresh and self._file is not None:
            try:
                self._file.writelines(json.dumps(result_line(job, result)) + "\n" for job, result in fresh)
                self._file.flush()
            except OSError as exc:
                raise run_file_error(self.path, exc, _REMADE) from exc
            self.seq = fresh[-1][1].seq
        return fresh

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None


def _order(line: dict[str, Any]) -> tuple[str, int, int]:
    return (str(line["task_id"] or ""), int(line["sample"] or 0), int(line["job_id"]))
