"""One request handed to another worker of the service over its Unix socket (HTTP/1.1, one connection each: a
worker's death can never leave a pooled connection behind to fail a later request). The answer comes back as it
arrives (a run's results stream as they commit), or whole."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

import h11

__all__ = ["Answer", "PeerGone", "Reply", "exchange", "forward"]

#: Headers that belong to one connection, not to the request or the answer (the request's length is set here; an
#: answer passed on as it arrives keeps the worker's, and one returned whole is given its own).
_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"})
_LENGTH = b"content-length"
#: Set again by the server that answers the client.
_OWN = frozenset({b"date", b"server"})


class PeerGone(Exception):
    """The worker did not answer: nothing listens on its socket any more, or the connection closed before its
    whole answer (it died meanwhile)."""

    def __init__(self, message: str, *, answered_nothing: bool) -> None:
        super().__init__(message)
        #: Whether the worker never took the request at all (its socket refused it), so that it cannot have run.
        self.answered_nothing = answered_nothing


@dataclass(frozen=True)
class Reply:
    """A worker's whole answer."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class Answer:
    """A worker's answer as it arrives: its status and headers, then its body in pieces (:meth:`chunks`)."""

    def __init__(
        self, connection: h11.Connection, reader: asyncio.StreamReader, status: int, headers: list[tuple[bytes, bytes]]
    ) -> None:
        self._connection, self._reader = connection, reader
        self.status, self.headers = status, headers

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, each piece as soon as the worker sent it.

        Raises:
            PeerGone: the connection closed before the end of the body (the worker died meanwhile).
        """
        try:
            while True:
                event = await _next(self._connection, self._reader)
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage):
                    return
        except (OSError, h11.ProtocolError) as exc:
            raise PeerGone(f"{type(exc).__name__}: {exc}", answered_nothing=False) from None


async def _next(connection: h11.Connection, reader: asyncio.StreamReader) -> h11.Event:
    """The next event of the answer that is not a wait for more bytes.

    Raises:
        PeerGone: the connection closed first.
    """
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(2**16))
        elif isinstance(event, h11.ConnectionClosed):
            raise PeerGone("the connection closed before the answer", answered_nothing=False)
        else:
            return event  # type: ignore[return-value]


@contextlib.asynccontextmanager
async def exchange(
    socket: Path, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> AsyncIterator[Answer]:
    """Send the request to the worker listening on ``socket``; yields its answer once its status and headers came.
    Leaving the block closes the connection (a worker still streaming sees its client gone).

    Raises:
        PeerGone: the worker refused the connection, or it closed before the answer's head.
    """
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket), limit=2**20)
    except OSError as exc:  # no such socket, or nothing listens on it: the worker is gone
        raise PeerGone(f"{type(exc).__name__}: {exc.strerror or exc}", answered_nothing=True) from None
    connection = h11.Connection(h11.CLIENT)
    sent = [(name.lower(), value) for name, value in headers if name.lower() not in _HOP and name.lower() != _LENGTH]
    if not any(name == b"host" for name, _ in sent):
        sent.append((b"host", b"rollbox"))
    sent += [(b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    try:
        try:
            writer.write(connection.send(h11.Request(method=method, target=target, headers=sent)) or b"")
            writer.write(connection.send(h11.Data(data=body)) or b"")
            writer.write(connection.send(h11.EndOfMessage()) or b"")
            await writer.drain()
            while not isinstance(event := await _next(connection, reader), h11.Response):
                pass  # an informational answer (100 Continue) before the real one
        except (OSError, h11.ProtocolError) as exc:
            raise PeerGone(f"{type(exc).__name__}: {exc}", answered_nothing=False) from None
        kept = [(n, v) for n, v in event.headers if n not in _HOP and n not in _OWN]
        yield Answer(connection, reader, event.status_code, kept)
    finally:
        writer.close()


async def forward(
    socket: Path, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> Reply:
    """Send the request to the worker listening on ``socket`` and return its whole answer.

    Raises:
        PeerGone: the worker refused the connection, or it closed before the answer was complete.
    """
    async with exchange(socket, method, target, headers, body) as answer:
        body = b"".join([chunk async for chunk in answer.chunks()])
        return Reply(answer.status, [(n, v) for n, v in answer.headers if n != _LENGTH], body)
