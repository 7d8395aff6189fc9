"""Tenant limits counted over the whole service, whichever worker serves a request: ``max_sandboxes`` (sandboxes,
and episodes, open at once; each kind counted apart), ``max_in_flight`` (executions running or waiting at once) and
the rate (``rate_per_s``, ``burst``: one token bucket per tenant).

One process holds the counts and the buckets (:class:`Counts`): the service's only worker, which counts in memory
as before, or the first of several. Any other worker asks the first over its Unix socket (``QUOTA_PATH``) before it
serves a request with a key (its tenant's bucket), runs something or opens a sandbox or an episode, and tells it
when one ends. A worker that cannot reach the first refuses (503) rather than let a tenant past its limits: it waits
only for a first worker that is starting (up to the ask's timeout), never for one known dead. The first worker
forgets what a worker that died held, and a first worker that restarted learns what each other worker holds before
it counts that worker's next request (its buckets start full). So does a first worker that failed to answer a
question (it stalled past the ask's timeout, or its answer was lost): it may still count that question when it
resumes, so the worker tells it again all that it holds, once the questions it has in flight are answered, before it
asks anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._forward import PeerGone, forward
from ._guard import Refused
from ._peers import Owner, Peers

__all__ = ["QUOTA_PATH", "Counts", "Quota"]

#: Where the first worker answers the others' questions about quotas (only over its Unix socket).
QUOTA_PATH = "/_rollbox/quota"
#: The longest a worker waits for the first worker's answer before it refuses the request (503).
_ASK_TIMEOUT_S = 5.0
#: How often a worker looks again for a first worker that is not ready yet.
_FIRST_POLL_S = 0.05

#: What a worker holds: how many things of each (kind, tenant).
Held = Counter[tuple[str, str]]


@dataclass
class _Bucket:
    tokens: float
    at: float


class Counts:
    """What each worker of the service holds, by kind and tenant, and each tenant's token bucket: where every
    quota is checked.

    Args:
        clock: The buckets' clock (seconds).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._held: dict[Owner, Held] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._clock = clock

    def admit(self, tenant: str, rate_per_s: float, burst: int) -> float | None:
        """Take one request from ``tenant``'s bucket (``burst`` tokens, refilled at ``rate_per_s``); ``None`` when
        taken, else the seconds until a token is back."""
        now = self._clock()
        bucket = self._buckets.setdefault(tenant, _Bucket(float(burst), now))
        bucket.tokens = min(float(burst), bucket.tokens + (now - bucket.at) * rate_per_s)
        bucket.at = now
        if bucket.tokens < 1:
            return (1 - bucket.tokens) / rate_per_s
        bucket.tokens -= 1
        return None

    def take(self, holder: Owner, kind: str, tenant: str, limit: int) -> bool:
        """Count one more ``kind`` of ``tenant``'s held by ``holder``, unless the tenant holds ``limit`` already
        (over every worker); returns whether it was counted."""
        if sum(held[(kind, tenant)] for held in self._held.values()) >= limit:
            return False
        self._held.setdefault(holder, Counter())[(kind, tenant)] += 1
        return True

    def give(self, holder: Owner, kind: str, tenant: str) -> None:
        """Count one ``kind`` of ``tenant``'s fewer for ``holder``."""
        held = self._held.get(holder)
        if held is not None and held[(kind, tenant)] > 0:
            held[(kind, tenant)] -= 1

    def sync(self, holder: Owner, held: Held) -> None:
        """Take ``held`` as all that ``holder`` holds (what a worker says to a first worker that restarted)."""
        self._held[holder] = held

    def forget_dead(self, peers: Peers) -> None:
        """Forget what the workers that died held (their sandboxes and episodes died with them)."""
        for holder in list(self._held):
            current = peers.current(holder.slot)
            if peers.death(holder) is not None or (current is not None and current.generation > holder.generation):
                del self._held[holder]

    def answer(self, holder: Owner, body: bytes) -> dict[str, Any]:
        """Answer another worker's question (:class:`Quota` asks it)."""
        asked = json.loads(body)
        if asked["op"] == "sync":
            self.sync(holder, Counter({(kind, tenant): int(n) for kind, tenant, n in asked["held"]}))
            return {}
        if asked["op"] == "give":
            self.give(holder, str(asked["kind"]), str(asked["tenant"]))
            return {}
        if asked["op"] == "admit":
            return {"wait_s": self.admit(str(asked["tenant"]), float(asked["rate_per_s"]), int(asked["burst"]))}
        return {"granted": self.take(holder, str(asked["kind"]), str(asked["tenant"]), int(asked["limit"]))}


