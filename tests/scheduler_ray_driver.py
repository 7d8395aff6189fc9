"""The driver of the Ray cluster test, run inside the test's network namespace: connects to the cluster, writes
what Ray says of its nodes, and runs a thousand exec jobs (and twenty that only node a may take) on it through the
scheduler, to the end.

    python tests/scheduler_ray_driver.py ADDRESS HOME JOBS
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import ray

from rollbox.scheduler import JobSpec, JobStore, Scheduler, exec_payload
from rollbox.scheduler._ray import ray_workers


def specs(count: int) -> list[JobSpec]:
    """``count`` jobs for any node, then twenty that ask for a resource only node a has."""
    anywhere = [JobSpec(kind="exec", payload=exec_payload(["sh", "-c", f"echo {i}"]), key=str(i)) for i in range(count)]
    pinned = [
        JobSpec(kind="exec", payload={**exec_payload(["echo", "a"]), "resources": {"node_a": 1}}, key=f"a{i}")
        for i in range(20)
    ]
    return anywhere + pinned


async def main(address: str, home: Path, count: int) -> None:
    ray.init(address=address, log_to_driver=False, configure_logging=False)
    deadline = time.monotonic() + 180
    while sum(n["Alive"] and n["Resources"].get("CPU", 0) > 0 for n in ray.nodes()) < 2:  # type: ignore[no-untyped-call]
        if time.monotonic() > deadline:
            raise SystemExit(f"the worker nodes did not join: {ray.nodes()}")  # type: ignore[no-untyped-call]
        await asyncio.sleep(0.2)
    workers = ray_workers(address)
    nodes = {
        "workers": {w.name: sorted(w.capacity.resources) for w in workers},
        "addresses": sorted({n["NodeManagerAddress"] for n in ray.nodes()}),  # type: ignore[no-untyped-call]
    }
    (home / "nodes.json").write_text(json.dumps(nodes))
    async with Scheduler(JobStore(home / "jobs.db"), workers=workers, home=home, lease_s=10) as scheduler:
        scheduler.submit(specs(count))
        await scheduler.run()
    ray.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))
