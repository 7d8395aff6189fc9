"""Openings, one per key at a time: however many wait for a key's pool, it opens once, and those who wait for
another key's never wait for it.

    openings: Openings[SandboxConfig, SandboxPool] = Openings()
    pool = pools.get(config) or await openings.once(config, functools.partial(open_pool, config))

An opening (an image unpacked, a large workspace copied, a pool's sandboxes started) can take seconds; one lock
over all of them would make every borrower of every key wait for the slowest.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["Openings"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Openings(Generic[K, V]):
    """Openings under way, by key.

    Each runs as a task of its own: a waiter that gives up (cancelled: a timeout, a client gone) leaves it running
    for the others, and what it opens is kept by its ``make`` (store it there, so that it is kept even when
    every waiter gave up). A failed opening is forgotten: the next waiter for its key tries again.
    """

    def __init__(self) -> None:
        self._running: dict[K, asyncio.Future[V]] = {}

    def __len__(self) -> int:
        """How many openings are under way."""
        return len(self._running)

    def __contains__(self, key: K) -> bool:
        return key in self._running

    async def once(self, key: K, make: Callable[[], Awaitable[V]]) -> V:
        """What ``make()`` returns: it is called unless an opening of ``key`` is under way, which is awaited instead.

        Raises:
            Exception: what the opening raised (to each of its waiters).
        """
        opening = self._running.get(key)
        if opening is None:
            opening = self._running[key] = asyncio.ensure_future(make())
            opening.add_done_callback(functools.partial(self._ended, key))
        # Shielded: cancelling this waiter does not cancel the opening the others wait for.
        return await asyncio.shield(opening)

    def _ended(self, key: K, opening: asyncio.Future[V]) -> None:
        if self._running.get(key) is opening:
            del self._running[key]
        if not opening.cancelled():
            opening.exception()  # its waiters were told (if any were left); nobody else need be

    async def cancel(self) -> None:
        """Cancel every opening under way and wait for each to end (an opening cancelled half way closes what it
        had opened, as ``SandboxPool.__aenter__`` does)."""
        running, self._running = list(self._running.values()), {}
        for opening in running:
            opening.cancel()
        await asyncio.gather(*running, return_exceptions=True)
