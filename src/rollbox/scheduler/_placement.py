"""Admission to workers: placement of each job on a worker with room for it, and per-tenant quotas.

A worker has a :class:`Capacity` (CPU cores, memory, named resources); a started job reserves its
:class:`Requirements` there until it ends. The sum of the memory reserved on a worker never exceeds its memory:
the memory limits that jobs' sandboxes promise are never overcommitted. Jobs are offered highest priority first;
one that does not fit now is passed over for smaller ones behind it (backfill), and one that could never fit any
worker is refused when it is submitted.
"""

from __future__ import annotations

import math
import os
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ._errors import Unplaceable
from ._model import MIN_CPUS, Requirements
from ._store import Candidate

__all__ = ["Capacity", "Placement", "machine_capacity"]

#: A worker's queue holds at most this many jobs for each it runs at once, however short they are.
_MOST_AHEAD = 32
#: Memory kept for rollbox itself and the host when the budget is read from the machine.
_RESERVE_BYTES = 512 * 2**20


@dataclass(frozen=True, kw_only=True)
class Capacity:
    """What a worker offers to the jobs placed on it at once."""

    cpus: float
    memory_bytes: int
    resources: Mapping[str, float] = field(default_factory=dict)
    #: At most this many jobs at once, whatever they need (``None``: as many as fit).
    max_jobs: int | None = None


def _cgroup_memory_max() -> int | None:
    """The memory limit of this process's cgroup (v2 or v1), when it has one."""
    try:
        line = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for entry in line:
        _, controllers, path = entry.split(":", 2)
        for candidate in (
            Path("/sys/fs/cgroup") / path.lstrip("/") / "memory.max"
            if controllers == ""
            else Path("/sys/fs/cgroup/memory") / path.lstrip("/") / "memory.limit_in_bytes",
        ):
            try:
                text = candidate.read_text().strip()
            except OSError:
                continue
            if text.isdigit() and int(text) < 2**60:
                return int(text)
    return None


def machine_capacity(
    *, cpus: float | None = None, memory_bytes: int | None = None, max_jobs: int | None = None
) -> Capacity:
    """This machine's budget: the CPUs this process may run on, and the memory available now (within its
    cgroup's limit) less a reserve for rollbox and the host; either may be given instead."""
    if memory_bytes is None:
        available = 0
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
        limit = _cgroup_memory_max()
        memory_bytes = max(0, min(available, limit if limit is not None else available) - _RESERVE_BYTES)
    return Capacity(
        cpus=float(len(os.sched_getaffinity(0))) if cpus is None else cpus, memory_bytes=memory_bytes, max_jobs=max_jobs
    )


def _fits(needs: Requirements, capacity: Capacity) -> bool:
    return (
        (capacity.max_jobs is None or capacity.max_jobs >= 1)
        and needs.cpus <= capacity.cpus
        and needs.memory_bytes <= capacity.memory_bytes
        and (not needs.resources or all(capacity.resources.get(k, 0.0) >= v for k, v in needs.resources.items()))
    )


