"""Worker processes: the scheduler's jobs run in processes of its own, each with its share of the machine; every
result comes back, a worker process that dies is started again and its attempts retried, a cancelled job stops
there, jobs handed over ahead never run beyond the share, and nothing outlives the scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from rollbox.scheduler import (
    Capacity,
    JobContext,
    JobSpec,
    JobState,
    JobStore,
    Outcome,
    ProcessWorker,
    Requirements,
    RetryPolicy,
    Scheduler,
    SchedulerError,
    Unplaceable,
    exec_payload,
    process_workers,
    register_kind,
)
from rollbox.scheduler._placement import Placement
from rollbox.scheduler._store import Candidate
from scheduler_helpers import sandboxed, sync, wait_for

QUICK = RetryPolicy(base_s=0.1, max_s=0.2)


class Span:
    """Sleeps ``payload['s']`` seconds; says where it ran and when."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        return Requirements(cpus=payload.get("cpus", 1.0), memory_bytes=2**20)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        began = time.time()
        await asyncio.sleep(payload["s"])
        return Outcome(status="ok", output={"pid": os.getpid(), "began": began, "ended": time.time()})


register_kind("span", f"{__name__}:Span")


@contextlib.asynccontextmanager
async def scheduler(home: Path, processes: int, cpus: float) -> AsyncIterator[Scheduler]:
    workers = process_workers(processes, Capacity(cpus=cpus, memory_bytes=2 * 2**30), max_pool=2, grace_s=1)
    async with Scheduler(JobStore(home / "jobs.db"), workers=workers, home=home, retry=QUICK) as s:
        yield s


def pid_of(worker: object) -> int:
    assert isinstance(worker, ProcessWorker) and worker._process is not None
    return worker._process.process.pid


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@sync
async def test_jobs_run_in_the_worker_processes_and_never_beyond_their_share(tmp_path: Path) -> None:
    async with scheduler(tmp_path, processes=2, cpus=2) as s:
        pids = {pid_of(w) for w in s.workers.values()}
        spans = s.submit([JobSpec(kind="span", payload={"s": 0.15, "i": i}) for i in range(10)])
        (echo,) = s.submit(JobSpec(kind="exec", payload=exec_payload(["sh", "-c", "echo hi from $0", "sandbox"])))
        with pytest.raises(Unplaceable, match="more than any worker has"):  # a job must fit one process's share
            s.submit(JobSpec(kind="span", payload={"s": 0, "cpus": 2}))
        await asyncio.wait_for(s.run(), 60)
        outputs = []
        for job in spans:
            result = s.store.result(job.id)
            assert result is not None and result.state is JobState.COMPLETED and result.status == "ok"
            outputs.append(result.output)
        exec_result = s.store.result(echo.id)
    assert exec_result is not None and exec_result.output["stdout"] == "hi from sandbox\n"
    assert pids.isdisjoint({os.getpid()}) and {o["pid"] for o in outputs} == pids
    assert {o["node"] for o in outputs} == {"local-0", "local-1"}
    # Each process holds up to two jobs beyond its one CPU, and runs one at a time all the same.
    for node in ("local-0", "local-1"):
        spans_here = sorted((o["began"], o["ended"]) for o in outputs if o["node"] == node)
        assert all(ended <= began + 0.005 for (_, ended), (began, _) in itertools.pairwise(spans_here)), spans_here


@sync
async def test_a_worker_process_that_dies_is_started_again_and_its_attempt_retried(tmp_path: Path) -> None:
    async with scheduler(tmp_path, processes=1, cpus=1) as s:
        (worker,) = s.workers.values()
        first = pid_of(worker)
        (job,) = s.submit(JobSpec(kind="exec", payload=exec_payload(["sh", "-c", "sleep 1; echo survived"])))
        running = asyncio.create_task(s.run())
        await wait_for(lambda: sandboxed(b"sleep"))
        os.kill(first, signal.SIGKILL)  # the worker process, this test's own child: the host's fault, not the job's
        await asyncio.wait_for(running, 60)
        again = pid_of(worker)
        (after,) = s.submit(JobSpec(kind="span", payload={"s": 0}))
        await asyncio.wait_for(s.run(), 60)
    result = s.store.result(job.id)
    assert result is not None and (result.status, result.output["stdout"]) == ("ok", "survived\n")
    attempts = s.store.attempts(job.id)
    assert [a.outcome for a in attempts] == ["infra_error", "ok"]
    assert f"worker process local-0 (pid {first} was killed by signal 9)" in (attempts[0].error or "")
    assert again != first and s.store.result(after.id).output["pid"] == again  # type: ignore[union-attr]
    await wait_for(lambda: not sandboxed(b"sleep"))


