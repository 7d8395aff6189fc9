"""CPU pressure: busy processes, each in a sandbox (and so a cgroup and session) of its own, beside the runs.

A test that passes only when its process has a CPU to itself (a wall-clock bound, a race it usually wins) fails
while they run. The kernel shares CPU time between cgroups (and sessions) before processes, so pressure from
separate sandboxes is felt however many processes the run under test has.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator

from rollbox.sandbox import Limits, Sandbox

__all__ = ["cpu_pressure", "pressure_processes"]

_BUSY = "while True:\n    pass\n"


def pressure_processes() -> int:
    """How many busy processes make pressure here: four for each CPU this process may run on."""
    return 4 * len(os.sched_getaffinity(0))


@contextlib.asynccontextmanager
async def cpu_pressure(processes: int | None = None, *, longest_s: float = 3600.0) -> AsyncIterator[int]:
    """Keep ``processes`` busy loops running (default: :func:`pressure_processes`) while the block runs, for at
    most ``longest_s``; yields how many run. Every loop is killed when the block ends, however it ends.

    Raises:
        SandboxError, IsolationUnavailable: a sandbox could not be made.
    """
    count = pressure_processes() if processes is None else processes
    limits = Limits(timeout_s=longest_s, cpu_time_s=longest_s * 4, memory_bytes=64 * 1024 * 1024, pids=4)
    async with contextlib.AsyncExitStack() as stack:
        sandboxes = [await stack.enter_async_context(Sandbox(limits=limits)) for _ in range(count)]
        loops = [asyncio.create_task(sb.exec(["python3", "-c", _BUSY])) for sb in sandboxes]
        try:
            await asyncio.sleep(0.2)  # let every loop start before the runs under pressure do
            yield count
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)
