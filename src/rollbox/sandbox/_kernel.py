"""Small helpers for talking to the kernel's files and to blocking kernel calls without holding the event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import functools
import os
import resource
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ._errors import SandboxError
from ._shortage import host_error

__all__ = ["in_thread", "open_files_ceiling", "read_kernel_file"]

_CAP_SYS_RESOURCE = 24

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


def open_files_ceiling() -> int:
    """The most open files a sandboxed command can be allowed: ``fs.nr_open`` where rollbox may raise a hard limit
    (it has ``CAP_SYS_RESOURCE``), else rollbox's own hard limit, which nothing it starts can go past. Needs no
    descriptor (it is asked on every start, also when none is left)."""
    try:
        nr_open = _nr_open_if_raisable()
    except OSError:  # no descriptor to read it with: the start fails for that a step later, saying so
        nr_open = None
    if nr_open is not None:
        return nr_open
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


@functools.cache
def _nr_open_if_raisable() -> int | None:
    """``fs.nr_open`` when this process has ``CAP_SYS_RESOURCE`` (read once: capabilities stay), else None."""
    status = read_kernel_file("/proc/self/status")
    if int(status.split("CapEff:", 1)[1].split()[0], 16) >> _CAP_SYS_RESOURCE & 1:
        return int(read_kernel_file("/proc/sys/fs/nr_open"))
    return None


#: Threads for cgroup changes off a command's path (see ``in_thread``).
_THREADS = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="rollbox-cgroups")


async def in_thread(function: Callable[..., T], *args: object) -> T:
    """``function(*args)`` in a worker thread, for cgroup changes off a command's path. On cgroup v1 a move into a
    cgroup can wait for an RCU grace period while holding ``cgroup_mutex``, and every other cgroup change waits
    behind it: on the event loop, that would stall every sandbox of the process.

    Cancelling the caller waits for the thread if it has started, so that no cgroup change is still under way
    when the caller's cleanup (removing the sandbox's cgroups) runs.
    """
    try:
        work = _THREADS.submit(function, *args)
    except RuntimeError as exc:  # a new thread was wanted, and none could be had: the host is out of processes
        if "can't start new thread" not in str(exc):
            raise
        raise SandboxError(host_error("cannot start a thread for cgroup changes", errno.EAGAIN, "process")) from exc
    future = asyncio.wrap_future(work)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        if not work.cancel():  # it has started: let it finish
            await asyncio.wait([future])
        raise
