"""Admission control: a bounded queue that refuses with when to retry, idempotency keys, priorities, per-tenant
quotas, and placement that never promises more memory than a worker has; on each store (a SQLite file, a
PostgreSQL database)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from rollbox.sandbox import Limits
from rollbox.scheduler import (
    Capacity,
    IdempotencyConflict,
    Job,
    JobSpec,
    JobState,
    JobStore,
    LocalWorker,
    PayloadError,
    QueueFull,
    Scheduler,
    Unplaceable,
    exec_payload,
)
from scheduler_helpers import sync

MiB = 2**20


@contextlib.asynccontextmanager
async def scheduler(home: Path, store: str | Path, capacity: Capacity, **kw: object) -> AsyncIterator[Scheduler]:
    worker, opened = LocalWorker(capacity=capacity, grace_s=1), JobStore(store)
    try:
        async with Scheduler(opened, workers=[worker], home=home, **kw) as s:  # type: ignore[arg-type]
            yield s
    finally:
        opened.close()


def sleeper(seconds: float, **kw: object) -> JobSpec:
    return JobSpec(kind="exec", payload=exec_payload(["sleep", str(seconds)]), **kw)  # type: ignore[arg-type]


def intervals(store: JobStore, jobs: Iterable[Job]) -> list[tuple[float, float, Job]]:
    """When each job ran: from its move to running to its end."""
    spans = []
    for job in jobs:
        moves = store.transitions(job.id)
        start = next(t.at for t in moves if t.target is JobState.RUNNING)
        spans.append((start, moves[-1].at, job))
    return spans


def most_at_once(spans: list[tuple[float, float, Job]]) -> int:
    edges = sorted([(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


@sync
async def test_a_full_queue_refuses_with_when_to_retry_and_admits_nothing(
    tmp_path: Path, store_target: str | Path
) -> None:
    async with scheduler(tmp_path, store_target, Capacity(cpus=2, memory_bytes=2**30), max_queued=10) as s:
        s.submit([sleeper(0, key=f"k{i}") for i in range(8)])
        with pytest.raises(QueueFull, match=r"queue full: 8 jobs pending, bound 10, 3 more refused") as refused:
            s.submit([sleeper(0, key=f"more{i}") for i in range(3)])
        assert refused.value.retry_after_s > 0
        assert f"retry after {refused.value.retry_after_s:.0f} s" in str(refused.value)
        assert len(s.store.jobs()) == 8  # all or none
        s.submit([sleeper(0, key="k0"), sleeper(0, key="k1")])  # known keys add nothing: no room needed
        s.submit([sleeper(0, key=f"more{i}") for i in range(2)])
        await s.run()
        s.submit([sleeper(0, key=f"after{i}") for i in range(10)])  # the queue drained: room again
        assert s.store.counts()["pending"] == 10


@sync
async def test_an_idempotency_key_names_one_job_and_its_one_result(tmp_path: Path, store_target: str | Path) -> None:
    async with scheduler(tmp_path, store_target, Capacity(cpus=2, memory_bytes=2**30)) as s:
        spec = JobSpec(kind="exec", payload=exec_payload(["sh", "-c", "echo $$"]), key="once")
        (first,) = s.submit(spec)
        await s.run()
        (again,) = s.submit(spec)
        assert again.id == first.id and again.state is JobState.COMPLETED
        result = s.store.result(first.id)
        assert result is not None and result.status == "ok"
        await s.run()  # nothing to run again
        assert s.store.result(first.id) == result and len(s.store.jobs()) == 1
        with pytest.raises(IdempotencyConflict, match="'once' already names job 1 with another kind or payload"):
            s.submit(JobSpec(kind="exec", payload=exec_payload(["true"]), key="once"))
        (a, b) = s.submit([sleeper(0, key="twin"), sleeper(0, key="twin")])  # one batch, one job
        assert a.id == b.id


@sync
async def test_higher_priority_runs_first(tmp_path: Path, store_target: str | Path) -> None:
    async with scheduler(tmp_path, store_target, Capacity(cpus=1, memory_bytes=2**30, max_jobs=1)) as s:
        low = s.submit([sleeper(0.05, priority=0) for _ in range(4)])
        high = s.submit([sleeper(0.05, priority=5) for _ in range(2)])
        await s.run()
        order = [job for _, _, job in sorted(intervals(s.store, low + high), key=lambda span: span[0])]
    assert [job.priority for job in order] == [5, 5, 0, 0, 0, 0]


@sync
async def test_tenant_quotas_bound_each_tenants_jobs_at_once(tmp_path: Path, store_target: str | Path) -> None:
    capacity = Capacity(cpus=6, memory_bytes=4 * 2**30)
    async with scheduler(tmp_path, store_target, capacity, quotas={"a": 1, "b": 2}) as s:
        a = s.submit([sleeper(0.3, tenant="a") for _ in range(4)])
        b = s.submit([sleeper(0.3, tenant="b") for _ in range(4)])
        await s.run()
        spans = intervals(s.store, a + b)
    assert most_at_once([x for x in spans if x[2].tenant == "a"]) == 1
    assert most_at_once([x for x in spans if x[2].tenant == "b"]) == 2  # a's quota does not hold b back


@sync
async def test_placement_never_promises_more_memory_than_the_worker_has(
    tmp_path: Path, store_target: str | Path
) -> None:
    big = Limits(memory_bytes=400 * MiB)
    async with scheduler(tmp_path, store_target, Capacity(cpus=8, memory_bytes=1024 * MiB)) as s:
        jobs = s.submit([JobSpec(kind="exec", payload=exec_payload(["sleep", "0.3"], limits=big)) for _ in range(5)])
        small = s.submit(
            [JobSpec(kind="exec", payload=exec_payload(["sleep", "0.3"], limits=Limits(memory_bytes=64 * MiB)))]
        )
        with pytest.raises(Unplaceable, match="more than any worker has"):
            s.submit(JobSpec(kind="exec", payload=exec_payload(["true"], limits=Limits(memory_bytes=2048 * MiB))))
        await s.run()
        spans = intervals(s.store, jobs)
        both = intervals(s.store, jobs + small)
    assert most_at_once(spans) == 2  # 3 x 400 MiB would not fit in 1 GiB
    memory = [(start, end, 400 if job in jobs else 64) for start, end, job in both]
    for at in sorted(start for start, _, _ in memory):
        assert sum(m for start, end, m in memory if start <= at < end) <= 1024


@sync
async def test_an_invalid_payload_is_refused_at_submission(tmp_path: Path, store_target: str | Path) -> None:
    async with scheduler(tmp_path, store_target, Capacity(cpus=1, memory_bytes=2**30)) as s:
        with pytest.raises(PayloadError, match="unknown job kind 'nope': expected one of"):
            s.submit(JobSpec(kind="nope", payload={}))
        with pytest.raises(PayloadError, match="needs 'argv'"):
            s.submit(JobSpec(kind="exec", payload={}))
        with pytest.raises(PayloadError, match="memory_bytes"):
            s.submit(JobSpec(kind="exec", payload={"argv": ["true"], "limits": {"memory_bytes": -1}}))
        with pytest.raises(PayloadError, match="cannot load task"):
            s.submit(JobSpec(kind="grade", payload={"task": str(tmp_path / "missing"), "reference": True}))
        assert s.store.jobs() == []


#: Needs a job may not ask for: each would let placement start jobs without bound, or could never be met.
BAD_CPUS = [-100, -1, 0, 0.0, -0.0, 1e-9, float("nan"), float("inf"), float("-inf"), 10**400, "1", None, True, [1]]


@sync
async def test_a_resource_request_out_of_range_is_refused_at_submission(
    tmp_path: Path, store_target: str | Path
) -> None:
    async with scheduler(tmp_path, store_target, Capacity(cpus=2, memory_bytes=2**30), quotas={"paused": 0}) as s:
        for cpus in BAD_CPUS:
            with pytest.raises(PayloadError, match="cpus must be"):
                s.submit(JobSpec(kind="exec", payload={**exec_payload(["true"]), "cpus": cpus}))
        with pytest.raises(Unplaceable, match="more than any worker has"):
            s.submit(JobSpec(kind="exec", payload={**exec_payload(["true"]), "cpus": 3}))
        for resources in ({"gpu": -1}, {"gpu": float("nan")}, {"gpu": "1"}, {"": 1}, ["gpu"]):
            with pytest.raises(PayloadError, match="resource"):
                s.submit(JobSpec(kind="exec", payload={**exec_payload(["true"]), "resources": resources}))
        with pytest.raises(Unplaceable, match="quota"):  # a tenant that may hold no job: it would wait forever
            s.submit(JobSpec(kind="exec", payload=exec_payload(["true"]), tenant="paused"))
        for field, value in [
            ("priority", 2**63),
            ("priority", 1.5),
            ("priority", True),
            ("max_attempts", 0),
            ("max_attempts", 2**70),
            ("deadline_s", float("inf")),
            ("deadline_s", float("nan")),
            ("deadline_s", 0),
            ("deadline_s", "5"),
        ]:
            with pytest.raises(ValueError, match=field):
                JobSpec(kind="exec", payload=exec_payload(["true"]), **{field: value})  # type: ignore[arg-type]
        assert s.store.jobs() == []
        # What is left runs within the worker: six half-CPU jobs on two CPUs, never more than four at once.
        quarter = [JobSpec(kind="exec", payload={**exec_payload(["sleep", "0.3"]), "cpus": 0.5}) for _ in range(6)]
        jobs = s.submit(quarter)
        await s.run()
        assert most_at_once(intervals(s.store, jobs)) <= 4


@sync
async def test_a_job_stored_with_requirements_out_of_range_fails_instead_of_running(
    tmp_path: Path, store_target: str | Path
) -> None:
    """A store written by a rollbox that did not check requirements may hold such jobs: they end ``failed``, with
    why, and never reach a worker (a job of -100 CPUs gave its worker 100 more)."""
    async with scheduler(tmp_path, store_target, Capacity(cpus=2, memory_bytes=2**30)) as s:
        bad, good = s.submit([sleeper(0.1), sleeper(0.1)])
        with s.store.db.write() as db:
            db.execute(
                "UPDATE jobs SET requirements = ? WHERE id = ?",
                ('{"cpus":-100,"memory_bytes":0,"resources":{}}', bad.id),
            )
        assert s.store.job(bad.id).requirements.cpus == -100  # shown as stored
        await s.run()
        failed, done = s.store.result(bad.id), s.store.result(good.id)
        assert (
            failed is not None and failed.state is JobState.FAILED and "cpus must be at least" in (failed.error or "")
        )
        assert s.store.attempts(bad.id) == []
        assert done is not None and done.status == "ok"
