"""A warm pool whose size can change while it is open: the hook elastic pools (the scheduler's) size it with.

async with ResizablePool(size=1, limits=limits) as pool:
    pool.resize(8)        # seven more start in the background; borrowers wait for them, not for all
    pool.resize(2)        # idle ones beyond two are destroyed now, busy ones when they come back
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from rollbox.sandbox._errors import SandboxStateError
from rollbox.sandbox._sandbox import Sandbox

from ._pool import SandboxPool, _State, close_all

__all__ = ["ResizablePool"]


class ResizablePool(SandboxPool):
    """A :class:`SandboxPool` with :meth:`resize`."""

    _starting = 0

    @property
    def starting(self) -> int:
        """Sandboxes being made for the pool now (after a :meth:`resize` up, or as replacements)."""
        return self._starting

    def _short(self, count: int) -> bool:
        # Those still starting will come: waiting for them is not waiting forever.
        return len(self._idle) + len(self._busy) + self._starting < count

    def resize(self, size: int) -> None:
        """Make the pool hold ``size`` sandboxes: new ones start in the background and are handed out as each is
        ready; idle ones beyond ``size`` are destroyed in the background, busy ones when they are returned.

        Raises:
            ValueError: ``size`` is below 1.
            SandboxStateError: the pool is not open.
        """
        if size < 1:
            raise ValueError(f"a pool needs at least one sandbox, got size={size}")
        if self._state is not _State.OPEN:
            raise SandboxStateError(f"this pool is {self._state.value}; resize an open pool")
        self.size = size
        for _ in range(size - len(self._idle) - len(self._busy) - self._starting):
            self._starting += 1
            self._background(self._grow())
        self._background(self._trim())

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._resets.add(task)  # close() waits for these as for resets
        task.add_done_callback(self._resets.discard)

    async def _grow(self) -> None:
        made: Sandbox | None = None
        try:
            made = await self._new()
        except Exception as exc:  # OSError too (out of descriptors): borrowers waiting for it see the loss
            self._lost = exc
        finally:
            async with self._available:
                self._starting -= 1
                if made is not None and self._state is _State.OPEN:
                    self._idle.append(made)
                    made = None
                self._available.notify_all()
        if made is not None:  # the pool closed meanwhile
            with contextlib.suppress(Exception):
                await made.close()
        await self._trim()

    async def _release(self, sandbox: Sandbox) -> None:
        await super()._release(sandbox)
        await self._trim()

    async def _trim(self) -> None:
        """Destroy idle sandboxes beyond the size (the most recently returned first: the longest idle serve next)."""
        async with self._available:
            excess = len(self._idle) + len(self._busy) + self._starting - self.size
            doomed = [self._idle.pop() for _ in range(min(max(0, excess), len(self._idle)))]
        if doomed:
            with contextlib.suppress(Exception):  # a sandbox that fails its close is gone either way
                await close_all(doomed)
