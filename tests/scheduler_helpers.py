"""What the scheduler's tests share: running async tests, waiting for a condition, finding sandbox processes."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from conftest import own_sandbox_processes

T = TypeVar("T")


def sync(test: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    """Run an async test in a fresh event loop (pytest sees the wrapped function's fixtures)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> T:
        return asyncio.run(test(*args, **kwargs))

    return run


async def wait_for(predicate: Callable[[], object], timeout_s: float = 60.0) -> None:
    """Poll until ``predicate()`` is true."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(0.01)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def launchers() -> list[int]:
    """Sandbox launchers (each sandbox's supervisor, outside it) started by this process."""
    return [pid for pid in own_sandbox_processes() if b"\0launch\0" in _cmdline(pid)]


def sandboxed(program: bytes) -> list[int]:
    """Processes of ``program`` running in this process's sandboxes."""
    return [pid for pid in own_sandbox_processes() if _cmdline(pid).startswith(program + b"\0")]