@sync
async def test_a_scheduler_whose_every_worker_is_lost_says_so_and_keeps_its_jobs(tmp_path: Path) -> None:
    async with scheduler(tmp_path, processes=1, cpus=1) as s:
        (worker,) = s.workers.values()
        first = pid_of(worker)
        assert isinstance(worker, ProcessWorker)
        worker._settings["max_pool"] = 0  # a process that cannot open its pools: it cannot be started again
        (job,) = s.submit(JobSpec(kind="exec", payload=exec_payload(["sh", "-c", "sleep 1; echo survived"])))
        running = asyncio.create_task(s.run())
        await wait_for(lambda: sandboxed(b"sleep"))
        os.kill(first, signal.SIGKILL)
        with pytest.raises(SchedulerError, match=r"every worker of this scheduler is lost .*could not be started"):
            await asyncio.wait_for(running, 60)
    assert s.store.job(job.id).state is JobState.PENDING
    # The first attempt died with its worker process; the second could not be started anywhere.
    assert [a.outcome for a in s.store.attempts(job.id)] == ["infra_error", "infra_error"]


@sync
async def test_a_cancelled_job_stops_in_its_worker_process(tmp_path: Path) -> None:
    async with scheduler(tmp_path, processes=1, cpus=1) as s:
        (job,) = s.submit(JobSpec(kind="exec", payload=exec_payload(["sleep", "30"])))
        running = asyncio.create_task(s.run())
        await wait_for(lambda: sandboxed(b"sleep"))
        began = time.monotonic()
        assert s.cancel([job.id]) == [job.id]
        await wait_for(lambda: not sandboxed(b"sleep"), timeout_s=10)
        await asyncio.wait_for(running, 30)
    assert time.monotonic() - began < 10
    assert s.store.job(job.id).state is JobState.CANCELLED


def test_jobs_handed_over_ahead_reserve_nothing_and_are_bounded() -> None:
    needs = Requirements(cpus=1, memory_bytes=2**20)
    placement = Placement({"w": Capacity(cpus=1, memory_bytes=2**30)}, prefetch=8, ahead={"w": 2})
    placed = placement.pick([Candidate(id=i, tenant="t", priority=0, requirements=needs) for i in range(5)])
    assert [job_id for job_id, _ in placed] == [0, 1, 2, 3, 4]
    assert [placement.start(i) for i in range(5)] == [True, True, True, False, False]
    assert placement.full("w") and placement.reserved("w") == (1.0, 2**20, 1)
    placement.release(1)  # one handed over ahead ended: another may go
    assert not placement.full("w") and placement.start(3) and not placement.start(4)
    placement.release(0)  # the one that fit ended: its place is free here
    assert placement.reserved("w") == (0.0, 0, 0) and placement.start(4) and placement.reserved("w")[2] == 1


def test_the_jobs_of_one_lease_spread_over_the_workers_with_room() -> None:
    needs = Requirements(cpus=1, memory_bytes=2**20)
    one = Capacity(cpus=1, memory_bytes=2**30)
    placement = Placement({"a": one, "b": one, "c": one}, prefetch=8)
    placed = placement.pick([Candidate(id=i, tenant="t", priority=0, requirements=needs) for i in range(4)])
    assert sorted(worker for _, worker in placed[:3]) == ["a", "b", "c"]


def test_worker_processes_end_with_their_scheduler_killed(tmp_path: Path) -> None:
    program = (
        "import asyncio, sys\n"
        "from rollbox.scheduler import Capacity\n"
        "from rollbox.scheduler._processes import process_workers\n"
        "async def main():\n"
        "    workers = process_workers(2, Capacity(cpus=2, memory_bytes=2**30))\n"
        "    for w in workers:\n"
        "        await w.start()\n"
        "    print(*(w._process.process.pid for w in workers), flush=True)\n"
        "    await asyncio.sleep(600)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "ROLLBOX_HOME": str(tmp_path)}
    with subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, env=env) as scheduler_process:
        try:
            assert scheduler_process.stdout is not None
            pids = [int(p) for p in scheduler_process.stdout.readline().split()]
            assert len(pids) == 2 and not any(map(gone, pids))
        finally:
            scheduler_process.kill()
    deadline = time.monotonic() + 30
    while not all(map(gone, pids)):
        assert time.monotonic() < deadline, f"worker processes {pids} outlived their scheduler"
        time.sleep(0.05)
