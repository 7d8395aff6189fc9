"""An attempt is one lease of its job, by its number: what an earlier attempt reports never ends a newer one (on
each store), a scheduler that leases again a job whose lease it lost keeps running, a heartbeat renews only the
leases it names, and each attempt keeps its own end in the job's history."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from rollbox.scheduler import (
    Capacity,
    JobContext,
    JobSpec,
    JobState,
    JobStore,
    LocalWorker,
    Outcome,
    Requirements,
    Scheduler,
    register_kind,
)
from rollbox.scheduler._model import Transition
from rollbox.scheduler._store import Ending, LeaseRequest
from scheduler_helpers import sync, wait_for

_gates: dict[tuple[int, int], asyncio.Event] = {}
_started: list[tuple[int, int]] = []


def _gate(job_id: int, attempt: int) -> asyncio.Event:
    return _gates.setdefault((job_id, attempt), asyncio.Event())


class Gated:
    """Each attempt runs until the test opens its gate; its reward is its attempt's number."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        return Requirements(cpus=1)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        _started.append((context.job_id, context.attempt))
        await _gate(context.job_id, context.attempt).wait()
        return Outcome(status="ok", reward=float(context.attempt))


gated = Gated()
register_kind("gated", f"{__name__}:gated")


def _submit(store: JobStore, count: int = 1, **spec: Any) -> list[int]:
    jobs = store.submit([(JobSpec(kind="exec", payload={"i": i}, **spec), Requirements()) for i in range(count)])
    return [job.id for job, _ in jobs]


def _lease(store: JobStore, owner: str, lease_s: float = 60.0) -> dict[int, int]:
    leased = store.lease(owner, lambda offered: [(c.id, "w") for c in offered], window=100, lease_s=lease_s)
    return {job.id: job.attempts for job in leased}


def _ending(job_id: int, attempt: int, **fields: Any) -> Ending:
    return Ending(**{"job_id": job_id, "attempt": attempt, "target": JobState.COMPLETED, "status": "ok", **fields})


def test_an_earlier_attempts_report_never_ends_the_newer_one(store_target: str | Path) -> None:
    """``a`` held attempt 1, its lease was reclaimed, and ``a`` leased the job again: attempt 1's move and
    ending, however late, are dropped (attempt 1 stays ``lease_expired``) and the job is not reported lost; an
    ending of attempt 2 in the same batch, after attempt 1's, is the result. (Attempt 1's ending popped the job
    from what ``a`` held, and the newer ending was refused with it: the job stayed leased with no result.)"""
    store = JobStore(store_target)
    (job,) = _submit(store)
    assert _lease(store, "a") == {job: 1}
    assert store.expire(owners=["a"]) == [job]  # another scheduler took ``a`` for dead
    assert _lease(store, "a") == {job: 2}
    assert store.advance("a", [Transition(job, 1, None, JobState.RUNNING, time.time())]) == []
    assert store.job(job).state is JobState.SCHEDULED
    late, current = _ending(job, 1, reward=0.0), _ending(job, 2, reward=1.0)
    assert store.finish("a", [late, current]) == []
    result = store.result(job)
    assert result is not None and result.reward == 1.0
    assert [(a.number, a.outcome) for a in store.attempts(job)] == [(1, "lease_expired"), (2, "ok")]
    store.close()


def test_a_job_leased_again_in_the_transaction_that_reports_its_lost_attempt_is_held(store_target: str | Path) -> None:
    """One exchange ends attempt 1 (its lease was reclaimed: refused) and leases the job again: the job is held,
    not reported lost (the scheduler dropped what it had just leased)."""
    store = JobStore(store_target)
    (job,) = _submit(store)
    assert _lease(store, "a") == {job: 1}
    store.expire(owners=["a"])
    request = LeaseRequest(lambda offered: [(c.id, "w") for c in offered], 10, 60.0)
    lost, leased = store.exchange("a", [_ending(job, 1)], (), request)
    assert (lost, [(j.id, j.attempts) for j in leased]) == ([], [(job, 2)])
    assert store.result(job) is None and store.job(job).lease_owner == "a"
    store.close()


