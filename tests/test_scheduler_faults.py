"""Infrastructure faults are retried with backoff, each attempt recorded, and never become the model's failure;
a lease whose holder stops answering expires, and the late holder's result is refused."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import signal
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rollbox import telemetry
from rollbox.sandbox.namespaces._backend import NamespaceHost
from rollbox.scheduler import (
    Capacity,
    JobSpec,
    JobState,
    JobStore,
    LocalWorker,
    RetryPolicy,
    Scheduler,
    exec_payload,
)
from scheduler_helpers import launchers, sandboxed, sync, wait_for

CHILD = Path(__file__).with_name("scheduler_child.py")
QUICK = RetryPolicy(base_s=0.1, max_s=0.2)


@contextlib.asynccontextmanager
async def scheduler(home: Path, **kw: object) -> AsyncIterator[Scheduler]:
    worker = LocalWorker(capacity=Capacity(cpus=1, memory_bytes=2 * 2**30), max_pool=1, grace_s=1)
    async with Scheduler(JobStore(home / "jobs.db"), workers=[worker], home=home, retry=QUICK, **kw) as s:  # type: ignore[arg-type]
        yield s


@sync
async def test_a_sandbox_killed_from_outside_is_retried_and_the_retry_is_the_result(tmp_path: Path) -> None:
    async with scheduler(tmp_path) as s:
        (job,) = s.submit(JobSpec(kind="exec", payload=exec_payload(["sh", "-c", "sleep 1; echo survived"])))
        running = asyncio.create_task(s.run())
        await wait_for(lambda: sandboxed(b"sleep"))
        (launcher,) = launchers()
        os.kill(launcher, signal.SIGKILL)  # the sandbox's supervisor, outside the sandbox: the host's fault
        await asyncio.wait_for(running, 60)
    result = s.store.result(job.id)
    assert result is not None and result.state is JobState.COMPLETED
    assert (result.status, result.output["stdout"]) == ("ok", "survived\n")
    attempts = s.store.attempts(job.id)
    assert [a.outcome for a in attempts] == ["infra_error", "ok"]
    assert "launcher was killed" in (attempts[0].error or "")
    moves = [(t.source and t.source.value, t.target.value) for t in s.store.transitions(job.id)]
    assert moves == [
        (None, "pending"),
        ("pending", "scheduled"),
        ("scheduled", "running"),
        ("running", "pending"),  # retried, after a backoff
        ("pending", "scheduled"),
        ("scheduled", "running"),
        ("running", "completed"),
    ]


class _RestoreOnRetry:
    """Gives the process its descriptors back when the job returns to the queue ``after`` times."""

    def __init__(self, limits: tuple[int, int], after: int) -> None:
        self.limits, self.after, self.seen = limits, after, 0

    def write(self, event: telemetry.Event) -> None:
        if (
            event.kind == "job.transition"
            and event.fields["source"] == "running"
            and event.fields["target"] == "pending"
        ):
            self.seen += 1
            if self.seen == self.after:
                resource.setrlimit(resource.RLIMIT_NOFILE, self.limits)


@pytest.mark.parametrize("shortages", [1, 2])
@sync
async def test_a_sandbox_start_without_descriptors_is_retried_then_given_up_as_infra_error(
    tmp_path: Path, shortages: int
) -> None:
    """The host runs out of descriptors (this process's limit at 0) as the job's sandbox starts: the start really
    fails; the job is retried; with its attempts spent it completes as infra_error, never as the model's failure."""
    async with scheduler(tmp_path) as s:
        (job,) = s.submit(JobSpec(kind="exec", payload=exec_payload(["echo", "hi"]), max_attempts=2))
        NamespaceHost.get()  # set up first: it lifts the limit, once per process
        limits = resource.getrlimit(resource.RLIMIT_NOFILE)
        restore = _RestoreOnRetry(limits, shortages)
        resource.setrlimit(resource.RLIMIT_NOFILE, (0, limits[1]))
        try:
            with telemetry.recording(restore):
                await asyncio.wait_for(s.run(), 60)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    result = s.store.result(job.id)
    attempts = s.store.attempts(job.id)
    assert result is not None and result.state is JobState.COMPLETED
    assert attempts[0].outcome == "infra_error"
    assert "Too many open files" in (attempts[0].error or "")
    if shortages == 1:
        assert (result.status, result.output["stdout"]) == ("ok", "hi\n")
        assert [a.outcome for a in attempts] == ["infra_error", "ok"]
    else:
        assert (result.status, result.reward) == ("infra_error", None)
        assert [a.outcome for a in attempts] == ["infra_error", "infra_error"]
        assert (result.error or "").startswith("gave up after attempt 2")


def _holds_write_lock(path: Path) -> bool:
    db = sqlite3.connect(path, timeout=0)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        db.close()


@pytest.mark.slow
@sync
async def test_an_expired_lease_returns_the_job_and_the_late_holder_is_refused(tmp_path: Path) -> None:
    """A scheduler that stops answering (SIGSTOP: its process is alive, so only its lease can tell) loses its job
    when the lease expires; another runs it; the first, continued, finishes too, and its result is refused."""
    first = subprocess.Popen([sys.executable, str(CHILD), str(tmp_path), "run", "1", "1", "sleep 2; echo {i}"])
    try:
        store = JobStore(tmp_path / "jobs.db")
        await wait_for(lambda: store.jobs() and store.jobs()[0].state is JobState.RUNNING and sandboxed(b"sleep"), 60)
        while True:  # stopped outside a transaction, so that the store stays writable
            os.kill(first.pid, signal.SIGSTOP)
            if not _holds_write_lock(store.path):
                break
            os.kill(first.pid, signal.SIGCONT)
            await asyncio.sleep(0.01)
        async with scheduler(tmp_path, lease_s=1.0, runs=["run"]) as second:
            await asyncio.wait_for(second.run(), 60)
        os.kill(first.pid, signal.SIGCONT)
        assert first.wait(timeout=60) == 0
    finally:
        if first.poll() is None:
            os.kill(first.pid, signal.SIGKILL)
            first.wait()
    (job,) = store.jobs()
    attempts = store.attempts(job.id)
    assert [a.outcome for a in attempts] == ["lease_expired", "ok"]
    assert attempts[0].owner != attempts[1].owner
    assert "expired" in (store.transitions(job.id)[3].reason or "")
    with sqlite3.connect(store.path) as db:
        assert db.execute("SELECT COUNT(*) FROM results").fetchone() == (1,)
    result = store.result(job.id)
    assert result is not None and result.output["stdout"] == "0\n" and result.status == "ok"
