"""The read-only root that sandboxes share: built once per runtime, entered by each sandbox's launcher.

Every sandbox of one runtime sees the same root: the system directories, /etc, the device nodes, the runtime and
rollbox's agent, read-only. ``agent.c template`` builds it in a mount namespace of its own and pivots to it there,
once; each launcher enters that namespace, makes a copy of its own and attaches the sandbox's own mounts (its
writable tree, its ptys) to the copy. Building the root for each sandbox cost a tmpfs, a dozen recursive binds and
a ``pivot_root``, which walks every thread on the machine: with thousands of sandboxes open, milliseconds each.

A root is known by its operations and by the identity (device, inode) of each directory it binds: a runtime built
again at the same path is a new directory, which a root built earlier would not show.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from rollbox.sandbox._errors import SandboxError
from rollbox.sandbox._shortage import agent_error
from rollbox.sandbox.agent._protocol import resolve
from rollbox.sandbox.agent._spawner import Launched

__all__ = ["SharedRoots"]

_BUILD_TIMEOUT_S = 10.0
#: What starts a process through the spawner: argv, the fds it gets as 3, 4, ...
Spawn = Callable[[list[str], list[int]], Awaitable[Launched]]


def _identity(ops: Sequence[str]) -> tuple[tuple[int, int] | None, ...]:
    """(device, inode) of each host path the operations bind, None for one that is missing (the build says so)."""
    found: list[tuple[int, int] | None] = []
    for k, op in enumerate(ops):
        if op == "--ro":
            try:
                st = os.stat(ops[k + 1])
                found.append((st.st_dev, st.st_ino))
            except OSError:
                found.append(None)
    return tuple(found)


class SharedRoots:
    """This process's shared roots, each held as a descriptor of its mount namespace."""

    def __init__(self, agent: Path, stage: Path) -> None:
        self._agent = agent
        self._stage = stage
        self._roots: dict[tuple[str, ...], tuple[tuple[tuple[int, int] | None, ...], int]] = {}
        self._lock = threading.Lock()  # sandboxes may be opened from several threads' event loops

    async def get(self, ops: Sequence[str], spawn: Spawn) -> int:
        """A new descriptor (the caller closes it) of the mount namespace of the root that ``ops`` build (``agent.c
        template``'s operations), built on first use or when a directory it binds changed.

        Raises:
            SandboxError: it could not be built; the message carries what the agent said.
        """
        key, identity = tuple(ops), _identity(ops)
        with self._lock:
            known = self._roots.get(key)
            if known is not None and known[0] == identity:
                return os.dup(known[1])
        built = await self._build(ops, spawn)
        with self._lock:
            known = self._roots.get(key)
            if known is not None and known[0] == identity:  # another start built it meanwhile
                os.close(built)
            else:
                self._roots[key] = (identity, built)
                if known is not None:
                    os.close(known[1])  # a root whose directory was replaced: sandboxes made on it keep theirs
            return os.dup(self._roots[key][1])

    async def _build(self, ops: Sequence[str], spawn: Spawn) -> int:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with ours:
            try:
                builder = await spawn(
                    [str(self._agent), "template", "--stage", str(self._stage), *ops], [theirs.fileno()]
                )
            finally:
                theirs.close()
            try:
                fds = await _received_fds(ours)
                if len(fds) != 1:
                    for fd in fds:
                        os.close(fd)
                    await builder.wait(_BUILD_TIMEOUT_S)
                    reason = agent_error(builder.read_stderr()) or "no message (the agent died)"
                    raise SandboxError(f"the sandbox failed to start: its root could not be built: {reason}")
                return fds[0]
            finally:
                if not await builder.wait(_BUILD_TIMEOUT_S):
                    builder.kill()
                builder.close()


async def _received_fds(sock: socket.socket) -> list[int]:
    """The descriptors of the one message the builder sends (none if it ends first)."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(sock.fileno(), resolve, ready)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready, _BUILD_TIMEOUT_S)
    finally:
        loop.remove_reader(sock.fileno())
    try:
        _data, fds, _flags, _addr = socket.recv_fds(sock, 1, 1)
    except (BlockingIOError, OSError):
        return []
    return list(fds)
