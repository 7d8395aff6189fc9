"""Where each request is served when ``rollbox serve`` runs several worker processes.

The kernel hands each connection to any worker. That worker serves the request itself, unless it belongs to
another worker, to which it hands the request over (its Unix socket) and returns the answer:

- a sandbox's or an episode's request (``/v1/sandboxes/ID...``, ``/v1/episodes/ID...``) belongs to the worker
  named in the id; when that worker has died, the answer is 410 and says so (never a wait; as the 421 below, only
  to a caller with a valid key);
- a request that runs something and carries an ``Idempotency-Key`` belongs to the worker of the key's slot, so
  that a retry finds the first answer wherever its connection lands;
- jobs and runs (the service's one scheduler), ``/metrics``, ``/v1/stats`` and ``/v1/alerts`` (the figures of
  the whole service) belong to the first worker;
- ``GET /v1/sandboxes`` and ``GET /v1/episodes`` are answered by every worker, each listing its own (the
  tenant's rate is taken once, by the worker the request reached).

Everything else (``/run_code``, grading without a key, tasks, health) is served where it lands. A request that
came from another worker is always served where it lands. On a service of several hosts, a sandbox id of
another node is 421: the proxy in front routes by the node named in the id (docs/deploy.md).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ._forward import PeerGone, Reply, exchange, forward
from ._guard import ADMITTED, Refused
from ._peers import Death, Owner, Peers, owner_of
from ._quota import QUOTA_PATH
from ._relay import RELAY_PATH
from ._responses import SafeJSONResponse, error

if TYPE_CHECKING:
    from ._service import Service

__all__ = ["Router"]

_SESSION = re.compile(r"/v1/(sandboxes|episodes)/([^/]+)")
_KINDS = {"sandboxes": "sandbox", "episodes": "episode"}
#: Requests answered from the idempotency cache of one worker when they carry a key.
_KEYED = frozenset({"/run_code", "/submit", "/online_judge/submit", "/v1/grade", "/v1/sandboxes", "/v1/episodes"})
_LISTS = frozenset({"/v1/sandboxes", "/v1/episodes"})
_FIRST = ("/metrics", "/v1/stats", "/v1/alerts", "/v1/jobs", "/v1/runs")
_ADMITTED = ADMITTED.encode()


def _is_first(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in _FIRST)


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _target(scope: Scope) -> bytes:
    path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    return path + (b"?" + query if query else b"")


async def _pass_on(socket: Path, scope: Scope, body: bytes, receive: Receive, send: Send) -> None:
    """Hand the request (its ``body`` already read) to the worker listening on ``socket`` and send its answer on
    as it arrives: a run's results stream through as they commit. A client that goes away closes the hand-over,
    so that the worker sees its client gone too.

    Raises:
        PeerGone: the worker did not answer (nothing was sent to the client: the caller answers instead).
        ConnectionError: the worker died in the middle of its answer (the client's connection is cut short).
    """
    async with exchange(socket, scope["method"], _target(scope), scope["headers"], body) as answer:
        await send({"type": "http.response.start", "status": answer.status, "headers": answer.headers})

        async def body_on() -> None:
            try:
                async for chunk in answer.chunks():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except PeerGone as exc:
                raise ConnectionError(f"a worker of this service died in the middle of its answer ({exc})") from None
            await send({"type": "http.response.body", "body": b""})

        await _unless_gone(receive, body_on())


async def _unless_gone(receive: Receive, work: Awaitable[None]) -> None:
    """Do ``work``, stopped when the client disconnects first (its request's body was read already)."""

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    doing, watching = asyncio.ensure_future(work), asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({doing, watching}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (doing, watching):
            task.cancel()
        await asyncio.gather(doing, watching, return_exceptions=True)
    if doing.done() and not doing.cancelled():
        doing.result()  # its error, if it failed


async def _send(reply: Reply, send: Send) -> None:
    headers = [*reply.headers, (b"content-length", str(len(reply.body)).encode())]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


def _gone(kind: str, entry_id: str, owner: Owner, death: Death | None, *, meanwhile: bool = False) -> SafeJSONResponse:
    # Whether the id was ever one of that worker's is not known here: the message does not say it was.
    how = "died" if death is None else f"died ({death.how}) {time.time() - death.at:.0f} s ago"
    when = " while serving this request" if meanwhile else ""
    return error(
        410,
        f"{kind} {entry_id!r} names worker {owner} of this service, which {how}{when}: the sandboxes and episodes "
        f"it held are gone; open a new {kind} (an episode that ended this way is an infrastructure failure, not the "
        "model's)",
    )


def _key(scope: Scope) -> str | None:
    """The API key a request carries, where the endpoints look for it: ``Authorization: Bearer``, ``X-API-Key``,
    ``?api_key=``."""
    connection = HTTPConnection(scope)
    scheme, _, credentials = connection.headers.get("authorization", "").partition(" ")
    bearer = credentials.strip() if scheme.lower() == "bearer" else ""
    return bearer or connection.headers.get("x-api-key") or connection.query_params.get("api_key")


class Router:
    """ASGI middleware that serves each request on the worker it belongs to (see the module's documentation)."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app, self.service = app, service

    def _from_peer(self, scope: Scope) -> bool:
        peers, server = self.service.peers, scope.get("server")
        return (
            peers is not None
            and server is not None
            and server[1] is None
            and server[0] == str(peers.socket(self.service.owner))
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, peers = scope["path"], self.service.peers
        if self._from_peer(scope):
            if path == RELAY_PATH and scope["method"] == "POST":
                self.service.received.take(await _body(receive), self.service.figure_sinks())
                await send({"type": "http.response.start", "status": 204, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            if path == QUOTA_PATH and scope["method"] == "POST":
                await self._quota(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        if any(name == _ADMITTED for name, _ in scope["headers"]):  # only another worker says so
            scope["headers"] = [(name, value) for name, value in scope["headers"] if name != _ADMITTED]
        session = _SESSION.match(path)
        try:
            if session is not None:
                await self._session(_KINDS[session[1]], session[2], scope, receive, send)
            elif peers is None:
                await self.app(scope, receive, send)
            elif path in _LISTS and scope["method"] == "GET":
                await self._everyone(peers, scope, receive, send)
            elif _is_first(path):
                await self._to_slot(peers, 0, scope, receive, send)
            elif path in _KEYED and scope["method"] == "POST" and (key := _header(scope, b"idempotency-key")):
                await self._to_slot(peers, peers.slot_for(key), scope, receive, send, or_here=True)
            else:
                await self.app(scope, receive, send)
        except HTTPException as exc:  # the body came too slowly, or was too large, while it was read here
            await error(exc.status_code, str(exc.detail))(scope, receive, send)

    async def _quota(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer another worker's question about quotas (503 where this worker does not hold the counts: it is
        not the first)."""
        counts, asked = self.service.quota.counts, HTTPConnection(scope).query_params
        if counts is None:
            await error(503, "this worker does not hold the service's quotas", retry_after_s=1.0)(scope, receive, send)
            return
        holder = Owner(self.service.owner.node, int(asked["slot"]), int(asked["generation"]))
        await SafeJSONResponse(counts.answer(holder, await _body(receive)))(scope, receive, send)

    async def _here(self, scope: Scope, body: bytes, send: Send) -> None:
        """Serve here a request whose body was already read."""
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _session(self, kind: str, entry_id: str, scope: Scope, receive: Receive, send: Send) -> None:
        me, peers, owner = self.service.owner, self.service.peers, owner_of(entry_id)
        if owner is None or owner == me:
            await self.app(scope, receive, send)
            return
        if owner.node != me.node:
            where = f"node {me.node!r}" if me.node else "a service without a node name"
            message = (
                f"{kind} {entry_id!r} lives on node {owner.node!r}, and this is {where}: send requests for it to "
                "that node (a proxy in front of several nodes routes by the node in the id: see docs/deploy.md)"
            )
            await self._to_caller(error(421, message), scope, receive, send)
            return
        if peers is None or not peers.existed(owner):
            await self.app(scope, receive, send)  # not found here either: the registry's 404
            return
        current, death = peers.current(owner.slot), peers.death(owner)
        if death is not None or current != owner:
            await self._to_caller(_gone(kind, entry_id, owner, death), scope, receive, send)
            return
        body = await _body(receive)
        try:
            await _pass_on(peers.socket(owner), scope, body, receive, send)
        except PeerGone:
            await asyncio.sleep(0.2)  # the supervisor's record of how it died, if it comes at once
            gone = _gone(kind, entry_id, owner, peers.death(owner), meanwhile=True)
            await self._to_caller(gone, scope, receive, send)

    async def _to_caller(self, answer: SafeJSONResponse, scope: Scope, receive: Receive, send: Send) -> None:
        """Send ``answer``, made here for a sandbox or an episode of another worker or node, to a caller with a
        valid key only: any other gets the 401 (or 429) the endpoint would answer, never word of this service's
        workers, how they died, or its nodes."""
        try:
            await self.service.authenticate(_key(scope))
        except Refused as exc:
            answer = error(exc.status, exc.message, exc.retry_after_s)
        await answer(scope, receive, send)

    async def _to_slot(
        self, peers: Peers, slot: int, scope: Scope, receive: Receive, send: Send, *, or_here: bool = False
    ) -> None:
        """Serve on the worker of ``slot``; while it has none (it is restarting), here when ``or_here``, else 503."""
        owner = peers.current(slot)
        if owner == self.service.owner:
            await self.app(scope, receive, send)
            return
        unavailable = f"worker {slot} of this service is restarting: retry in a second"
        if owner is None or peers.death(owner) is not None:
            if or_here:
                await self.app(scope, receive, send)
            else:
                await error(503, unavailable, retry_after_s=1.0)(scope, receive, send)
            return
        body = await _body(receive)
        try:
            await _pass_on(peers.socket(owner), scope, body, receive, send)
        except PeerGone as exc:
            if or_here and exc.answered_nothing:
                await self._here(scope, body, send)
            else:
                await error(503, f"worker {owner} of this service died while serving this request: retry it", 1.0)(
                    scope, receive, send
                )

    async def _everyone(self, peers: Peers, scope: Scope, receive: Receive, send: Send) -> None:
        """A list of every worker's own (a worker that is gone has nothing left to list)."""
        body = await _body(receive)
        captured: list[Message] = []

        async def keep(message: Message) -> None:
            captured.append(message)

        await self._here(scope, body, keep)
        mine = _reply(captured)
        if mine.status != 200:
            await _send(mine, send)
            return
        items = json.loads(mine.body)
        headers = [*scope["headers"], (_ADMITTED, b"1")]  # admitted here: the others take no more of its rate
        others = await asyncio.gather(
            *(forward(peers.socket(o), "GET", _target(scope), headers, body) for o in peers.others()),
            return_exceptions=True,
        )
        for reply in others:
            if isinstance(reply, PeerGone):
                continue
            if isinstance(reply, BaseException):
                raise reply
            if reply.status != 200:
                await _send(reply, send)
                return
            items.extend(json.loads(reply.body))
        await SafeJSONResponse(items)(scope, receive, send)


def _reply(messages: list[Message]) -> Reply:
    """The answer an application sent as ASGI messages."""
    start = messages[0]
    headers = [(n, v) for n, v in start.get("headers", []) if n.lower() != b"content-length"]
    return Reply(start["status"], headers, b"".join(m.get("body", b"") for m in messages[1:]))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None
