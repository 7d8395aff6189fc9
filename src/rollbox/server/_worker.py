"""One worker process of ``rollbox serve --workers N`` (started by ``_supervisor``, never by hand):

    python -m rollbox.server._worker DIRECTORY SLOT GENERATION LISTENER_FD READY_FD SUPERVISOR_PID

It serves the shared listening socket and its own Unix socket (requests the other workers hand over), and
writes one byte to READY_FD once it serves.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import socket
import sys
from pathlib import Path

import uvicorn

from ._app import create_app
from ._config import ServerConfig
from ._peers import Owner, Peers
from ._serve import UVICORN
from ._supervisor import CONFIG_VARIABLE

_PR_SET_PDEATHSIG = 1


def _end_with(supervisor: int) -> None:
    """Be asked to stop (SIGTERM) when the supervisor dies, however it dies; stop now if it already has."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != supervisor:
        sys.exit(0)


async def _serve(server: uvicorn.Server, sockets: list[socket.socket], peers: Peers, ready: int) -> None:
    serving = asyncio.create_task(server.serve(sockets=sockets))
    while not server.started and not serving.done():
        await asyncio.sleep(0.02)
    if server.started:
        peers.publish()
        os.write(ready, b"1")
    os.close(ready)
    await serving


def main(argv: list[str]) -> None:
    directory, slot, generation, listener, ready, supervisor = argv
    _end_with(int(supervisor))
    config = ServerConfig.from_json(os.environ[CONFIG_VARIABLE])
    me = Owner(config.node, int(slot), int(generation))
    peers = Peers(Path(directory), workers=config.workers, node=config.node, me=me)
    private = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peers.socket(me).unlink(missing_ok=True)
    private.bind(str(peers.socket(me)))
    private.listen(1024)
    server = uvicorn.Server(uvicorn.Config(create_app(config, peers=peers), lifespan="on", **UVICORN))
    shared = socket.socket(fileno=int(listener))
    asyncio.run(_serve(server, [shared, private], peers, int(ready)))


if __name__ == "__main__":
    main(sys.argv[1:])
