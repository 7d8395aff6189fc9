"""Elastic warm pools: one per sandbox configuration, each sized by the demand for it.

A pool's target size is the larger of what is asked for now (sandboxes out, borrowers waiting, jobs of its
configuration waiting in the queue) and what the arrival rate needs (borrows per second times how long each
sandbox is held: Little's law), between ``min_size`` and ``max_size``. A pool grows at once, sandbox by sandbox
in the background (a borrower waits for the first one ready, not for all); it shrinks only after its target has
stayed below its size for ``grace_s``, and a pool nobody used for ``grace_s`` is closed. Every resize is reported
as a ``pool.resize`` event.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from rollbox import telemetry
from rollbox.sandbox import Limits, Network, ResizablePool, Sandbox
from rollbox.sandbox.runtime import Layer

from ._model import canonical_json

__all__ = ["ElasticSandboxes", "pool_config", "pool_key"]

#: How long the queue's word (:meth:`ElasticSandboxes.expect`) counts: schedulers repeat it every second.
_HINT_S = 3.0


def pool_key(limits: Limits, network: Network | str) -> str:
    """The name of the warm pool for sandboxes of this configuration (plain JSON, so it can be stored)."""
    values = {f.name: getattr(limits, f.name) for f in fields(limits) if getattr(limits, f.name) is not None}
    return canonical_json({"limits": values, "network": Network(network).value})


def pool_config(key: str) -> tuple[Limits, Network]:
    """The configuration a :func:`pool_key` names."""
    config = json.loads(key)
    return Limits(**config["limits"]), Network(config["network"])


@dataclass
class _Elastic:
    """One configuration's pool and what is known of the demand for it."""

    pool: ResizablePool
    waiting: int = 0
    queued: int = 0
    #: When each of the recent borrows began, and how long the recent ones held their sandbox.
    arrivals: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    holds: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    #: The last time the target was at least the pool's size (demand that justified it).
    needed_at: float = field(default_factory=time.monotonic)


