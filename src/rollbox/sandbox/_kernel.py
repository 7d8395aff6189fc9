"""Small helpers for talking to the kernel's files and to blocking kernel calls without holding the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = ["in_thread", "read_kernel_file"]

T = TypeVar("T")


def read_kernel_file(path: str | Path) -> str:
    """A small cgroup or /proc file, through a plain fd (no file object): a command reads a dozen on its way."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks).decode()


#: Threads for cgroup changes off a command's path (see ``in_thread``).
_THREADS = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="rollbox-cgroups")


async def in_thread(function: Callable[..., T], *args: object) -> T:
    """``function(*args)`` in a worker thread, for cgroup changes off a command's path. On cgroup v1 a move into a
    cgroup can wait for an RCU grace period while holding ``cgroup_mutex``, and every other cgroup change waits
    behind it: on the event loop, that would stall every sandbox of the process.

    Cancelling the caller waits for the thread if it has started, so that no cgroup change is still under way
    when the caller's cleanup (removing the sandbox's cgroups) runs.
    """
    work = _THREADS.submit(function, *args)
    future = asyncio.wrap_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if not work.cancel():  # it has started: let it finish
            await asyncio.wait([future])
        raise
