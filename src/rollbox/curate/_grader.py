"""Gradings for curation: many at once in shared warm sandboxes, infrastructure failures retried, progress counted.

Validation is many gradings of chosen candidates by the one judge (``rollbox.judge.grade``); this only schedules
them. A grading that still ends in ``infra_error`` after its retries is returned as such, and the check that
needed it reports ``validation_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass

from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.judge.runners._probe import probe
from rollbox.sandbox import SandboxSource, WarmSandboxes
from rollbox.tasks import Task

__all__ = ["Grader", "Measured", "Progress"]


@dataclass
class Progress:
    """How far a curation run is: gradings done of those planned so far, and tasks finished of all."""

    done: int = 0
    planned: int = 0
    tasks_done: int = 0
    tasks: int = 0


@dataclass(frozen=True)
class Measured:
    """A verdict, and the CPU seconds of the grading's longest run under the task's limits (``None``: unknown)."""

    verdict: Verdict
    cpu_s: float | None


class Grader:
    """Grades ``(task, files)`` items, ``workers`` at a time, in warm sandboxes it owns (close it after use)."""

    def __init__(
        self,
        *,
        workers: int | None = None,
        on_progress: Callable[[Progress], None] | None = None,
        retries: int = 2,
    ) -> None:
        self.workers = workers or len(os.sched_getaffinity(0))
        if self.workers < 1:
            raise ValueError(f"workers must be at least 1, got {self.workers}")
        # Room for a check-based grading's variants (three sandboxes at once) beside the other workers, twice
        # over: returned sandboxes are reset in the background.
        self.sandboxes: SandboxSource = WarmSandboxes(size=2 * (self.workers + 2))
        # Gradings under a probe's variables, in sandboxes whose pre-started Python started under them (one pool per
        # hash seed and clock: see ``rollbox.judge.runners._probe``), so that they fork it as the judge's own do.
        # Every task takes the same seeds and clocks, so each pool serves one grading of each task; one sandbox
        # each keeps a pool's cost (a sandbox and a zygote) below one plain interpreter's start per grading.
        self._probed = WarmSandboxes(size=1)
        self.progress = Progress()
        self._gate = asyncio.Semaphore(self.workers)
        self._on_progress = on_progress
        self._retries = retries

    def report(self) -> None:
        """Tell the progress callback where things stand."""
        if self._on_progress is not None:
            self._on_progress(self.progress)

    async def grade(self, task: Task, files: Mapping[str, bytes]) -> Verdict:
        """One grading; ``infra_error`` only when every retry failed too."""
        return (await self.measure(task, files)).verdict

    async def measure(self, task: Task, files: Mapping[str, bytes], env: Mapping[str, str] | None = None) -> Measured:
        """One grading, under ``env`` over the judge's variables (validation's probe: see
        ``rollbox.judge.runners._probe``), with its CPU time."""
        verdict = Verdict(task_id=task.id, status=VerdictStatus.INFRA_ERROR, reward=None)
        cpu_s: float | None = None
        async with self._gate:
            for _ in range(1 + self._retries):
                with probe(env) as measured:
                    try:
                        verdict = await grade(task, files, sandboxes=self._probed if env else self.sandboxes)
                    except Exception as exc:  # a bug of rollbox's: this grading's infra_error, not the run's end
                        verdict = Verdict(
                            task_id=task.id,
                            status=VerdictStatus.INFRA_ERROR,
                            reward=None,
                            error=f"{type(exc).__name__}: {exc}",
                        )
                cpu_s = measured.cpu_s
                if verdict.status is not VerdictStatus.INFRA_ERROR:
                    break
        self.progress.done += 1
        self.report()
        return Measured(verdict, cpu_s)

    async def grade_all(self, items: Sequence[tuple[Task, Mapping[str, bytes]]]) -> list[Verdict]:
        """Every item's verdict, in the items' order (graded concurrently)."""
        self.progress.planned += len(items)
        self.report()
        return list(await asyncio.gather(*(self.grade(task, files) for task, files in items)))

    async def measure_all(
        self, items: Sequence[tuple[Task, Mapping[str, bytes], Mapping[str, str] | None]]
    ) -> list[Measured]:
        """Every ``(task, files, env)`` item measured, in the items' order (graded concurrently)."""
        self.progress.planned += len(items)
        self.report()
        return list(await asyncio.gather(*(self.measure(task, files, env) for task, files, env in items)))

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold one of the ``workers`` slots (for a sandbox run that is no grading)."""
        async with self._gate:
            yield

    async def close(self) -> None:
        """Close the warm sandboxes."""
        if isinstance(self.sandboxes, WarmSandboxes):
            await self.sandboxes.close()
        await self._probed.close()
