"""Running the service: one process on uvicorn, or several worker processes under a supervisor
(``_supervisor``)."""

from __future__ import annotations

import socket
from typing import Any

import uvicorn

from ._app import create_app
from ._config import ServerConfig
from ._supervisor import supervise

__all__ = ["UVICORN", "serve"]

#: No access log: every execution is an event already (the run's JSONL, the archive), and a line per request
#: costs a busy service a tenth of its throughput.
UVICORN: dict[str, Any] = {"log_level": "info", "access_log": False, "timeout_keep_alive": 30}


def _check_address(host: str, port: int) -> None:
    """Refuse an address this machine cannot listen on, before the service starts anything.

    Raises:
        ValueError: the host does not resolve, or the address cannot be bound (in use, not this machine's).
    """
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as exc:
        raise ValueError(
            f"cannot listen on {host!r} ({exc.strerror}): give an address of this machine (127.0.0.1, 0.0.0.0, ::)"
        ) from None
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise ValueError(
                f"cannot listen on {host}:{port} ({exc.strerror}): stop what listens there, or choose another "
                "--port or --host"
            ) from None


def serve(config: ServerConfig) -> int:
    """Serve until interrupted: one process, or ``config.workers`` worker processes sharing the socket; returns
    the exit status (0: stopped by a signal; 1: a worker could not start).

    Raises:
        ValueError: the configuration cannot serve (auth is on and there is no key, the address cannot be listened
            on; the message says what to do).
    """
    _check_address(config.host, config.port)
    if config.workers <= 1:
        uvicorn.run(create_app(config), host=config.host, port=config.port, **UVICORN)
        return 0
    create_app(config)  # the same checks as each worker's, here, where the error can be read
    return supervise(config)