class ElasticSandboxes:
    """A :class:`rollbox.sandbox.SandboxSource` of elastic warm pools, one per configuration.

    Args:
        max_size: The most sandboxes one configuration's pool holds.
        min_size: The fewest an open pool keeps (a pool idle for ``grace_s`` is closed all the same).
        grace_s: How long a pool keeps sandboxes it no longer needs, for the next burst.
        warm_python: As for :class:`rollbox.sandbox.WarmSandboxes`.
        interval_s: How often targets are recomputed.
    """

    def __init__(
        self,
        *,
        max_size: int,
        min_size: int = 1,
        grace_s: float = 30.0,
        warm_python: bool = True,
        interval_s: float = 0.2,
    ) -> None:
        if not 1 <= min_size <= max_size:
            raise ValueError(f"need 1 <= min_size <= max_size, got min_size={min_size}, max_size={max_size}")
        self.max_size, self.min_size, self.grace_s = max_size, min_size, grace_s
        self.warm_python, self.interval_s = warm_python, interval_s
        self._pools: dict[tuple[Limits, Network], _Elastic] = {}
        self._opening = asyncio.Lock()
        self._control: asyncio.Task[None] | None = None
        self._queued: dict[tuple[Limits, Network], int] = {}
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
        pools, self._pools = [e.pool for e in self._pools.values()], {}
        for pool in pools:
            with contextlib.suppress(Exception):
                await pool.close()

    def sizes(self) -> dict[str, int]:
        """Each open pool's size, by :func:`pool_key`."""
        return {pool_key(limits, network): e.pool.size for (limits, network), e in self._pools.items()}

    def expect(self, queued: Mapping[str, int]) -> None:
        """Tell the pools how many jobs of each :func:`pool_key` wait in the queue, so that they grow before those
        jobs arrive (the word counts for a few seconds: repeat it). Configurations with no open pool yet get one at
        their first borrow."""
        self._queued = {pool_config(key): count for key, count in queued.items() if key}
        self._queued_at = time.monotonic()
        for config, elastic in self._pools.items():
            elastic.queued = self._queued.get(config, 0)

    async def _entry(self, limits: Limits, network: Network) -> _Elastic:
        key = (limits, Network(network))
        async with self._opening:
            if key not in self._pools:
                pool = ResizablePool(size=1, limits=limits, network=network, warm_python=self.warm_python)
                await pool.__aenter__()
                self._pools[key] = _Elastic(pool, queued=self._queued.get(key, 0))
                self._report(key, self._pools[key], "opened")
        return self._pools[key]

    @contextlib.asynccontextmanager
    async def sandboxes(
        self,
        count: int,
        *,
        limits: Limits,
        network: Network,
        avoid: str | None = None,
        runtime: Layer | None = None,
        workspace: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[list[Sandbox]]:
        """``count`` distinct warm sandboxes of this configuration, borrowed together, reset when the block ends
        (beyond ``max_size``, new ones, destroyed after). With a runtime layer, a workspace or variables (which
        the elastic pools are not keyed by yet), new sandboxes, destroyed after."""
        if runtime is not None or workspace is not None or env:
            async with contextlib.AsyncExitStack() as stack:
                made = (
                    Sandbox(limits=limits, network=network, runtime=runtime, workspace=workspace, env=env)
                    for _ in range(count)
                )
                yield [await stack.enter_async_context(sandbox) for sandbox in made]
            return
        elastic = await self._entry(limits, network)
        pool = elastic.pool
        elastic.arrivals.append(time.monotonic())
        elastic.waiting += count
        waiting = True
        try:
            wanted = min(self.max_size, pool.busy + elastic.waiting)
            if pool.idle < count and pool.size < wanted:
                pool.resize(wanted)  # grow now: a borrower never waits for the next steering round
                self._report((limits, Network(network)), elastic, "grew")
            async with contextlib.AsyncExitStack() as stack:
                boxes = list(await stack.enter_async_context(pool.sandboxes(min(count, self.max_size), avoid=avoid)))
                elastic.waiting -= count
                waiting = False
                for _ in range(count - len(boxes)):
                    boxes.append(await stack.enter_async_context(Sandbox(limits=limits, network=network)))
                began = time.monotonic()
                try:
                    yield boxes
                finally:
                    elastic.holds.append(time.monotonic() - began)
        finally:
            if waiting:
                elastic.waiting -= count

    @contextlib.asynccontextmanager
    async def sandbox(
        self,
        *,
        limits: Limits,
        network: Network,
        runtime: Layer | None = None,
        workspace: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[Sandbox]:
        """A warm sandbox of this configuration, reset when the block ends."""
        async with self.sandboxes(1, limits=limits, network=network, runtime=runtime, workspace=workspace, env=env) as (
            sb,
        ):
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
            for key, elastic in list(self._pools.items()):
                pool, target = elastic.pool, self._target(elastic, now)
                used = pool.busy or elastic.waiting or any(t > now - self.grace_s for t in elastic.arrivals)
                if not used and target <= self.min_size:  # nobody borrowed for the whole grace period
                    del self._pools[key]
                    self._report(key, elastic, "closed")
                    with contextlib.suppress(Exception):
                        await pool.close()
                elif target >= pool.size:
                    elastic.needed_at = now
                    if target > pool.size:
                        pool.resize(target)
                        self._report(key, elastic, "grew")
                elif now - elastic.needed_at >= self.grace_s:
                    pool.resize(target)
                    elastic.needed_at = now
                    self._report(key, elastic, "shrank")

    def _report(self, key: tuple[Limits, Network], elastic: _Elastic, change: str) -> None:
        telemetry.emit(
            "pool.resize",
            pool=pool_key(*key),
            change=change,
            size=0 if change == "closed" else elastic.pool.size,
            busy=elastic.pool.busy,
            waiting=elastic.waiting,
            queued=elastic.queued,
        )
