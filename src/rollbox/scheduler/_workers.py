"""Workers: where leased jobs run. A worker has a capacity, runs one attempt of a job when asked, and reports
the moves of that attempt it sees (``running -> grading``) as they happen.

:class:`LocalWorker` runs jobs in this process, in elastic warm pools on this machine; the Ray worker
(:mod:`._ray`) runs them on a node of a Ray cluster.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from ._errors import SchedulerError
from ._kinds import JobContext, Outcome, get_kind
from ._model import Job
from ._placement import Capacity, machine_capacity
from ._pools import ElasticSandboxes
from ._states import JobState

__all__ = ["LocalWorker", "Moved", "Worker", "WorkerLost"]

#: How a worker reports a move of a running attempt: the new state and when it happened.
Moved = Callable[[JobState, float], None]


class WorkerLost(SchedulerError):
    """The worker running an attempt died or became unreachable: rollbox's failure, retried."""


class Worker(Protocol):
    """Somewhere jobs run."""

    name: str
    capacity: Capacity
    #: How many jobs it takes beyond what fits its capacity now, queued on its side and started there as
    #: running ones end (0: it is handed a job only when that job fits).
    ahead: int

    async def start(self) -> None:
        """Get ready to run jobs."""
        ...

    async def close(self) -> None:
        """Stop; attempts still running are cancelled."""
        ...

    async def run(self, job: Job, moved: Moved) -> Outcome:
        """Run one attempt of ``job`` (its kind decides how).

        Raises:
            PayloadError: the job's payload cannot be run.
            WorkerLost, Exception: rollbox's failure; the attempt is retried.
        """
        ...

    def expect(self, queued: Mapping[str, int]) -> None:
        """How many queued jobs wait for each warm pool (a hint to grow pools ahead of them)."""
        ...

    def alive(self) -> bool:
        """Whether the worker still answers (checked at each heartbeat)."""
        ...


class LocalWorker:
    """Runs jobs in this process, with sandboxes from elastic warm pools on this machine.

    Args:
        name: The worker's name in placement and in each attempt's record.
        capacity: Its budget (default: this machine's CPUs and available memory).
        grace_s: How long idle warm sandboxes are kept (see :class:`ElasticSandboxes`).
        max_pool: The most sandboxes one configuration's pool holds (default: twice the jobs that fit at once, as
            returned sandboxes are reset in the background).
    """

    ahead = 0

    def __init__(
        self,
        *,
        name: str = "local",
        capacity: Capacity | None = None,
        grace_s: float = 30.0,
        max_pool: int | None = None,
    ) -> None:
        self.name = name
        self.capacity = capacity or machine_capacity()
        jobs = self.capacity.max_jobs or max(1, math.ceil(self.capacity.cpus))
        self.sandboxes = ElasticSandboxes(max_size=max_pool or 2 * jobs, grace_s=grace_s, warm_python=False)

    async def start(self) -> None:
        await self.sandboxes.__aenter__()

    async def close(self) -> None:
        await self.sandboxes.close()

    async def run(self, job: Job, moved: Moved) -> Outcome:
        kind = get_kind(job.kind)
        context = JobContext(
            job_id=job.id,
            attempt=job.attempts,
            run_id=job.run_id,
            sandboxes=self.sandboxes,
            grading=lambda: moved(JobState.GRADING, time.time()),
        )
        return await kind.run(job.payload, context)

    def expect(self, queued: Mapping[str, int]) -> None:
        self.sandboxes.expect(queued)

    def alive(self) -> bool:
        return True
