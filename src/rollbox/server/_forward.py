"""One request handed to another worker of the service over its Unix socket (HTTP/1.1, one connection each: a
worker's death can never leave a pooled connection behind to fail a later request)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import h11

__all__ = ["PeerGone", "Reply", "forward"]

#: Headers that belong to one connection, not to the request or the answer (the hop sets its own length).
_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade", b"content-length"})
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


async def forward(
    socket: Path, method: str, target: bytes, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> Reply:
    """Send the request to the worker listening on ``socket`` and return its whole answer.

    Raises:
        PeerGone: the worker refused the connection, or it closed before the answer was complete.
    """
    try:
        reader, writer = await asyncio.open_unix_connection(str(socket), limit=2**20)
    except OSError as exc:  # no such socket, or nothing listens on it: the worker is gone
        raise PeerGone(f"{type(exc).__name__}: {exc.strerror or exc}", answered_nothing=True) from None
    connection = h11.Connection(h11.CLIENT)
    sent = [(name.lower(), value) for name, value in headers if name.lower() not in _HOP]
    if not any(name == b"host" for name, _ in sent):
        sent.append((b"host", b"rollbox"))
    sent += [(b"content-length", str(len(body)).encode()), (b"connection", b"close")]
    try:
        writer.write(connection.send(h11.Request(method=method, target=target, headers=sent)) or b"")
        writer.write(connection.send(h11.Data(data=body)) or b"")
        writer.write(connection.send(h11.EndOfMessage()) or b"")
        await writer.drain()
        status, answer, chunks = 0, [], []
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await reader.read(2**16))
            elif isinstance(event, h11.Response):
                status = event.status_code
                answer = [(n, v) for n, v in event.headers if n not in _HOP and n not in _OWN]
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                return Reply(status, answer, b"".join(chunks))
            elif isinstance(event, h11.ConnectionClosed):
                raise PeerGone("the connection closed before the answer", answered_nothing=False)
    except (OSError, h11.ProtocolError) as exc:
        raise PeerGone(f"{type(exc).__name__}: {exc}", answered_nothing=False) from None
    finally:
        writer.close()
