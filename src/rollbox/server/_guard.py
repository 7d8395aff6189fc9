"""What keeps one tenant from starving the others and a retry from running twice: rate limits, a bound on
executions in flight (backpressure, answered 429 with Retry-After), and idempotency keys."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ._tenants import Tenant

__all__ = ["Guard", "IdempotencyCache", "Refused"]


class Refused(Exception):
    """A request the service will not serve now: ``status`` (429, 409, 422) with a message and, for 429, the
    seconds after which a retry may succeed."""

    def __init__(self, status: int, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s


@dataclass
class _Bucket:
    tokens: float
    at: float


class Guard:
    """Per-tenant token buckets and in-flight counts."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self.in_flight: dict[str, int] = {}

    def admit(self, tenant: Tenant) -> None:
        """Take one request from the tenant's bucket.

        Raises:
            Refused: 429, the tenant is over its rate; ``retry_after_s`` is when a token is back.
        """
        now = self._clock()
        bucket = self._buckets.setdefault(tenant.name, _Bucket(float(tenant.burst), now))
        bucket.tokens = min(float(tenant.burst), bucket.tokens + (now - bucket.at) * tenant.rate_per_s)
        bucket.at = now
        if bucket.tokens < 1:
            wait = (1 - bucket.tokens) / tenant.rate_per_s
            raise Refused(
                429,
                f"tenant {tenant.name!r} is over its rate limit of {tenant.rate_per_s:g} requests/s "
                f"(burst {tenant.burst}); retry after {math.ceil(wait)} s",
                retry_after_s=wait,
            )
        bucket.tokens -= 1

    @contextlib.asynccontextmanager
    async def executing(self, tenant: Tenant) -> AsyncIterator[None]:
        """Count an execution in flight for the tenant while the block runs.

        Raises:
            Refused: 429, the tenant already has ``max_in_flight`` executions running or waiting.
        """
        current = self.in_flight.get(tenant.name, 0)
        if current >= tenant.max_in_flight:
            raise Refused(
                429,
                f"tenant {tenant.name!r} already has {current} executions in flight (its limit); retry when some "
                "have finished",
                retry_after_s=1.0,
            )
        self.in_flight[tenant.name] = current + 1
        try:
            yield
        finally:
            self.in_flight[tenant.name] -= 1


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
