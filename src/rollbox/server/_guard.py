"""What keeps one tenant from starving the others and a retry from running twice: rate limits, a bound on
executions in flight (backpressure, answered 429 with Retry-After), and idempotency keys."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ._tenants import Tenant

if TYPE_CHECKING:
    from ._quota import Quota

__all__ = ["ADMITTED", "EXECUTION", "Guard", "IdempotencyCache", "Refused"]

#: What :class:`Guard` counts in the service's quotas for ``max_in_flight``.
EXECUTION = "execution"
#: A header that marks another worker's copy of a request that the worker it reached admitted already (a list that
#: every worker answers): its tenant's rate is taken once. The router drops it from every request from outside.
ADMITTED = "x-rollbox-admitted"


class Refused(Exception):
    """A request the service will not serve now: ``status`` (429, 409, 422) with a message and, for 429, the
    seconds after which a retry may succeed."""

    def __init__(self, status: int, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s


class Guard:
    """Each tenant's rate and executions in flight, checked in ``quota`` (over the whole service, or in this process
    alone).

    Args:
        quota: Where the tenants' token buckets and executions in flight are counted.
    """

    def __init__(self, quota: Quota) -> None:
        self.quota = quota
        #: Executions in flight in this process, by tenant (its gauges; the limit holds over ``quota``).
        self.in_flight: Counter[str] = Counter()

    async def admit(self, tenant: Tenant) -> None:
        """Take one request from the tenant's bucket.

        Raises:
            Refused: 429, the tenant is over its rate (``retry_after_s``: when a token is back); 503, the bucket
                could not be had (the first worker of several is restarting or not answering).
        """
        wait = await self.quota.admit(tenant.name, tenant.rate_per_s, tenant.burst)
        if wait is not None:
            raise Refused(
                429,
                f"tenant {tenant.name!r} is over its rate limit of {tenant.rate_per_s:g} requests/s "
                f"(burst {tenant.burst}); retry after {math.ceil(wait)} s",
                retry_after_s=wait,
            )

    @contextlib.asynccontextmanager
    async def executing(self, tenant: Tenant) -> AsyncIterator[None]:
        """Count an execution in flight for the tenant while the block runs.

        Raises:
            Refused: 429, the tenant already has ``max_in_flight`` executions running or waiting; 503, the count
                could not be had.
        """
        if not await self.quota.take(EXECUTION, tenant.name, tenant.max_in_flight):
            raise Refused(
                429,
                f"tenant {tenant.name!r} already has {tenant.max_in_flight} executions in flight (its limit, "
                "max_in_flight); retry when some have finished",
                retry_after_s=1.0,
            )
        self.in_flight[tenant.name] += 1
        try:
            yield
        finally:
            self.in_flight[tenant.name] -= 1
            await asyncio.shield(self.quota.give(EXECUTION, tenant.name))


class IdempotencyCache:
    """Responses of requests made with an ``Idempotency-Key``, kept ``ttl_s`` seconds per tenant and key.

    A retry with the same key gets the first response (waiting for it while the first is still running) instead
    of running again; the same key with another request body is refused with 422, as it is a client's bug.
    Responses that say "try again" (429, 503) are not kept, so that a retry does try again.
    """

    def __init__(self, *, ttl_s: float = 600.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: OrderedDict[tuple[str, str], tuple[str, float, asyncio.Future[tuple[int, Any]]]] = OrderedDict()

    async def run(
        self, tenant: str, key: str | None, body: bytes, call: Callable[[], Awaitable[tuple[int, Any]]]
    ) -> tuple[int, Any]:
        """``call()``'s (status, payload), or the one a request with the same key already got."""
        if key is None:
            return await call()
        if len(key) > 255:
            raise Refused(422, f"Idempotency-Key is {len(key)} characters long; at most 255 are allowed")
        now = time.monotonic()
        while self._entries and next(iter(self._entries.values()))[1] < now:
            self._entries.popitem(last=False)
        fingerprint = hashlib.sha256(body).hexdigest()
        found = self._entries.get((tenant, key))
        if found is not None:
            if found[0] != fingerprint:
                raise Refused(422, f"Idempotency-Key {key!r} was already used with another request body")
            return await asyncio.shield(found[2])
        future: asyncio.Future[tuple[int, Any]] = asyncio.get_running_loop().create_future()
        self._entries[(tenant, key)] = (fingerprint, now + self.ttl_s, future)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        try:
            result = await call()
        except BaseException as exc:
            self._entries.pop((tenant, key), None)
            if isinstance(exc, Exception):
                future.set_exception(exc)
            else:
                future.cancel()
            future.exception() if not future.cancelled() else None  # retrieved: no "never retrieved" warning
            raise
        if result[0] in (429, 503):
            self._entries.pop((tenant, key), None)
        future.set_result(result)
        return result
