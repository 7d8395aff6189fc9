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
from rollbox.sandbox import Sandbox, SandboxConfig, SandboxSource
from rollbox.tasks import Task

from ._sandboxes import DemandSandboxes

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


class _Probed:
    """``inner``'s sandboxes, but those asked for with a zygote started under a probe's variables (a hash seed, the
    clock moved: ``SandboxConfig.interpreter_env``, see ``rollbox.judge.runners._probe``), which come from
    ``probed``: pools of one sandbox each, one per seed and clock. Every task takes the same seeds and clocks, so
    each pool serves a grading of every task, and its cost (a sandbox and a zygote) is less than one plain
    interpreter's start per grading."""

    def __init__(self, inner: SandboxSource, probed: SandboxSource) -> None:
        self._inner, self._probed = inner, probed

    def _source(self, config: SandboxConfig) -> SandboxSource:
        return self._probed if config.interpreter_env else self._inner

    def sandbox(self, config: SandboxConfig) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        return self._source(config).sandbox(config)

    def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        return self._source(config).sandboxes(count, config, avoid=avoid)


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
        # over: returned sandboxes are reset in the background. Each pool grows only as far as it is asked, and
        # one more, ready while another is reset.
        self._plain = DemandSandboxes(max_size=2 * (self.workers + 2), spare=1)
        self._probed = DemandSandboxes(max_size=1)
        #: Where gradings and validation's other sandbox runs take sandboxes from.
        self.sandboxes: SandboxSource = _Probed(self._plain, self._probed)
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
                        verdict = await grade(task, files, sandboxes=self.sandboxes)
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
        await self._plain.close()
        await self._probed.close()
