"""Warm pools: sandboxes made ahead of demand, handed out at once, made as good as new before they serve again.

    async with SandboxPool(size=8, limits=Limits(timeout_s=5)) as pool:
        async with pool.sandbox(timeout_s=2) as sb:
            result = await sb.exec(["python3", "-c", "print(42)"])

Before a sandbox serves again every process of the previous use is dead (none outlives its command), its
writable tree is emptied and its SysV IPC objects removed (see :meth:`Sandbox.reset`). Its agent and namespaces
are kept only when nothing about them changed; otherwise it restarts with new ones and a new tree. An in-place
reset leaves only how much ran before (pid numbers, IPC ids and inode numbers continue); ``reset(fresh=True)``
always restarts. A sandbox that cannot be reset is destroyed and replaced. A pool of sandboxes on a workspace
(``workspace=``) gives each one back with the pristine workspace: in place when nothing in it changed, else by a
restart over a new overlay.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import os
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Protocol

from rollbox.sandbox._config import SandboxConfig
from rollbox.sandbox._errors import RollboxError, SandboxError, SandboxStateError
from rollbox.sandbox._limits import Limits, Network
from rollbox.sandbox._sandbox import Backend, Sandbox
from rollbox.sandbox._settle import settled
from rollbox.sandbox.images._image import Image
from rollbox.sandbox.runtime._store import Layer

from ._openings import Openings

__all__ = ["FreshSandboxes", "PoolExhausted", "SandboxPool", "SandboxSource", "WarmSandboxes"]


class PoolExhausted(RollboxError):
    """Every sandbox of the pool stayed busy for as long as the caller was willing to wait."""


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class SandboxPool:
    """A fixed number of warm sandboxes of one configuration.

    Args:
        config: What every sandbox of the pool is made with (:class:`SandboxConfig`), or give its fields:
        limits, network, env, runtime, workspace, image: As for :class:`Sandbox`.
        size: How many sandboxes the pool holds, all made when it opens.
        backend, warm_python: As for :class:`Sandbox`.

    Raises:
        IsolationUnavailable, SandboxError: on entry, as for :class:`Sandbox`.
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        size: int,
        limits: Limits | None = None,
        network: Network | str | None = None,
        backend: Backend = "namespaces",
        env: Mapping[str, str] | None = None,
        warm_python: bool = False,
        runtime: Layer | None = None,
        workspace: str | os.PathLike[str] | None = None,
        image: Image | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"a pool needs at least one sandbox, got size={size}")
        self.size = size
        #: What every sandbox of the pool is made with.
        self.config = SandboxConfig.of(
            config, limits=limits, network=network, env=env, runtime=runtime, workspace=workspace, image=image
        )
        self._make = functools.partial(Sandbox, self.config, backend=backend, warm_python=warm_python)
        self._make()  # validate the configuration now
        self._idle: deque[Sandbox] = deque()
        self._busy: set[Sandbox] = set()
        self._available = asyncio.Condition()
        self._state = _State.NEW
        self._lost: Exception | None = None
        #: Resets of returned sandboxes, running in the background: returning one never waits for its reset.
        self._resets: set[asyncio.Future[None]] = set()

    @property
    def idle(self) -> int:
        """Sandboxes ready to be handed out now."""
        return len(self._idle)

    def _short(self, count: int) -> bool:
        """Fewer sandboxes are left than ``count`` (replacements failed): waiting for them would be forever."""
        return len(self._idle) + len(self._busy) < count

    @property
    def busy(self) -> int:
        """Sandboxes handed out and not yet returned."""
        return len(self._busy)

    async def _new(self) -> Sandbox:
        sandbox = self._make()
        await sandbox.__aenter__()
        return sandbox

    async def __aenter__(self) -> SandboxPool:
        if self._state is not _State.NEW:
            raise SandboxStateError(f"this pool is {self._state.value}; a SandboxPool can be entered only once")
        self._state = _State.OPEN
        starting = [asyncio.ensure_future(self._new()) for _ in range(self.size)]
        try:
            self._idle.extend(await asyncio.gather(*starting))
        except BaseException as exc:
            # One failed, or the entry was cancelled: the others stop starting, and those that did start are
            # closed with the pool.
            for task in starting:
                task.cancel()
            cancelled = await settled(*starting)
            self._idle.extend(t.result() for t in starting if not t.cancelled() and t.exception() is None)
            await self.close()
            if cancelled:  # meanwhile: what the caller asked for (a timeout, say) comes first
                raise asyncio.CancelledError from exc
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Destroy every sandbox; sandboxes still handed out are destroyed when they come back (idempotent).

        Cancelling it does not stop it half way: it ends what it started, then raises ``CancelledError``.

        Raises:
            SandboxError: a sandbox could not be destroyed (every other one was).
        """
        self._state = _State.CLOSED
        # Resets under way see the pool closed when they end, and close their sandbox.
        cancelled = await settled(*self._resets)
        async with self._available:
            idle, self._idle = list(self._idle), deque()
            self._available.notify_all()
        await close_all(idle)
        if cancelled:
            raise asyncio.CancelledError

    @contextlib.asynccontextmanager
    async def sandbox(self, *, timeout_s: float | None = None) -> AsyncIterator[Sandbox]:
        """Borrow a sandbox for the duration of the ``async with`` block; it is reset when it comes back.

        Do not keep the sandbox past the block: the pool resets it in the background (leaving the block does not
        wait for that) and hands it to its next user.

        Args:
            timeout_s: How long to wait when every sandbox is busy (``None``: as long as it takes).

        Raises:
            PoolExhausted: no sandbox came free within ``timeout_s``.
            SandboxStateError: the pool is not open.
        """
        async with self.sandboxes(1, timeout_s=timeout_s) as (sandbox,):
            yield sandbox

    @contextlib.asynccontextmanager
    async def sandboxes(
        self, count: int, *, timeout_s: float | None = None, avoid: str | None = None
    ) -> AsyncIterator[list[Sandbox]]:
        """Borrow ``count`` distinct sandboxes at once, as :meth:`sandbox` borrows one.

        They are taken together when ``count`` are idle (never some while waiting for the rest, so that
        borrowers of several cannot deadlock each other). With ``avoid``, a :attr:`Sandbox.history` label, idle
        sandboxes without it are handed out first, so that fewer of them need a restart before they serve.

        Raises:
            ValueError: ``count`` is not between 1 and the pool's size.
            PoolExhausted: ``count`` sandboxes were not idle together within ``timeout_s``.
            SandboxStateError: the pool is not open.
        """
        if not 1 <= count <= self.size:
            raise ValueError(f"cannot borrow {count} sandboxes from a pool of {self.size}")
        sandboxes = await self._acquire(count, timeout_s, avoid)
        try:
            yield sandboxes
        finally:
            for sandbox in sandboxes:  # reset in the background; each stays busy until it is ready again
                reset = asyncio.ensure_future(self._release(sandbox))
                self._resets.add(reset)
                reset.add_done_callback(self._resets.discard)

    async def _acquire(self, count: int, timeout_s: float | None, avoid: str | None) -> list[Sandbox]:
        async with self._available:
            try:
                await asyncio.wait_for(
                    self._available.wait_for(
                        lambda: len(self._idle) >= count or self._state is not _State.OPEN or self._short(count)
                    ),
                    timeout_s,
                )
            except TimeoutError:
                busy = (
                    f"all {self.size} sandboxes of the pool stayed busy"
                    if count == 1
                    else f"{count} of the pool's {self.size} sandboxes were not free together"
                )
                raise PoolExhausted(
                    f"{busy} for {timeout_s} s: make the pool larger (size=...), return sandboxes sooner, or wait "
                    "longer (timeout_s=...)"
                ) from None
            if self._state is not _State.OPEN:
                raise SandboxStateError(f"this pool is {self._state.value}; open it with 'async with SandboxPool(...)'")
            if len(self._idle) < count:
                raise SandboxError(
                    f"the pool has {len(self._idle) + len(self._busy)} of its {self.size} sandboxes left, fewer than "
                    f"the {count} asked for; the last replacement failed: {self._lost}"
                )
            # The longest idle first (so that use spreads over the pool), those without ``avoid`` before the rest.
            taken = sorted(self._idle, key=lambda sb: avoid is not None and avoid in sb.history)[:count]
            for sandbox in taken:
                self._idle.remove(sandbox)
            self._busy.update(taken)
            if self._idle:
                self._available.notify_all()  # another waiter may be satisfied by what is left
            return taken

    async def _release(self, sandbox: Sandbox) -> None:
        # It stays counted as busy while it is reset or replaced: a pool in the middle of a reset has not lost it.
        ready: Sandbox | None = None
        try:
            ready = await self._renewed(sandbox)
        finally:
            async with self._available:
                self._busy.discard(sandbox)
                if ready is not None and self._state is _State.OPEN:
                    self._idle.append(ready)
                    ready = None
                self._available.notify_all()  # waiters for several sandboxes may now be satisfied, or see the loss
        if ready is not None:  # the pool closed meanwhile
            with contextlib.suppress(Exception):  # as a sandbox that failed its reset: it is gone either way
                await ready.close()

    async def _renewed(self, sandbox: Sandbox) -> Sandbox | None:
        """``sandbox`` reset, or, when it cannot be (it is closed then), a new one in its place; ``None`` when the
        pool has closed or no new one could be made (``_lost`` says why)."""
        try:
            if self._state is not _State.OPEN:
                raise SandboxStateError("the pool closed while the sandbox was out")
            await sandbox.reset()
            return sandbox
        except BaseException as exc:  # whatever went wrong, this sandbox never serves again
            with contextlib.suppress(Exception):
                await sandbox.close()
            if not isinstance(exc, Exception):
                raise
        if self._state is not _State.OPEN:
            return None
        try:
            return await self._new()  # so that the pool keeps its size
        except Exception as exc:  # OSError too (out of fds, say), not only rollbox's own errors
            self._lost = exc
            return None


async def close_all(closeables: Sequence[Sandbox | SandboxPool]) -> None:
    """Close them all at once, to the end even if cancelled meanwhile (``CancelledError`` comes after); then
    raise the first error, if any, once every one was tried."""
    closing = [asyncio.ensure_future(c.close()) for c in closeables]
    cancelled = await settled(*closing)
    errors = [error for task in closing if not task.cancelled() and (error := task.exception()) is not None]
    if cancelled:
        raise asyncio.CancelledError
    if errors:
        raise errors[0]


class SandboxSource(Protocol):
    """Where code that needs a sandbox for a while gets one: fresh each time, or warm from pools, for a
    :class:`SandboxConfig` (the whole configuration, passed on as one value)."""

    def sandbox(self, config: SandboxConfig) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        """A sandbox of ``config`` for the duration of an ``async with`` block."""
        ...

    def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        """``count`` distinct sandboxes of ``config``, borrowed together, for the duration of an ``async with``
        block; those whose :attr:`Sandbox.history` lacks the label ``avoid`` are preferred."""
        ...


class FreshSandboxes:
    """A new sandbox for every use, destroyed after it: the default.

    Args:
        backend: As for :class:`Sandbox`.
    """

    def __init__(self, *, backend: Backend = "namespaces") -> None:
        self.backend: Backend = backend

    @contextlib.asynccontextmanager
    async def sandbox(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        """A new sandbox, destroyed when the block ends."""
        async with Sandbox(config, backend=self.backend) as sb:
            yield sb

    @contextlib.asynccontextmanager
    async def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> AsyncIterator[list[Sandbox]]:
        """``count`` new sandboxes (with an empty history), destroyed when the block ends."""
        async with contextlib.AsyncExitStack() as stack:
            yield [await stack.enter_async_context(Sandbox(config, backend=self.backend)) for _ in range(count)]


class WarmSandboxes:
    """One warm :class:`SandboxPool` per :class:`SandboxConfig` (its key), made on first use.

    async with WarmSandboxes(size=4) as sandboxes:
        verdict = await grade(task, workspace, sandboxes=sandboxes)

    Args:
        size: The size of each pool.
        warm_python: As for :class:`Sandbox`, but on by default: the judge's function and check runners fork the
            zygote for every grading, and run a plain interpreter where a sandbox has none. Turn it off for pools
            that run no Python (each zygote costs about 30 ms of CPU, at the start and after every restart, and
            holds about 7 MB of memory of its own).
    """

    def __init__(self, *, size: int, warm_python: bool = True) -> None:
        self.size = size
        self.warm_python = warm_python
        self._pools: dict[SandboxConfig, SandboxPool] = {}
        #: One opening per configuration at a time; borrowers of other configurations never wait for it.
        self._openings: Openings[SandboxConfig, SandboxPool] = Openings()

    async def __aenter__(self) -> WarmSandboxes:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every pool (idempotent), as :meth:`SandboxPool.close` closes one; openings under way are
        cancelled."""
        await self._openings.cancel()
        pools, self._pools = list(self._pools.values()), {}
        await close_all(pools)

    async def _pool(self, config: SandboxConfig) -> SandboxPool:
        found = self._pools.get(config)
        if found is not None:
            return found
        return await self._openings.once(config, functools.partial(self._open, config))

    async def _open(self, config: SandboxConfig) -> SandboxPool:
        pool = SandboxPool(config, size=self.size, warm_python=self.warm_python)
        await pool.__aenter__()  # a failed opening closes what it made and stores nothing: the next borrower retries
        self._pools[config] = pool
        return pool

    @contextlib.asynccontextmanager
    async def sandbox(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        """A warm sandbox of ``config``, reset when the block ends."""
        async with (await self._pool(config)).sandbox() as sb:
            yield sb

    @contextlib.asynccontextmanager
    async def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> AsyncIterator[list[Sandbox]]:
        """``count`` distinct warm sandboxes of ``config``, borrowed together (as :meth:`SandboxPool.sandboxes`),
        reset when the block ends; beyond ``size``, the rest are new ones, destroyed when the block ends."""
        pool = await self._pool(config)
        async with contextlib.AsyncExitStack() as stack:
            boxes = list(await stack.enter_async_context(pool.sandboxes(min(count, self.size), avoid=avoid)))
            for _ in range(count - len(boxes)):
                boxes.append(await stack.enter_async_context(Sandbox(config)))
            yield boxes