class Quota:
    """This worker's view of the service's quotas: its own :class:`Counts` (the only or the first worker), or the
    first worker's, asked over its socket.

    Args:
        owner: This worker.
        peers: The other workers (``None``: the service's only process).
    """

    def __init__(self, owner: Owner, peers: Peers | None) -> None:
        self.owner, self.peers = owner, peers
        #: The counts, in the process that holds them.
        self.counts = Counts() if peers is None or owner.slot == 0 else None
        self._held: Held = Counter()
        #: The first worker that knows what this one holds (told when it is first asked, and again after any
        #: question it failed to answer).
        self._told: Owner | None = None
        self._telling = asyncio.Lock()
        #: Questions asked and not yet answered (or failed); none while what is held is told.
        self._asking = 0
        self._answered = asyncio.Event()
        self._answered.set()

    async def admit(self, tenant: str, rate_per_s: float, burst: int) -> float | None:
        """Take one request from ``tenant``'s bucket, kept for the whole service; ``None`` when taken, else the
        seconds until a token is back.

        Raises:
            Refused: 503, the first worker could not be asked (restarting, or not answering).
        """
        if self.counts is not None:
            return self.counts.admit(tenant, rate_per_s, burst)
        first = await self._first()
        answer = await self._ask(first, {"op": "admit", "tenant": tenant, "rate_per_s": rate_per_s, "burst": burst})
        wait = answer["wait_s"]
        return None if wait is None else float(wait)

    async def take(self, kind: str, tenant: str, limit: int) -> bool:
        """Count one more ``kind`` held by ``tenant`` here, unless the tenant holds ``limit`` over the whole service;
        returns whether it was counted.

        Raises:
            Refused: 503, the first worker could not be asked (restarting, or not answering).
        """
        if self.counts is not None:
            return self.counts.take(self.owner, kind, tenant, limit)
        first = await self._first()
        answer = await self._ask(first, {"op": "take", "kind": kind, "tenant": tenant, "limit": limit})
        granted = answer["granted"] is True
        if granted:
            self._held[(kind, tenant)] += 1
        return granted

    async def give(self, kind: str, tenant: str) -> None:
        """Count one ``kind`` held by ``tenant`` here fewer. A first worker that cannot be told now is told what this
        worker holds before its next question."""
        if self.counts is not None:
            self.counts.give(self.owner, kind, tenant)
            return
        try:
            first = await self._first()
        except Refused:
            first = None
        self._held[(kind, tenant)] -= 1  # after _first: what it may tell the first worker still holds this one
        if first is None:
            self._told = None
            return
        with contextlib.suppress(Refused):  # the first worker is told what this one holds before its next question
            await self._ask(first, {"op": "give", "kind": kind, "tenant": tenant})

    def forget_dead(self) -> None:
        """Forget what the workers that died held (the first worker of several does, every tick)."""
        if self.counts is not None and self.peers is not None:
            self.counts.forget_dead(self.peers)

    async def _first(self) -> Owner:
        """The first worker, once it knows what this worker holds."""
        assert self.peers is not None
        first = self.peers.current(0)
        # Not ready yet: the service is starting (another worker may answer requests first) or slot 0's next
        # generation is starting. Worth a moment's wait; a worker known dead is not.
        waited = 0.0
        while first is None and waited < _ASK_TIMEOUT_S:
            await asyncio.sleep(_FIRST_POLL_S)
            waited += _FIRST_POLL_S
            first = self.peers.current(0)
        if first is None or self.peers.death(first) is not None:
            raise _unreachable("is restarting")
        async with self._telling:  # what is held is told before any other question, and once
            if self._told != first:
                # An answer still to come changes what is held: told before it, the first worker would count it twice
                # (a give) or not at all (a take). No question starts meanwhile: each waits here for the lock.
                await self._answered.wait()
                held = [[kind, tenant, n] for (kind, tenant), n in self._held.items() if n > 0]
                await self._ask(first, {"op": "sync", "held": held})
                self._told = first
        return first

    async def _ask(self, first: Owner, question: dict[str, Any]) -> dict[str, Any]:
        """The first worker's answer to ``question``. One that fails may still be counted there (a first worker
        that stalled past the timeout reads it when it resumes): the first worker is told again what this worker
        holds, which replaces whatever it counted, before this worker's next question."""
        assert self.peers is not None and self.peers.me is not None
        me = self.peers.me
        target = f"{QUOTA_PATH}?slot={me.slot}&generation={me.generation}".encode()
        headers = [(b"content-type", b"application/json")]
        self._asking += 1
        self._answered.clear()
        try:
            async with asyncio.timeout(_ASK_TIMEOUT_S):
                reply = await forward(self.peers.socket(first), "POST", target, headers, json.dumps(question).encode())
            if reply.status != 200:
                raise _unreachable(f"answered {reply.status}")
        except BaseException as exc:
            self._told = None  # cancelled too: the question may have been sent
            if isinstance(exc, PeerGone):
                raise _unreachable("did not answer") from None
            if isinstance(exc, TimeoutError):
                raise _unreachable(f"did not answer within {_ASK_TIMEOUT_S:g} s") from None
            raise
        finally:
            self._asking -= 1
            if self._asking == 0:
                self._answered.set()
        answer: dict[str, Any] = json.loads(reply.body)
        return answer


def _unreachable(why: str) -> Refused:
    return Refused(
        503,
        f"the service's first worker, which counts every tenant's limits, {why}: this request was not served; retry "
        "in a second",
        retry_after_s=1.0,
    )
