"""The scheduler: leases jobs from the durable store, places them on workers, runs them, and commits each result
in the transaction that ends its lease.

    async with Scheduler(JobStore(store_target())) as scheduler:
        scheduler.submit([JobSpec(kind="exec", payload=exec_payload(["echo", "hi"]))])
        await scheduler.run()              # until every job is final

One loop does the store's work, on a thread of its own so that a disk's flush or a server's answer never holds the
event loop that the sandboxes share, one transaction a turn: the results of the jobs that ended since the last turn
and the moves of those under way are committed together, with the lease of the jobs that replace them (a group
commit). Each worker keeps a queue of leased jobs, sized to what it ends in :data:`_AHEAD_S`, so that a job starts
the moment another ends and the store is asked when half the queue is gone, not after each job. A result is
durable once its turn committed; a scheduler killed before that loses no committed result: its uncommitted ones
are computed again. Its heartbeat renews the leases of the jobs it holds, returns to the queue the jobs of
schedulers that died (at once for those on this machine, whose process is gone; when their leases expire for the
others), and ends jobs whose deadline passed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import math
import os
import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ._errors import PayloadError, SchedulerError, Unplaceable
from ._events import RunEvents, working_on
from ._home import rollbox_home, run_dir, store_target
from ._kinds import Outcome, failed_attempt, get_kind, own_cancellation, unstorable_outcome
from ._model import Job, JobSpec, Requirements, Transition, canonical_json
from ._owners import Identity, dead_owners
from ._placement import Placement
from ._retry import RetryPolicy
from ._states import JobState
from ._store import Candidate, Ending, JobStore, LeaseRequest
from ._workers import LocalWorker, Worker, WorkerLost

__all__ = ["Scheduler"]

T = TypeVar("T")
#: A lease reads at least this many candidates, and at most this many (4 for each free place in a worker's queue).
_MIN_WINDOW, _MAX_WINDOW = 8, 256
#: A worker's queue holds the jobs it ends in this time (at its recent pace): half of them are leased again, and
#: the endings of the other half committed, in one transaction about every half of it.
_AHEAD_S = 0.1


@dataclass
class _Running:
    job: Job
    task: asyncio.Task[Ending]
    #: Set when the attempt is dropped without an ending of ours (its lease is lost, or we are stopping).
    abandoned: bool = False
    #: Set when its deadline passed: it ends ``timed_out``.
    overdue: bool = False


class Scheduler:
    """Runs the jobs of a :class:`JobStore` on workers.

    Args:
        store: The job store (default: ``$ROLLBOX_DB``, else ``$ROLLBOX_HOME/jobs.db``).
        workers: Where jobs run (default: one :class:`LocalWorker` with this machine's budget, in this process;
            :func:`process_workers` runs them in worker processes of this scheduler's own, each with a share).
        quotas: The most jobs each tenant may hold at once; ``default_quota`` for the others.
        max_queued: The bound of the queue: a submission that would leave more jobs pending is refused with
            :class:`QueueFull`.
        lease_s: How long a lease lasts without a heartbeat (heartbeats come every third of it).
        retry: Backoff between the attempts of a job whose infrastructure failed.
        runs: Lease only jobs of these runs (default: any job).
        home: Where run directories (events, trajectories) go (default: ``$ROLLBOX_HOME``).
    """

    def __init__(
        self,
        store: JobStore | None = None,
        *,
        workers: Sequence[Worker] | None = None,
        quotas: Mapping[str, int] | None = None,
        default_quota: int | None = None,
        max_queued: int = 100_000,
        lease_s: float = 30.0,
        retry: RetryPolicy | None = None,
        runs: Collection[str] | None = None,
        home: Path | None = None,
    ) -> None:
        if lease_s <= 0:
            raise ValueError(f"lease_s must be positive, got {lease_s}")
        self.home = home or rollbox_home()
        self.store = store or JobStore(store_target(home=self.home))
        self.workers = {w.name: w for w in (workers or [LocalWorker()])}
        self.placement = Placement(
            {name: w.capacity for name, w in self.workers.items()},
            quotas=quotas,
            default_quota=default_quota,
            ahead={name: w.ahead for name, w in self.workers.items()},
        )
        self.max_queued, self.lease_s = max_queued, lease_s
        self.retry = retry or RetryPolicy()
        self.runs = None if runs is None else sorted(runs)
        self.identity = Identity()
        self._running: dict[int, _Running] = {}
        #: Jobs leased and assigned to each worker, waiting for room there (highest priority, then oldest, first).
        self._ready: dict[str, list[Job]] = {name: [] for name in self.workers}
        self._moves: list[Transition] = []
        self._endings: list[Ending] = []
        #: When a job last ended on each worker, and the moving average of the time between two endings there.
        self._ended_at: dict[str, float] = {}
        self._gaps: dict[str, float] = {}
        self._wake = asyncio.Event()
        #: The loop the scheduler runs on, from when it is opened.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rollbox-store")
        self._events = RunEvents(self.home)
        self._rng = random.Random()
        self._open = False
        #: Why the last worker lost was lost.
        self._lost = ""

    @property
    def owner(self) -> str:
        """This scheduler's name on its leases."""
        return self.identity.owner

    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` on the store's thread (one at a time, in order), with this context's event sinks."""
        work = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._thread, work)

    async def __aenter__(self) -> Scheduler:
        self._loop = asyncio.get_running_loop()
        await self._call(self.store.verify)  # a damaged store is refused before this scheduler writes to it
        for worker in self.workers.values():
            await worker.start()
        me = self.identity
        await self._call(self.store.register_owner, me.owner, me.host, me.pid, me.started)
        self._open = True
        with self._events.recording():
            await self._reap()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop: attempts under way are abandoned and their jobs returned to the queue at once, not counted as
        failures (a result computed meanwhile is not recorded; the job runs again). Idempotent."""
        if not self._open:
            return
        self._open = False
        with self._events.recording():
            for running in self._running.values():
                running.abandoned = True
                running.task.cancel()
            await asyncio.gather(*(r.task for r in self._running.values()), return_exceptions=True)
            self._running.clear()
            with contextlib.suppress(Exception):  # a store that cannot be written: the leases expire instead
                await self._call(self.store.release, self.owner)
                await self._call(self.store.forget_owners, [self.owner])
        for worker in self.workers.values():
            with contextlib.suppress(Exception):
                await worker.close()
        self._thread.shutdown(wait=True)
        self._events.close()

    # -- submission -------------------------------------------------------------------------------------------

    def requirements(self, spec: JobSpec) -> Requirements:
        """What ``spec`` needs, checked against the workers.

        Raises:
            PayloadError: its kind or payload is invalid.
            Unplaceable: no worker could ever hold it.
        """
        kind = get_kind(spec.kind)
        try:
            needs = kind.requirements(spec.payload)
        except SchedulerError:
            raise
        except (Exception, SystemExit, GeneratorExit) as exc:  # the kind's own fault: the submitter is told, not ended
            raise PayloadError(
                f"job kind {spec.kind!r} could not read this payload ({type(exc).__name__}: {exc}); check the "
                "payload's fields"
            ) from exc
        self.placement.check(needs, spec.tenant)
        return needs

    def submit(self, specs: JobSpec | Sequence[JobSpec]) -> list[Job]:
        """Add jobs to the store, durably, all or none; returns them (for an idempotency key already known, its
        existing job).

        Raises:
            PayloadError, Unplaceable: a job could never run (nothing is added); of a sequence, the message begins
                with the job's place in it (``jobs[3]: ...``).
            QueueFull: the queue is at its bound (nothing is added); its ``retry_after_s`` says when to come back.
            IdempotencyConflict: a key names another job (nothing is added).
        """
        if isinstance(specs, JobSpec):
            needed = [(specs, self.requirements(specs))]
        else:
            needed = []
            for index, spec in enumerate(specs):
                try:
                    needed.append((spec, self.requirements(spec)))
                except (PayloadError, Unplaceable) as exc:
                    raise type(exc)(f"jobs[{index}]: {exc}") from exc
        with self._events.recording():
            added = self.store.submit(needed, max_queued=self.max_queued)
        self._events.flush()
        self._on_loop(self._wake.set)
        return [job for job, _ in added]

    def cancel(self, job_ids: Collection[int]) -> list[int]:
        """Cancel jobs (those already final stay as they are); returns those cancelled. Their attempts under way
        stop at once (as soon as the scheduler's loop runs, when called from another thread)."""
        with self._events.recording():
            cancelled = self.store.cancel(job_ids)
        self._on_loop(self._abandon, *cancelled)
        self._events.flush()
        return cancelled

    def _on_loop(self, fn: Callable[..., object], *args: Any) -> None:
        """``fn(*args)`` on the scheduler's event loop: at once from it, else as soon as it runs. :meth:`submit` and
        :meth:`cancel` may be called from other threads (the service does), and the loop's own state (its jobs
        ready and running, placement's reservations, its tasks) is only ever touched from the loop: a cancel made
        from a thread while the loop dispatched left a job queued for a worker with no reservation there."""
        loop = self._loop
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if loop is None or loop is here or loop.is_closed():
            fn(*args)
        else:
            loop.call_soon_threadsafe(fn, *args)

    # -- the loop ---------------------------------------------------------------------------------------------

    async def run(self, *, until_idle: bool = True, tick_s: float = 0.05) -> None:
        """Run jobs: until no job (of :attr:`runs`) is left unfinished, or, with ``until_idle=False``, until
        cancelled (the jobs under way then go back to the queue when the scheduler is closed)."""
        if not self._open:
            raise RuntimeError("open the scheduler first: 'async with Scheduler(...) as scheduler:'")
        with self._events.recording(), contextlib.ExitStack() as stack:
            stack.callback(self._nothing_queued)
            beat_at = renew_at = flushed_at = 0.0
            while True:
                leased = await self._turn()
                if not self.placement.workers and not (self._running or self._endings or self._moves):
                    raise SchedulerError(
                        f"every worker of this scheduler is lost (the last: {self._lost}); its jobs are back in the "
                        "queue, for a scheduler with workers to run"
                    )
                if time.monotonic() >= beat_at:
                    renew = time.monotonic() >= renew_at  # a lease is renewed when a third of it has passed
                    await self._beat(renew=renew)
                    beat_at = time.monotonic() + min(self.lease_s / 3, 1.0)
                    renew_at = time.monotonic() + self.lease_s / 3 if renew else renew_at
                busy = self._running or self._endings or self._moves or any(self._ready.values())
                idle = until_idle and not busy and not leased
                if idle and await self._call(self.store.unfinished, self.runs) == 0:
                    self._events.flush()
                    return
                if time.monotonic() >= flushed_at + tick_s:  # the run's events reach their files every tick
                    self._events.flush()
                    flushed_at = time.monotonic()
                # A turn that leased goes on at once only while a queue is still low (its window was too small,
                # or jobs started meanwhile); else it waits for the queues to run low, so that the jobs ending
                # meanwhile are committed, and their replacements leased, many to a transaction.
                if not (leased and any(map(self.placement.low, self.placement.workers))):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), tick_s)
                self._wake.clear()

    def _nothing_queued(self) -> None:
        for worker in self.workers.values():
            worker.expect({})

    async def _turn(self) -> int:
        """One transaction (a group commit): the moves and endings gathered since the last turn, and a lease of as
        many jobs as the workers' queues have room for (a few more, so that jobs that fit nowhere now can be
        passed over for those behind them). Starts what was leased; returns how many."""
        room = self.placement.room()
        if not (self._moves or self._endings or room):
            return 0
        moves, self._moves = self._moves, []
        endings, self._endings = self._endings, []
        reserved: list[int] = []

        def pick(offered: Sequence[Candidate]) -> list[tuple[int, str]]:
            placed = self.placement.pick(offered)
            reserved.extend(job_id for job_id, _ in placed)
            return placed

        request = None
        if room:
            window = min(_MAX_WINDOW, max(_MIN_WINDOW, 4 * room))
            skip = self.placement.full_tenants()
            request = LeaseRequest(pick, window, self.lease_s, self.runs, skip)
        try:
            lost, leased = await self._call(self.store.exchange, self.owner, endings, moves, request)
        except BaseException:
            for job_id in reserved:  # nothing was leased: free what placement reserved
                self.placement.release(job_id)
            raise
        for job_id in lost:
            self._abandon(job_id)
        for job in leased:
            assert job.worker is not None
            self._ready[job.worker].append(job)
        for worker in {job.worker for job in leased if job.worker is not None}:
            self._ready[worker].sort(key=lambda job: (-job.priority, job.id))
            self._dispatch(worker)
        return len(leased)

    def _dispatch(self, worker: str) -> None:
        """Start the jobs waiting for ``worker`` that fit there now, in order (smaller ones may pass one that does
        not fit yet)."""
        ready = self._ready[worker]
        passed: list[Job] = []
        # As each job ends, this is asked: never go through the rest for nothing (nor copy it: only the head of
        # the queue that was looked at is replaced). A job whose needs did not fit is not tried again in the same
        # pass with the same needs (the jobs of a run mostly share one value).
        unfit: set[int] = set()
        looked = 0
        for job in ready:
            if self.placement.full(worker):
                break
            looked += 1
            if id(job.requirements) in unfit or not self.placement.start(job.id):
                unfit.add(id(job.requirements))
                passed.append(job)
                continue
            task = asyncio.create_task(self._attempt(job))
            self._running[job.id] = _Running(job, task)
            task.add_done_callback(functools.partial(self._done, job.id))
        ready[:looked] = passed

    async def _attempt(self, job: Job) -> Ending:
        """Run one attempt on its worker, and say how it ended."""

        def moved(state: JobState, at: float) -> None:
            # Committed with the next turn's transaction (an ending wakes the loop; a move alone waits for its tick).
            self._moves.append(Transition(job.id, job.attempts, None, state, at))

        assert job.worker is not None
        moved(JobState.RUNNING, time.time())
        with working_on(job.run_id):
            try:
                outcome = await self.workers[job.worker].run(job, moved)
            except PayloadError as exc:
                return Ending(
                    job_id=job.id, attempt=job.attempts, target=JobState.FAILED, error=str(exc), outcome="failed"
                )
            except WorkerLost as exc:  # retried elsewhere; the jobs waiting for that worker go back to the queue
                self._lost = str(exc)
                self._lose(job.worker)
                outcome = Outcome(status="infra_error", error=str(exc))
            except BaseException as exc:
                if own_cancellation(exc):
                    raise
                # The worker's or rollbox's failure, never the model's: counted and retried. SystemExit,
                # KeyboardInterrupt or GeneratorExit out of a kind included: left to escape, they ended this
                # scheduler's process, its lease was released uncounted, and the job ran again forever.
                outcome = failed_attempt(exc)
        if (why := unstorable_outcome(outcome)) is not None:  # failed as if the kind had raised: never the store's
            outcome = Outcome(status="infra_error", error=why)
        return await self._ending(job, outcome)

    async def _ending(self, job: Job, outcome: Outcome) -> Ending:
        now = time.time()
        if outcome.infra:
            delay = self.retry.delay_s(job.attempts, self._rng)
            return Ending(
                job_id=job.id,
                attempt=job.attempts,
                target=JobState.PENDING,
                status="infra_error",
                error=outcome.error or "rollbox or the host failed",
                outcome="infra_error",
                not_before=now + delay,
                at=now,
            )
        output = dict(outcome.output)
        if outcome.trajectory is not None:
            output["trajectory"] = await self._call(self._write_trajectory, job, outcome.trajectory)
        return Ending(
            job_id=job.id,
            attempt=job.attempts,
            target=JobState.COMPLETED,
            status=outcome.status,
            reward=outcome.reward,
            output=output,
            error=outcome.error,
            at=now,
        )

    def _write_trajectory(self, job: Job, trajectory: Any) -> str:
        """Write it beside the run's results (atomically: a rerun after a crash replaces it whole)."""
        path = run_dir(job.run_id, self.home) / "trajectories" / f"{job.id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(canonical_json(trajectory) + "\n", encoding="utf-8")
        partial.replace(path)
        return str(path.relative_to(run_dir(job.run_id, self.home)))

    def _done(self, job_id: int, task: asyncio.Task[Ending]) -> None:
        running = self._running.get(job_id)
        if running is None or running.task is not task or running.abandoned:
            return
        del self._running[job_id]
        self.placement.release(job_id)  # the next job may start at once; its store work waits for the next turn
        assert running.job.worker is not None
        self._dispatch(running.job.worker)
        job, now = running.job, time.time()
        self._pace(running.job.worker, now)
        if running.overdue:
            why = "its deadline passed while it ran"
            ending = Ending(
                job_id=job_id, attempt=job.attempts, target=JobState.TIMED_OUT, error=why, outcome="timed_out", at=now
            )
        elif task.cancelled():
            return
        elif (error := task.exception()) is not None:  # a bug in the attempt's own code: rollbox's failure
            outcome = "infra_error"
            ending = Ending(
                job_id=job_id,
                attempt=job.attempts,
                target=JobState.PENDING,
                status=outcome,
                error=f"{type(error).__name__}: {error}",
                outcome=outcome,
                not_before=now + self.retry.delay_s(job.attempts, self._rng),
                at=now,
            )
        else:
            ending = task.result()
        self._endings.append(ending)
        if self.placement.low(running.job.worker):  # else committed with those that end next (a group commit)
            self._wake.set()

    def _pace(self, worker: str, now: float) -> None:
        """Measure how often jobs end on ``worker``, and size its queue to that (see :data:`_AHEAD_S`)."""
        last, self._ended_at[worker] = self._ended_at.get(worker), now
        if last is None:
            return
        gap = self._gaps[worker] = 0.9 * self._gaps.get(worker, now - last) + 0.1 * (now - last)
        self.placement.pace(worker, math.ceil(_AHEAD_S / max(gap, 1e-6)))

    def _lose(self, worker: str) -> None:
        """A worker is gone: nothing more is placed on it, and the jobs waiting for it return to the queue at once
        (not counted as failures: they never started)."""
        if worker not in self.placement.workers:
            return
        self.placement.remove_worker(worker)
        now = time.time()
        for job in list(self._ready[worker]):
            self._abandon(job.id)
            self._endings.append(
                Ending(job_id=job.id, attempt=job.attempts, target=JobState.PENDING, outcome="released", at=now)
            )
        self._wake.set()

    def _abandon(self, *job_ids: int) -> None:
        """Drop these jobs' attempts without an ending of ours (their leases are gone), and start what fits."""
        for job_id in job_ids:
            running = self._running.pop(job_id, None)
            if running is not None:
                running.abandoned = True
                running.task.cancel()
            self.placement.release(job_id)
        dropped = set(job_ids)
        for ready in self._ready.values():
            ready[:] = [job for job in ready if job.id not in dropped]
        for worker in self._ready:
            self._dispatch(worker)

    async def _beat(self, *, renew: bool) -> None:
        """Renew our leases (``renew``: each renewal is a write, made when a third of the lease has passed), and
        return to the queue the jobs of those that died or whose deadline passed (every second)."""
        if renew:
            alive = {name for name, worker in self.workers.items() if worker.alive()}
            held = [job.id for name in alive for job in self._ready[name]]
            held += [job_id for job_id, r in self._running.items() if r.job.worker in alive]
            held += [end.job_id for end in self._endings]  # ended here, its ending not yet committed
            for job_id in await self._call(self.store.renew, self.owner, held, self.lease_s):
                self._abandon(job_id)
        await self._reap()
        now = time.time()
        for running in list(self._running.values()):
            if running.job.deadline is not None and running.job.deadline < now and not running.overdue:
                running.overdue = True
                running.task.cancel()
        for ready in self._ready.values():
            for job in [job for job in ready if job.deadline is not None and job.deadline < now]:
                why = "its deadline passed before it started"
                self._abandon(job.id)
                self._endings.append(
                    Ending(
                        job_id=job.id,
                        attempt=job.attempts,
                        target=JobState.TIMED_OUT,
                        error=why,
                        outcome="timed_out",
                        at=now,
                    )
                )
        queued = await self._call(self.store.pending_by_pool, self.runs)
        for worker in self.workers.values():
            worker.expect(queued)

    async def _reap(self) -> None:
        dead = dead_owners(await self._call(self.store.owners, self.identity.host), self.owner)
        await self._call(self.store.expire, owners=dead)
        if dead:
            await self._call(self.store.forget_owners, dead)
        await self._call(self.store.expire_deadlines)
