"""Validation's warm sandboxes: one pool per configuration, grown only as far as its borrowers ask.

Validation grades under many configurations that each serve few gradings at once: the task's own limits, the
mutants' shorter ones, and one per hash seed and clock it varies (``rollbox.judge.runners._probe``). A warm pool
of a fixed size starts all its sandboxes (each with its Python zygote, about 50 ms of CPU) when it opens, which
for most of these is more sandboxes than ever serve at once. Here a pool opens with the sandboxes its first
borrower asks for and grows, up to ``max_size``, only when the sandboxes lent and asked for, plus ``spare``,
outnumber it. A returned sandbox is reset in the background (a few milliseconds): with a spare, the next borrower
takes a ready one instead of waiting for that reset.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass

from rollbox.sandbox import Openings, ResizablePool, Sandbox, SandboxConfig

__all__ = ["DemandSandboxes"]


@dataclass
class _Pool:
    pool: ResizablePool
    #: Sandboxes held or waited for by borrowers now.
    wanted: int = 0


class DemandSandboxes:
    """A :class:`rollbox.sandbox.SandboxSource` of warm pools, one per :class:`SandboxConfig`, each as large as the
    most sandboxes borrowed from it at once plus ``spare``, up to ``max_size`` (beyond it, new ones, destroyed
    after use, as :class:`rollbox.sandbox.WarmSandboxes` gives). Close it after use."""

    def __init__(self, *, max_size: int, spare: int = 0) -> None:
        if max_size < 1:
            raise ValueError(f"a pool needs at least one sandbox, got max_size={max_size}")
        if spare < 0:
            raise ValueError(f"spare must not be negative, got {spare}")
        self.max_size, self.spare = max_size, spare
        self._pools: dict[SandboxConfig, _Pool] = {}
        #: One opening per configuration at a time; borrowers of other configurations never wait for it.
        self._openings: Openings[SandboxConfig, _Pool] = Openings()

    async def _pool(self, config: SandboxConfig, size: int) -> _Pool:
        found = self._pools.get(config)
        if found is not None:
            return found
        return await self._openings.once(config, functools.partial(self._open, config, size))

    async def _open(self, config: SandboxConfig, size: int) -> _Pool:
        pool = ResizablePool(config, size=size, warm_python=True)
        await pool.__aenter__()
        self._pools[config] = _Pool(pool)
        return self._pools[config]

    def sandbox(self, config: SandboxConfig) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        """A warm sandbox of ``config``, reset when the block ends."""
        return self._one(config)

    @contextlib.asynccontextmanager
    async def _one(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        async with self.sandboxes(1, config) as (sb,):
            yield sb

    @contextlib.asynccontextmanager
    async def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> AsyncIterator[list[Sandbox]]:
        """``count`` distinct sandboxes of ``config``, borrowed together (as
        :meth:`rollbox.sandbox.SandboxPool.sandboxes`), reset when the block ends."""
        pooled = min(count, self.max_size)
        entry = await self._pool(config, pooled)
        entry.wanted += pooled
        try:
            size = min(entry.wanted + self.spare, self.max_size)
            if entry.pool.size < size:
                entry.pool.resize(size)
            async with contextlib.AsyncExitStack() as stack:
                boxes = list(await stack.enter_async_context(entry.pool.sandboxes(pooled, avoid=avoid)))
                for _ in range(count - pooled):
                    boxes.append(await stack.enter_async_context(Sandbox(config)))
                yield boxes
        finally:
            entry.wanted -= pooled

    async def close(self) -> None:
        """Close every pool (idempotent), as :meth:`rollbox.sandbox.SandboxPool.close` closes one."""
        await self._openings.cancel()
        pools, self._pools = [p.pool for p in self._pools.values()], {}
        closed = await asyncio.gather(*(pool.close() for pool in pools), return_exceptions=True)
        errors = [error for error in closed if isinstance(error, BaseException)]
        if errors:
            raise errors[0]
