"""Elastic warm pools: a pool's size follows the queue, a burst from nothing to a thousand jobs ramps up without
refusing admitted work, and idle sandboxes are reclaimed after the grace period."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rollbox import telemetry
from rollbox.sandbox import Limits
from rollbox.scheduler import Capacity, JobSpec, JobStore, LocalWorker, Scheduler, exec_payload
from scheduler_helpers import sync


class Sizes:
    """The ``pool.resize`` events seen."""

    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []

    def write(self, event: telemetry.Event) -> None:
        if event.kind == "pool.resize":
            self.events.append(dict(event.fields))

    def largest(self) -> int:
        return max((int(e["size"]) for e in self.events), default=0)  # type: ignore[call-overload]


@pytest.mark.slow
@sync
async def test_a_burst_ramps_the_pool_up_admits_everything_and_the_pool_is_reclaimed_after(tmp_path: Path) -> None:
    worker = LocalWorker(capacity=Capacity(cpus=4, memory_bytes=4 * 2**30), max_pool=8, grace_s=0.5)
    limits = Limits(timeout_s=10, memory_bytes=64 * 2**20)
    job = JobSpec(kind="exec", payload=exec_payload(["true"], limits=limits))
    sizes = Sizes()
    with telemetry.recording(sizes):
        async with Scheduler(JobStore(tmp_path / "jobs.db"), workers=[worker], home=tmp_path, max_queued=1000) as s:
            s.submit([job] * 2)
            await s.run()
            trickle = sizes.largest()
            await asyncio.sleep(1.5)  # past the grace period: the idle pool is closed
            assert sizes.events[-1]["change"] == "closed" and worker.sandboxes.sizes() == {}
            sizes.events.clear()

            s.submit([job] * 1000)  # a burst, all of it admitted at once: the queue's bound is 1000
            await s.run()
            burst = sizes.largest()
            counts = s.store.counts()
            await asyncio.sleep(3)  # shrinks after the grace period, then closes after another
    assert counts == {"completed": 1002, "infra_error": 0}
    assert {r.status for _, r in s.store.results()} == {"ok"}
    assert trickle <= 4 < burst == 8  # two jobs never needed the whole pool; a thousand did
    grew = [e for e in sizes.events if e["change"] == "grew"]
    assert any(int(e["queued"]) > 8 for e in grew)  # type: ignore[call-overload]  # the queue drove it, not only borrows
    assert sizes.events[-1]["change"] == "closed"  # reclaimed after the burst
