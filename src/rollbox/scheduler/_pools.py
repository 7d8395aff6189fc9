"""Elastic warm pools: one per sandbox configuration, each sized by the demand for it.

A configuration is everything a sandbox is made with: limits, network, runtime layer, workspace and variables.
The episodes and gradings of one task (its runtime, its copy-on-write workspace) reuse warm sandboxes of its own
pool, reset between uses to the task's pristine workspace; two tasks with different workspaces, layers or
variables never share one.

A pool's target size is the larger of what is asked for now (sandboxes out, borrowers waiting, jobs of its
configuration waiting in the queue) and what the arrival rate needs (borrows per second times how long each
sandbox is held: Little's law), between ``min_size`` and ``max_size``. A pool grows at once, sandbox by sandbox
in the background (a borrower waits for the first one ready, not for all); it shrinks only after its target has
stayed below its size for ``grace_s``, and a pool nobody used for ``grace_s`` is closed, as are the least recently
used idle pools when the sandboxes of all pools together would pass ``max_total`` (a run over thousands of tasks,
one pool each, keeps a bounded number warm). Every resize is reported as a ``pool.resize`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from rollbox import telemetry
from rollbox.sandbox import Openings, ResizablePool, Sandbox, SandboxConfig

from ._pool_key import pool_key

__all__ = ["ElasticSandboxes"]

#: How long the queue's word (:meth:`ElasticSandboxes.expect`) counts: schedulers repeat it every second.
_HINT_S = 3.0


@dataclass
class _Elastic:
    """One configuration's pool and what is known of the demand for it."""

    pool: ResizablePool
    #: Its :func:`pool_key`.
    name: str
    waiting: int = 0
    #: Sandboxes lent and not yet given back (the pool counts them busy until their reset ends, too).
    lent: int = 0
    queued: int = 0
    #: When each of the recent borrows began, and how long the recent ones held their sandbox.
    arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    holds: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    #: The last time the target was at least the pool's size (demand that justified it).
    needed_at: float = field(default_factory=time.monotonic)
    #: The last time a borrower came.
    used_at: float = field(default_factory=time.monotonic)
    #: Set when it is closed (a borrower that waited for it to open comes too late, and opens another).
    closed: bool = False

    @property
    def idle(self) -> bool:
        """Nobody holds or waits for one of its sandboxes."""
        return not (self.lent or self.waiting)


