"""Blocking calls into rollbox's async episodes, for trainers whose environment API is synchronous.

One event loop runs in a daemon thread for the whole process; every blocking call runs its coroutine there, so
that the sandboxes an episode opens live in the loop that later uses and closes them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["blocking", "on_rollbox_loop"]

T = TypeVar("T")
_lock = threading.Lock()
_loops: list[asyncio.AbstractEventLoop] = []  # the one loop, once started


def _running_loop() -> asyncio.AbstractEventLoop:
    with _lock:
        if not _loops:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="rollbox-env-loop", daemon=True).start()
            _loops.append(loop)
        return _loops[0]


def blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on rollbox's background loop and wait for its result (or exception).

    Raises:
        RuntimeError: called from that loop itself (it would wait for itself forever).
    """
    loop = _running_loop()
    try:
        current = asyncio.get_running_loop()
    except RuntimeError:
        current = None
    if current is loop:
        coroutine.close()
        raise RuntimeError("a blocking rollbox call was made from rollbox's own loop; await the coroutine instead")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


async def on_rollbox_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` run on rollbox's background loop, from another loop (a trainer's): the episodes it
    touches then live on the loop that every later call, blocking or not, uses too."""
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, _running_loop()))
