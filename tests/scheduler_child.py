"""A scheduler in a process of its own, for tests that kill it: submits a run's jobs (idempotently: a restarted
child, or another child, adds nothing) and runs them to the end, on the job store that ``$ROLLBOX_DB`` names
(default ``HOME/jobs.db``).

    python tests/scheduler_child.py HOME RUN_ID JOBS [LEASE_S] [COMMAND]
    python tests/scheduler_child.py HOME RUN_ID JOBS LEASE_S --episodes TASK_DIR...

Episode jobs go round the tasks, with the reference and noop policies in turn.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from rollbox.scheduler import (
    Capacity,
    JobSpec,
    JobStore,
    LocalWorker,
    Scheduler,
    episode_payload,
    exec_payload,
    store_target,
)


def episodes(run_id: str, count: int, tasks: list[str]) -> list[JobSpec]:
    """The run's episode jobs."""
    return [
        JobSpec(
            kind="episode",
            payload={**episode_payload(tasks[i % len(tasks)], ("reference", "noop")[i // len(tasks) % 2]), "i": i},
            key=f"{run_id}/{i}",
            run_id=run_id,
        )
        for i in range(count)
    ]


def specs(run_id: str, count: int, command: str) -> list[JobSpec]:
    """The run's jobs: each prints what only it would print, to stdout and stderr."""
    return [
        JobSpec(
            kind="exec",
            payload=exec_payload(["sh", "-c", command.replace("{i}", str(i))]),
            key=f"{run_id}/{i}",
            run_id=run_id,
        )
        for i in range(count)
    ]


async def main(home: Path, run_id: str, jobs: list[JobSpec], lease_s: float) -> None:
    worker = LocalWorker(capacity=Capacity(cpus=2, memory_bytes=4 * 2**30), grace_s=5)
    store = JobStore(store_target(home=home))
    async with Scheduler(store, workers=[worker], home=home, lease_s=lease_s, runs=[run_id]) as s:
        s.submit(jobs)
        await s.run()


if __name__ == "__main__":
    home, run_id, count = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    lease_s = float(sys.argv[4]) if len(sys.argv) > 4 else 30.0
    if sys.argv[5:6] == ["--episodes"]:
        jobs = episodes(run_id, count, sys.argv[6:])
    else:
        jobs = specs(run_id, count, sys.argv[5] if len(sys.argv) > 5 else "echo $(({i} * {i})); echo job {i} >&2")
    asyncio.run(main(home, run_id, jobs, lease_s))