class ElasticSandboxes:
    """A :class:`rollbox.sandbox.SandboxSource` of elastic warm pools, one per configuration.

    Args:
        max_size: The most sandboxes one configuration's pool holds.
        max_total: The most sandboxes all pools hold together: growth ahead of demand stops there, and idle pools
            are closed to make room for a new one, least recently used first (default: twice ``max_size``).
            Borrowers are never refused for it, nor busy sandboxes taken back.
        min_size: The fewest an open pool keeps (a pool idle for ``grace_s`` is closed all the same).
        grace_s: How long a pool keeps sandboxes it no longer needs, for the next burst.
        warm_python: As for :class:`rollbox.sandbox.WarmSandboxes`.
        interval_s: How often targets are recomputed.
    """

    def __init__(
        self,
        *,
        max_size: int,
        max_total: int | None = None,
        min_size: int = 1,
        grace_s: float = 30.0,
        warm_python: bool = True,
        interval_s: float = 0.2,
    ) -> None:
        if not 1 <= min_size <= max_size:
            raise ValueError(f"need 1 <= min_size <= max_size, got min_size={min_size}, max_size={max_size}")
        self.max_size, self.min_size, self.grace_s = max_size, min_size, grace_s
        self.max_total = max_total or 2 * max_size
        if self.max_total < max_size:
            raise ValueError(f"need max_total >= max_size, got max_total={max_total}, max_size={max_size}")
        self.warm_python, self.interval_s = warm_python, interval_s
        self._pools: dict[SandboxConfig, _Elastic] = {}
        #: Pools being opened, each once however many borrowers wait for it (others' borrowers never wait for it).
        self._openings: Openings[SandboxConfig, _Elastic] = Openings()
        self._control: asyncio.Task[None] | None = None
        self._queued: dict[str, int] = {}
        self._queued_at = 0.0

    async def __aenter__(self) -> ElasticSandboxes:
        self._control = asyncio.create_task(self._steer())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop steering and close every pool (idempotent)."""
        if self._control is not None:
            self._control.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._control
            self._control = None
        await self._openings.cancel()
        pools, self._pools = [e.pool for e in self._pools.values()], {}
        for pool in pools:
            with contextlib.suppress(Exception):
                await pool.close()

    def sizes(self) -> dict[str, int]:
        """Each open pool's size, by :func:`pool_key`."""
        sizes: dict[str, int] = {}
        for elastic in self._pools.values():
            sizes[elastic.name] = sizes.get(elastic.name, 0) + elastic.pool.size
        return sizes

    def expect(self, queued: Mapping[str, int]) -> None:
        """Tell the pools how many jobs of each :func:`pool_key` wait in the queue, so that they grow before those
        jobs arrive (the word counts for a few seconds: repeat it). Configurations with no open pool yet get one at
        their first borrow."""
        self._queued = {key: count for key, count in queued.items() if key}
        self._queued_at = time.monotonic()
        for elastic in self._pools.values():
            elastic.queued = self._queued.get(elastic.name, 0)

    async def _entry(self, config: SandboxConfig) -> _Elastic:
        found = self._pools.get(config)  # a configuration's hash is kept: this is most borrows' only lookup
        if found is not None:
            return found
        return await self._openings.once(config, functools.partial(self._open, config))

    async def _open(self, config: SandboxConfig) -> _Elastic:
        name = pool_key(
            config.limits,
            config.network,
            runtime=config.runtime.spec if config.runtime else None,
            workspace=config.workspace,
            env=config.env,
            image=config.image.digest if config.image else None,
        )
        await self._make_room()
        pool = ResizablePool(config, size=1, warm_python=self.warm_python)
        await pool.__aenter__()
        elastic = self._pools[config] = _Elastic(pool, name, queued=self._queued.get(name, 0))
        self._report(elastic, "opened")
        return elastic

    async def _make_room(self) -> None:
        """Close idle pools, least recently used first, until a new one fits within ``max_total``."""
        total = sum(e.pool.size for e in self._pools.values())
        for key, elastic in sorted(self._pools.items(), key=lambda item: item[1].used_at):
            if total < self.max_total:
                return
            if elastic.idle:
                total -= elastic.pool.size
                await self._close(key, elastic)

    async def _close(self, key: SandboxConfig, elastic: _Elastic) -> None:
        if self._pools.pop(key, None) is None:  # closed meanwhile, by the other of steering and making room
            return
        elastic.closed = True
        self._report(elastic, "closed")
        with contextlib.suppress(Exception):
            await elastic.pool.close()

    @contextlib.asynccontextmanager
    async def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> AsyncIterator[list[Sandbox]]:
        """``count`` distinct warm sandboxes of ``config``, borrowed together, reset when the block ends (beyond
        ``max_size``, new ones, destroyed after)."""
        elastic = await self._entry(config)
        while elastic.closed:  # opened, then closed (idle: nobody had borrowed yet) before this borrower came back
            elastic = await self._entry(config)
        pool = elastic.pool
        elastic.used_at = time.monotonic()
        elastic.arrivals.append(elastic.used_at)
        elastic.waiting += count
        waiting = True
        try:
            wanted = min(self.max_size, pool.busy + elastic.waiting)
            if pool.idle < count and pool.size < wanted:
                pool.resize(wanted)  # grow now: a borrower never waits for the next steering round
                self._report(elastic, "grew")
            async with pool.sandboxes(min(count, self.max_size), avoid=avoid) as borrowed:
                elastic.waiting -= count
                elastic.lent += count
                waiting = False
                async with _fresh(count - len(borrowed), config) as more:
                    began = time.monotonic()
                    try:
                        yield [*borrowed, *more]
                    finally:
                        elastic.holds.append(time.monotonic() - began)
        finally:
            if waiting:
                elastic.waiting -= count
            else:  # given back: the pool resets them now, in the background
                elastic.lent -= count

    @contextlib.asynccontextmanager
    async def sandbox(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        """A warm sandbox of ``config``, reset when the block ends."""
        async with self.sandboxes(1, config) as (sb,):
            yield sb

    def _target(self, elastic: _Elastic, now: float) -> int:
        window = min(5.0, self.grace_s)  # the recent past: never longer than what the pool is kept for
        rate = sum(t > now - window for t in elastic.arrivals) / window
        hold = sum(elastic.holds) / len(elastic.holds) if elastic.holds else 0.0
        queued = elastic.queued if now - self._queued_at < _HINT_S else 0  # no fresh word: nobody is scheduling
        demand = max(elastic.pool.busy + elastic.waiting + queued, math.ceil(rate * hold))
        return max(self.min_size, min(self.max_size, demand))

    async def _steer(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            now = time.monotonic()
            total = sum(e.pool.size for e in self._pools.values())
            for key, elastic in list(self._pools.items()):
                pool, target = elastic.pool, self._target(elastic, now)
                # A pool just opened counts as used: its first borrowers are on their way.
                used = pool.busy or elastic.waiting or now - elastic.used_at < self.grace_s
                if not used and target <= self.min_size:  # nobody borrowed for the whole grace period
                    total -= pool.size
                    await self._close(key, elastic)
                elif target >= pool.size:
                    elastic.needed_at = now
                    # Growth ahead of demand (the queue's word, the arrival rate) stays within max_total across
                    # pools: many tasks queued at once must not each warm a full pool. Borrowers who are here
                    # already grow their pool as they come, past it if they must.
                    grown = min(target, pool.size + max(0, self.max_total - total))
                    if grown > pool.size:
                        total += grown - pool.size
                        pool.resize(grown)
                        self._report(elastic, "grew")
                elif now - elastic.needed_at >= self.grace_s:
                    total -= pool.size - target
                    pool.resize(target)
                    elastic.needed_at = now
                    self._report(elastic, "shrank")

    def _report(self, elastic: _Elastic, change: str) -> None:
        telemetry.emit(
            "pool.resize",
            pool=elastic.name,
            change=change,
            size=0 if change == "closed" else elastic.pool.size,
            busy=elastic.pool.busy,
            waiting=elastic.waiting,
            queued=elastic.queued,
        )


_NONE_FRESH: contextlib.nullcontext[list[Sandbox]] = contextlib.nullcontext([])


def _fresh(count: int, config: SandboxConfig) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
    """``count`` new sandboxes of ``config``, destroyed after (none: the common case, at no cost)."""
    return _NONE_FRESH if count <= 0 else _new(count, config)


@contextlib.asynccontextmanager
async def _new(count: int, config: SandboxConfig) -> AsyncIterator[list[Sandbox]]:
    async with contextlib.AsyncExitStack() as stack:
        yield [await stack.enter_async_context(Sandbox(config)) for _ in range(count)]
