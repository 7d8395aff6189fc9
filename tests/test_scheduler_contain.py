"""Whatever a job kind raises — SystemExit, KeyboardInterrupt, GeneratorExit, a CancelledError of its own, a bare
BaseException — and whatever it returns that no store can hold (no Outcome, an output that is not JSON, a status
that is not text) is that attempt's failure: counted, retried, and after ``max_attempts`` the job completes as
``infra_error``. The scheduler's process never ends because of a job.

The scheduler runs in a process of its own (this file, run as a script), so that an exception that escaped would
end that process, as it would end ``rollbox run`` or a service.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from rollbox.scheduler import (
    Capacity,
    Job,
    JobContext,
    JobSpec,
    JobState,
    JobStore,
    LocalWorker,
    Outcome,
    Requirements,
    RetryPolicy,
    Scheduler,
    register_kind,
)

#: What each job's kind raises (``None``: nothing, it succeeds).
RAISES: dict[str, BaseException | None] = {
    "system-exit": SystemExit(7),
    "keyboard-interrupt": KeyboardInterrupt(),
    "generator-exit": GeneratorExit(),
    "cancelled-error": asyncio.CancelledError(),
    "base-exception": BaseException("a bare one"),
    "fine": None,
}


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


#: What each job's kind returns instead (the output, the status or the reward no store can hold), and what its
#: attempts' errors say.
RETURNS: dict[str, tuple[Any, str]] = {
    "none": (None, "not an Outcome"),
    "object-output": (Outcome(status="ok", output={"x": object()}), "its output is not JSON"),
    "deep-output": (Outcome(status="ok", output={"x": nested(5000)}), "its output is not JSON"),
    "status-object": (Outcome(status=object()), "its status is object"),  # type: ignore[arg-type]
    "reward-text": (Outcome(status="ok", reward="1"), "its reward is str"),  # type: ignore[arg-type]
}
ATTEMPTS = 3


class Raising:
    """A job kind that raises (or returns) what its payload names."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        return Requirements(cpus=0.5)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        await asyncio.sleep(0)
        if payload["raise"] in RETURNS:
            return RETURNS[payload["raise"]][0]  # type: ignore[no-any-return]
        raised = RAISES[payload["raise"]]
        if raised is not None:
            raise raised
        return Outcome(status="ok", output={"attempt": context.attempt})


async def _schedule(home: Path, raised: str) -> None:
    register_kind("raising", f"{Path(__file__).stem}:Raising")
    worker = LocalWorker(capacity=Capacity(cpus=2, memory_bytes=2**30), max_pool=1, grace_s=1)
    retry = RetryPolicy(base_s=0.01, max_s=0.05)
    async with Scheduler(JobStore(home / "jobs.db"), workers=[worker], home=home, retry=retry) as scheduler:
        scheduler.submit(
            [
                JobSpec(kind="raising", payload={"raise": name}, key=name, max_attempts=ATTEMPTS)
                for name in (raised, "fine")
            ]
        )
        await scheduler.run()


@pytest.mark.parametrize("raised", [*(name for name, exc in RAISES.items() if exc is not None), *RETURNS])
def test_whatever_a_kind_raises_is_counted_and_ends_as_infra_error(tmp_path: Path, raised: str) -> None:
    child = subprocess.run(
        [sys.executable, __file__, str(tmp_path), raised], capture_output=True, text=True, timeout=120, check=False
    )
    assert (child.returncode, child.stdout.strip()) == (0, "the scheduler ran every job"), child.stderr[-3000:]
    store = JobStore(tmp_path / "jobs.db")
    try:
        jobs = {job.key: job for job in store.jobs()}
        assert sorted(jobs) == sorted([raised, "fine"])
        fine = store.result(jobs["fine"].id)
        assert fine is not None and fine.status == "ok"
        job, result = jobs[raised], store.result(jobs[raised].id)
        assert job.state is JobState.COMPLETED and result is not None
        assert (result.status, result.reward) == ("infra_error", None)
        attempts = store.attempts(job.id)
        assert [a.outcome for a in attempts] == ["infra_error"] * ATTEMPTS
        said = RETURNS[raised][1] if raised in RETURNS else type(RAISES[raised]).__name__
        assert all(said in (a.error or "") for a in attempts), attempts
        assert f"gave up after attempt {ATTEMPTS}" in (result.error or "")
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(_schedule(Path(sys.argv[1]), sys.argv[2]))
    print("the scheduler ran every job")


class Pausing:
    """A job kind that waits a little, and needs no sandbox."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        return Requirements(cpus=1)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        await asyncio.sleep(0.02)
        return Outcome(status="ok")


def test_jobs_submitted_and_cancelled_from_other_threads_leave_the_scheduler_whole(
    tmp_path: Path, store_target: str | Path
) -> None:
    """The service submits and cancels from worker threads while the scheduler's loop dispatches: neither may
    touch the loop's own state from there (a cancel that raced a dispatch left a job queued for a worker with no
    place on it, and every later dispatch there failed: the run never ended). On each store: the threads share its
    one connection."""
    register_kind("pausing", f"{__name__}:Pausing")

    async def main() -> list[str]:
        failures: list[str] = []
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: failures.append(context["message"]))
        worker = LocalWorker(capacity=Capacity(cpus=8, memory_bytes=2**30), max_pool=1, grace_s=1)
        store = JobStore(store_target)
        async with Scheduler(store, workers=[worker], home=tmp_path) as scheduler:
            jobs = scheduler.submit([JobSpec(kind="pausing", payload={"i": i}) for i in range(600)])
            running = asyncio.create_task(scheduler.run())

            def cancel_and_submit(mine: list[Job]) -> None:
                for job in mine:  # in the order they run: many are running, with others ready behind them
                    scheduler.cancel([job.id])
                    time.sleep(0.001)
                scheduler.submit([JobSpec(kind="pausing", payload={"late": i}) for i in range(50)])

            await asyncio.sleep(0.2)  # the worker full, its queue too
            await asyncio.gather(*(asyncio.to_thread(cancel_and_submit, jobs[i::6]) for i in (0, 3)))
            await asyncio.wait_for(running, 120)
            await asyncio.wait_for(scheduler.run(), 120)  # what was submitted after the first run became idle
            assert scheduler.store.unfinished() == 0
        store.close()
        return failures

    assert asyncio.run(main()) == []