def test_a_heartbeat_renews_only_the_leases_it_names(store_target: str | Path) -> None:
    """A lease the owner no longer names (a job it stopped tracking, or one waiting for a worker gone) expires,
    and its job returns to the queue: renewing every lease of the owner kept such a job leased, unrun, for as long
    as its scheduler lived."""
    store = JobStore(store_target)
    kept, dropped = _submit(store, 2)
    assert _lease(store, "a", lease_s=0.5) == {kept: 1, dropped: 1}
    assert store.renew("a", [kept, 10_000], lease_s=60) == [10_000]
    time.sleep(0.7)
    assert store.expire() == [dropped]
    assert store.job(kept).lease_owner == "a" and store.job(dropped).state is JobState.PENDING
    store.close()


def test_each_attempt_keeps_its_own_end(store_target: str | Path) -> None:
    """Cancelling a pending job, or its deadline passing, leaves its last attempt's end as it was (an infra_error
    read 'ok' afterwards); a cancelled attempt reads ``cancelled``, one whose deadline passed ``timed_out``."""
    store = JobStore(store_target)
    retried, cancelled_while_leased = _submit(store, 2)
    (late,) = _submit(store, deadline_s=0.5)
    leased = _lease(store, "a")
    infra = {"target": JobState.PENDING, "status": "infra_error", "outcome": "infra_error", "error": "host died"}
    assert store.finish("a", [_ending(job, leased[job], **infra) for job in (retried, late)]) == []
    assert store.cancel([retried, cancelled_while_leased]) == [retried, cancelled_while_leased]
    time.sleep(0.6)
    assert store.expire_deadlines() == [late]
    ends = {job: [(a.outcome, a.error) for a in store.attempts(job)] for job in (retried, cancelled_while_leased, late)}
    assert ends == {
        retried: [("infra_error", "host died")],
        cancelled_while_leased: [("cancelled", "cancelled")],
        late: [("infra_error", "host died")],
    }
    store.close()


async def _scheduler_leasing_again(tmp_path: Path, *, attempt_one_ends_first: bool) -> None:
    store = JobStore(tmp_path / "jobs.db")
    worker = LocalWorker(capacity=Capacity(cpus=1, memory_bytes=2**30))
    async with Scheduler(store, workers=[worker], home=tmp_path) as scheduler:
        (job,) = [j.id for j in scheduler.submit([JobSpec(kind="gated", payload={})])]
        running = asyncio.create_task(scheduler.run())
        await wait_for(lambda: store.job(job).state is JobState.RUNNING, 30)
        other = JobStore(tmp_path / "jobs.db")
        assert other.expire(owners=[scheduler.owner]) == [job]  # another scheduler reclaimed it
        other.close()
        if attempt_one_ends_first:  # its ending reaches the turn that leases the job again
            _gate(job, 1).set()
        else:  # the job is offered again while attempt 1 still runs here: it waits for attempt 1 to be dropped
            await asyncio.sleep(0.5)
            assert _started == [(job, 1)] and store.job(job).state is JobState.PENDING
            _gate(job, 1).set()
        await wait_for(lambda: (job, 2) in _started or running.done(), 30)
        assert not running.done(), running.exception()
        _gate(job, 2).set()
        await asyncio.wait_for(running, 30)
    result = store.result(job)
    assert result is not None and result.reward == 2.0
    assert [(a.number, a.outcome) for a in store.attempts(job)] == [(1, "lease_expired"), (2, "ok")]
    store.close()


@sync
async def test_a_scheduler_leases_again_a_job_whose_lease_it_lost_and_runs_it_once(tmp_path: Path) -> None:
    """The scheduler's lease of a running job was reclaimed (it stalled, or another took it for dead); the
    attempt ends and, in the same turn, the scheduler leases the job again. It runs the new attempt to its result.
    (The turn's report of the old attempt as lost dropped the new one's placement: ``run`` died of a KeyError.)"""
    _started.clear()
    _gates.clear()
    await _scheduler_leasing_again(tmp_path, attempt_one_ends_first=True)


@sync
async def test_a_scheduler_does_not_lease_again_a_job_whose_old_attempt_still_runs_here(tmp_path: Path) -> None:
    """The lease of a job whose attempt still runs here was reclaimed: the scheduler does not lease it again
    until that attempt is dropped. (It leased attempt 2 behind attempt 1, both under one placement record: when
    attempt 1 ended, its done callback raised a KeyError, attempt 1's result was dropped and the job stayed
    leased, never run.)"""
    _started.clear()
    _gates.clear()
    await _scheduler_leasing_again(tmp_path, attempt_one_ends_first=False)