class Placement:
    """Which worker each leased job is assigned to, what every worker has reserved now, and how many jobs each
    tenant holds. Thread-safe (the store leases on a thread of its own).

    A job is *assigned* to a worker when it is leased (``scheduled``): it waits in that worker's short queue of
    at most ``prefetch`` jobs, so that a worker never waits for the store between two jobs. It *starts* when its
    CPU, memory and resources fit what the worker has free; they stay reserved until it ends. A worker that keeps
    a queue of its own (``ahead``: a worker process, which starts the next job the moment one ends there, without
    waiting for this process to hear of it) is also handed up to that many jobs beyond what fits: they reserve
    nothing here, and the worker starts each when it fits there.

    Args:
        workers: Each worker's capacity, by name.
        quotas: The most jobs a tenant may hold (scheduled, running or grading) at once; tenants not named have
            ``default_quota`` (``None``: unbounded).
        prefetch: How many jobs may wait assigned to a worker, beyond those running there (default: as many as
            its capacity runs at once, at least 2, or as many as it ends in the time set by :meth:`pace`, when
            more: while half of them start, the other half is leased in one transaction).
        ahead: How many jobs each worker named takes beyond what fits it now, to start them itself (default 0).
    """

    def __init__(
        self,
        workers: Mapping[str, Capacity],
        *,
        quotas: Mapping[str, int] | None = None,
        default_quota: int | None = None,
        prefetch: int | None = None,
        ahead: Mapping[str, int] | None = None,
    ) -> None:
        self.quotas = dict(quotas or {})
        self.default_quota = default_quota
        self.prefetch = prefetch
        self.workers: dict[str, Capacity] = {}
        self._lock = threading.RLock()
        self._assigned: dict[int, tuple[str, str, Requirements]] = {}
        self._started: set[int] = set()
        self._used: dict[str, list[float]] = {}
        self._waiting: Counter[str] = Counter()
        self._resources: dict[str, Counter[str]] = {}
        self._tenants: Counter[str] = Counter()
        self._paced: dict[str, int] = {}
        #: Jobs each worker may be handed beyond what fits there, and those handed so (reserving nothing here).
        self._ahead: dict[str, int] = {}
        self._early: set[int] = set()
        self._early_held: Counter[str] = Counter()
        #: The CPUs of the jobs assigned to each worker that hold no reservation there yet (waiting, or ahead).
        self._queued_cpus: dict[str, float] = {}
        for name, capacity in workers.items():
            self.add_worker(name, capacity, ahead=(ahead or {}).get(name, 0))

    def add_worker(self, name: str, capacity: Capacity, *, ahead: int = 0) -> None:
        """A new worker to place jobs on (``ahead``: as for the class)."""
        with self._lock:
            self.workers[name] = capacity
            self._used[name] = [0.0, 0.0, 0.0]
            self._resources[name] = Counter()
            self._ahead[name] = ahead
            self._queued_cpus[name] = 0.0

    def remove_worker(self, name: str) -> list[int]:
        """Forget a worker (it is gone); returns the jobs assigned to it, which the caller must end."""
        with self._lock:
            self.workers.pop(name, None)
            return [job_id for job_id, (_, worker, _) in self._assigned.items() if worker == name]

    def check(self, needs: Requirements, tenant: str | None = None) -> None:
        """Refuse what could never run: more than any worker could ever hold, or a job of a ``tenant`` whose quota
        lets it hold none.

        Raises:
            Unplaceable: no worker has that much CPU, memory or resources (the message shows the largest), or the
                tenant's quota is 0.
        """
        quota = None if tenant is None else self.quota(tenant)
        if quota is not None and quota < 1:
            raise Unplaceable(
                f"tenant {tenant!r} may hold {quota} jobs at once (its quota), so its jobs could never run; raise its "
                "quota to at least 1"
            )
        with self._lock:
            capacities = list(self.workers.values())
        if not any(_fits(needs, capacity) for capacity in capacities):
            largest = max(capacities, key=lambda c: (c.memory_bytes, c.cpus), default=None)
            raise Unplaceable(
                f"a job needs {needs.cpus:g} CPUs, {needs.memory_bytes} bytes of memory and resources "
                f"{dict(needs.resources)}, more than any worker has (the largest: {largest}); lower its limits, or "
                "give the scheduler larger workers"
            )

    def set_quotas(self, quotas: Mapping[str, int]) -> None:
        """Replace the named tenants' quotas (a service's tenants file changed); jobs held now keep their place."""
        with self._lock:
            self.quotas = dict(quotas)

    def quota(self, tenant: str) -> int | None:
        """The tenant's bound on jobs held at once."""
        return self.quotas.get(tenant, self.default_quota)

    def full_tenants(self) -> set[str]:
        """Tenants at their quota: none of their jobs can be leased now."""
        with self._lock:
            return {t for t, n in self._tenants.items() if (q := self.quota(t)) is not None and n >= q}

    def _depth(self, name: str) -> int:
        if self.prefetch is not None:
            return self.prefetch
        capacity = self.workers[name]
        slots = max(1, capacity.max_jobs or math.ceil(capacity.cpus))
        return max(2, slots, min(_MOST_AHEAD * slots, self._paced.get(name, 0)))

    def pace(self, name: str, jobs: int) -> None:
        """How many jobs ``name`` ends in the time its queue should cover (the scheduler measures it): its queue
        grows to hold that many (at most :data:`_MOST_AHEAD` for each job it runs at once), so that short jobs are
        leased, and their endings committed, many to a transaction."""
        with self._lock:
            self._paced[name] = jobs

    def low(self, worker: str) -> bool:
        """Whether to lease now: nothing waits for ``worker`` any more, or the workers' queues are half empty (until
        then, the jobs that end are committed together, at the next lease)."""
        with self._lock:
            if self._waiting[worker] == 0:
                return True
            depth = sum(self._depth(name) for name in self.workers)
            return 2 * sum(self._waiting[name] for name in self.workers) <= depth

    def room(self) -> int:
        """How many more jobs the workers' queues take now (what a lease should ask for)."""
        with self._lock:
            return sum(max(0, self._depth(name) - self._waiting[name]) for name in self.workers)

    def _fits_now(self, needs: Requirements, name: str) -> bool:
        """Whether ``needs`` fits what ``name`` has free now (asked for every job placed or started: no copies)."""
        capacity, used, taken = self.workers[name], self._used[name], self._resources[name]
        return (
            (capacity.max_jobs is None or used[2] < capacity.max_jobs)
            and needs.cpus <= capacity.cpus - used[0] + 1e-9
            and needs.memory_bytes <= capacity.memory_bytes - used[1]
            and (
                not needs.resources
                or all(capacity.resources.get(k, 0.0) - taken[k] >= v for k, v in needs.resources.items())
            )
        )

    def full(self, name: str) -> bool:
        """Whether no job can start on ``name`` now: it runs as many jobs as it may at once, or has less than the
        smallest share of a CPU a job may ask for left (the scheduler asks as each job ends: without the second,
        it tried every job waiting there, in vain)."""
        with self._lock:
            capacity = self.workers.get(name)
            if capacity is None:
                return True
            if self._early_held[name] < self._ahead[name]:
                return False
            used = self._used[name]
            jobs_full = capacity.max_jobs is not None and used[2] >= capacity.max_jobs
            return jobs_full or capacity.cpus - used[0] + 1e-9 < MIN_CPUS

    def pick(self, offered: Iterable[Candidate]) -> list[tuple[int, str]]:
        """Assign what can be, in the order offered (highest priority first): each job to the worker that has room
        for it now and is least loaded, else to the one with the shortest queue among those that could ever hold
        it. Returns ``(job id, worker)`` for each job assigned.

        A job still assigned here is passed over: its lease expired while an attempt of it was still waiting or
        running here, and it is assigned again only once that attempt is dropped (its reservation is its own)."""
        placed: list[tuple[int, str]] = []
        with self._lock:
            room = sum(max(0, self._depth(name) - self._waiting[name]) for name in self.workers)
            for job in offered:
                if len(placed) == room:  # every queue is full: the rest cannot be placed
                    break
                if job.id in self._assigned:
                    continue
                quota = self.quota(job.tenant)
                if quota is not None and self._tenants[job.tenant] >= quota:
                    continue
                able = [
                    n
                    for n, capacity in self.workers.items()
                    if self._waiting[n] < self._depth(n) and _fits(job.requirements, capacity)
                ]
                if not able:
                    continue
                now = [n for n in able if self._fits_now(job.requirements, n)]
                # The least loaded counting what it was assigned and has not started: the jobs of one lease
                # spread over the workers with room, instead of queueing behind one.
                worker = (
                    min(now, key=lambda n: (self._used[n][0] + self._queued_cpus[n]) / max(self.workers[n].cpus, 1e-9))
                    if now
                    else min(able, key=lambda n: self._waiting[n])
                )
                self._assigned[job.id] = (job.tenant, worker, job.requirements)
                self._waiting[worker] += 1
                self._queued_cpus[worker] += job.requirements.cpus
                self._tenants[job.tenant] += 1
                placed.append((job.id, worker))
        return placed

    def start(self, job_id: int) -> bool:
        """Reserve what an assigned job needs on its worker, if it fits there now, or hand it over ahead (see the
        class); returns whether it did either."""
        with self._lock:
            _, worker, needs = self._assigned[job_id]
            if worker not in self.workers:
                return False
            if not self._fits_now(needs, worker):
                if self._early_held[worker] >= self._ahead[worker]:
                    return False
                self._early_held[worker] += 1
                self._early.add(job_id)
                self._waiting[worker] -= 1
                return True
            used = self._used[worker]
            used[0] += needs.cpus
            used[1] += needs.memory_bytes
            used[2] += 1
            if needs.resources:
                self._resources[worker].update(needs.resources)
            self._waiting[worker] -= 1
            self._queued_cpus[worker] -= needs.cpus
            self._started.add(job_id)
            return True

    def release(self, job_id: int) -> None:
        """The job ended, or left its worker: free what it held (a job not held is ignored)."""
        with self._lock:
            held = self._assigned.pop(job_id, None)
            if held is None:
                return
            tenant, worker, needs = held
            self._tenants[tenant] -= 1
            if job_id in self._early:
                self._early.discard(job_id)
                self._early_held[worker] -= 1
                self._queued_cpus[worker] -= needs.cpus
                return
            if job_id not in self._started:
                self._waiting[worker] -= 1
                self._queued_cpus[worker] -= needs.cpus
                return
            self._started.discard(job_id)
            used = self._used[worker]
            used[0] -= needs.cpus
            used[1] -= needs.memory_bytes
            used[2] -= 1
            if needs.resources:
                self._resources[worker].subtract(needs.resources)

    def reserved(self, worker: str) -> tuple[float, int, int]:
        """(CPUs, memory bytes, jobs) reserved on ``worker`` now."""
        with self._lock:
            used = self._used[worker]
            return used[0], int(used[1]), int(used[2])
