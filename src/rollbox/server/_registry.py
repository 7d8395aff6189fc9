"""What lives across requests (sandboxes, episodes): each belongs to one tenant, is found only by that tenant, and
is closed when unused for the idle timeout, so that a client that went away leaves nothing behind for long."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from ._guard import Refused
from ._quota import Quota
from ._tenants import Tenant

__all__ = ["Entry", "Registry"]


class _Closeable(Protocol):
    async def close(self) -> None: ...


T = TypeVar("T", bound=_Closeable)


@dataclass
class Entry(Generic[T]):
    """One thing of a tenant's, and when it was last used."""

    id: str
    tenant: str
    thing: T
    created_at: float
    last_used_at: float
    #: The run its work belongs to.
    run: str | None = None
    busy: int = 0


class Registry(Generic[T]):
    """Every open thing of one kind, by id.

    Args:
        kind, plural: What the things are, for messages ("sandbox", "sandboxes").
        quota: Where each tenant's things open at once are counted, over the whole service.
        idle_timeout_s: Unused for this long (and not in use), a thing is closed.
        closed: Called after a thing is closed, with the entry and why ("closed", "idle", "shutdown").
    """

    def __init__(
        self,
        kind: str,
        plural: str,
        *,
        quota: Quota,
        idle_timeout_s: float,
        closed: Callable[[Entry[T], str], None] | None = None,
    ) -> None:
        self.kind, self.plural = kind, plural
        self.quota = quota
        self.idle_timeout_s = idle_timeout_s
        self._closed = closed
        self._entries: dict[str, Entry[T]] = {}

    def add(self, tenant: str, entry_id: str, thing: T, *, run: str | None = None) -> Entry[T]:
        """Keep ``thing`` as ``tenant``'s, under ``entry_id``."""
        now = time.time()
        entry = Entry(entry_id, tenant, thing, now, now, run)
        self._entries[entry_id] = entry
        return entry

    def count(self, tenant: str | None = None) -> int:
        """Things open (of one tenant)."""
        return sum(tenant is None or e.tenant == tenant for e in self._entries.values())

    @contextlib.asynccontextmanager
    async def opening(self, tenant: Tenant) -> AsyncIterator[None]:
        """Hold one of the tenant's ``max_sandboxes`` things of this kind (counted over every worker of the service)
        for the thing the block opens and adds; given back when the block fails.

        Raises:
            Refused: 429, the tenant has ``max_sandboxes`` of this kind open; 503, the count could not be had.
        """
        if not await self.quota.take(self.kind, tenant.name, tenant.max_sandboxes):
            raise Refused(
                429,
                f"tenant {tenant.name!r} already has {self.plural} open up to its limit ({tenant.max_sandboxes}, "
                f"max_sandboxes); close a {self.kind} or let an idle one expire (after {self.idle_timeout_s:g} s)",
                retry_after_s=min(self.idle_timeout_s, 60.0),
            )
        try:
            yield
        except BaseException:
            await asyncio.shield(self.quota.give(self.kind, tenant.name))
            raise

    def get(self, tenant: Tenant, entry_id: str) -> Entry[T]:
        """The tenant's thing ``entry_id``.

        Raises:
            Refused: 404, there is none of this tenant's by that id (another tenant's is not found either).
        """
        entry = self._entries.get(entry_id)
        if entry is None or entry.tenant != tenant.name:
            raise Refused(
                404, f"no {self.kind} {entry_id!r}: it was closed, expired after being idle, or never existed"
            )
        return entry

    def list(self, tenant: Tenant) -> list[Entry[T]]:
        """The tenant's things."""
        return [e for e in self._entries.values() if e.tenant == tenant.name]

    @contextlib.asynccontextmanager
    async def use(self, tenant: Tenant, entry_id: str) -> AsyncIterator[Entry[T]]:
        """The thing, marked in use (the idle reaper leaves it alone) for the block."""
        entry = self.get(tenant, entry_id)
        entry.busy += 1
        try:
            yield entry
        finally:
            entry.busy -= 1
            entry.last_used_at = time.time()

    async def close(self, tenant: Tenant, entry_id: str) -> None:
        """Close the tenant's thing (404 as :meth:`get`)."""
        await self._close(self.get(tenant, entry_id), "closed")

    async def _close(self, entry: Entry[T], why: str) -> None:
        if self._entries.pop(entry.id, None) is None:
            return
        await asyncio.shield(self.quota.give(self.kind, entry.tenant))
        with contextlib.suppress(Exception):  # one that fails to close is gone from the API either way
            await entry.thing.close()
        if self._closed is not None:
            self._closed(entry, why)

    async def reap(self, now: float) -> int:
        """Close the things idle for longer than the idle timeout; returns how many."""
        idle = [e for e in self._entries.values() if e.busy == 0 and now - e.last_used_at > self.idle_timeout_s]
        for entry in idle:
            await self._close(entry, "idle")
        return len(idle)

    async def close_all(self) -> None:
        """Close everything (the service stops)."""
        for entry in list(self._entries.values()):
            await self._close(entry, "shutdown")
