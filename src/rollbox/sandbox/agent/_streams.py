"""Streaming a command's stdin and outputs through non-blocking pipes, with the output cap enforced live."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable

__all__ = ["OutputCapture", "StdinFeeder"]

_CHUNK = 1 << 16


class OutputCapture:
    """Read one output pipe until EOF, keeping at most ``cap`` bytes.

    When the stream goes past the cap, ``on_overflow`` is called once (the caller kills the command) and the
    rest is read and dropped, so that a program printing gigabytes is stopped at the cap, never buffered.
    """

    def __init__(self, fd: int, cap: int, on_overflow: Callable[[], None]) -> None:
        self._fd = fd
        self._cap = cap
        self._on_overflow = on_overflow
        self._loop = asyncio.get_running_loop()
        self.data = bytearray()
        self.truncated = False
        self.eof: asyncio.Future[None] = self._loop.create_future()
        os.set_blocking(fd, False)
        self._loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self._fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        room = self._cap - len(self.data)
        if len(chunk) > room:
            self.data += chunk[: max(room, 0)]
            if not self.truncated:
                self.truncated = True
                self._on_overflow()
        else:
            self.data += chunk

    def close(self) -> None:
        """Stop reading and release the pipe (idempotent)."""
        if self._fd < 0:
            return
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1
        if not self.eof.done():
            self.eof.set_result(None)


class StdinFeeder:
    """Write ``data`` to a pipe as the command reads it, then close the pipe (the command sees EOF)."""

    def __init__(self, fd: int, data: bytes) -> None:
        self._fd = fd
        self._view = memoryview(data)
        self._loop = asyncio.get_running_loop()
        if not data:
            self.close()
            return
        os.set_blocking(fd, False)
        self._loop.add_writer(fd, self._writable)

    def _writable(self) -> None:
        try:
            written = os.write(self._fd, self._view[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # the command closed stdin or died: what it did not read is its business
            self.close()
            return
        self._view = self._view[written:]
        if not self._view:
            self.close()

    def close(self) -> None:
        """Stop writing and close the pipe (idempotent)."""
        if self._fd < 0:
            return
        with contextlib.suppress(ValueError, RuntimeError):
            self._loop.remove_writer(self._fd)
        os.close(self._fd)
        self._fd = -1