_OWNERS = ("a", "b")


class _LeaseMachine(RuleBasedStateMachine):
    """Two schedulers that stall, come back and report what they were given, however late: submits, leases,
    reclaims, cancels, renewals and endings of current and earlier attempts, in any order. After every step the
    store holds: a result only for a final job and only from its last attempt; a lease on every job in a leased
    state and on no other; exactly the last attempt open while a job is leased; and ``finish`` reporting lost only
    jobs its owner does not hold."""

    def __init__(self) -> None:
        super().__init__()
        self.home = Path(tempfile.mkdtemp(prefix="rollbox-attempts-"))
        self.store = JobStore(self.home / "jobs.db")
        self.jobs: list[int] = []
        self.given: dict[str, list[tuple[int, int]]] = {owner: [] for owner in _OWNERS}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.home, ignore_errors=True)

    @rule(count=st.integers(1, 3))
    def submit(self, count: int) -> None:
        self.jobs += _submit(self.store, count, max_attempts=4)

    @rule(owner=st.sampled_from(_OWNERS), window=st.integers(1, 3))
    def lease(self, owner: str, window: int) -> None:
        before = {job: self.store.job(job).attempts for job in self.jobs}
        leased = self.store.lease(owner, lambda offered: [(c.id, "w") for c in offered], window=window, lease_s=60)
        for job in leased:
            assert job.attempts == before[job.id] + 1 and job.lease_owner == owner
            self.given[owner].append((job.id, job.attempts))

    @rule(owner=st.sampled_from(_OWNERS))
    def reclaim(self, owner: str) -> None:
        self.store.expire(owners=[owner])

    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        if self.jobs:
            self.store.cancel([data.draw(st.sampled_from(self.jobs))])

    @rule(owner=st.sampled_from(_OWNERS), data=st.data())
    def renew(self, owner: str, data: st.DataObject) -> None:
        named = data.draw(st.lists(st.sampled_from(self.jobs), max_size=3)) if self.jobs else []
        lost = self.store.renew(owner, named, lease_s=60)
        assert set(lost) == {job for job in named if self.store.job(job).lease_owner != owner}

    @rule(owner=st.sampled_from(_OWNERS), data=st.data())
    def finish(self, owner: str, data: st.DataObject) -> None:
        if not self.given[owner]:
            return
        reports = data.draw(st.lists(st.sampled_from(self.given[owner]), min_size=1, max_size=4))
        endings = []
        for job, attempt in reports:
            if data.draw(st.booleans(), label="completes"):
                reward = float(attempt * 10 + _OWNERS.index(owner))
                endings.append(_ending(job, attempt, reward=reward, at=time.time()))
            else:
                infra = {"target": JobState.PENDING, "status": "infra_error", "outcome": "infra_error"}
                endings.append(_ending(job, attempt, at=time.time(), **infra))
        lost = self.store.finish(owner, endings)
        assert set(lost) <= {job for job, _ in reports}
        assert all(self.store.job(job).lease_owner != owner for job in lost)

    @invariant()
    def leases_attempts_and_results_agree(self) -> None:
        for job_id in self.jobs:
            job, result = self.store.job(job_id), self.store.result(job_id)
            attempts = self.store.attempts(job_id)
            leased = job.state in (JobState.SCHEDULED, JobState.RUNNING, JobState.GRADING)
            assert (job.lease_owner is not None) == leased, job
            assert [a.number for a in attempts] == list(range(1, job.attempts + 1))
            assert [a.number for a in attempts if a.ended_at is None] == ([job.attempts] if leased else [])
            assert (result is not None) == (job.state in (JobState.COMPLETED, JobState.CANCELLED)), (job, result)
            if result is not None and result.reward is not None:  # a scheduler's result: its attempt was the last
                assert int(result.reward) // 10 == job.attempts, (job, result, attempts)
                assert attempts[-1].outcome == "ok" and attempts[-1].owner == _OWNERS[int(result.reward) % 10]


_LeaseMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_leases_attempts_and_results_agree_whatever_the_order = _LeaseMachine.TestCase
