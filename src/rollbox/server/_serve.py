"""Running the application on uvicorn, in one process or several."""

from __future__ import annotations

import json
import os
import socket
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from rollbox.sandbox import Limits
from rollbox.telemetry import AlertThresholds

from ._app import create_app
from ._config import ServerConfig

__all__ = ["app_from_environment", "serve"]

_ENVIRONMENT = "ROLLBOX_SERVE_CONFIG"
#: No access log: every execution is an event already (the run's JSONL, the archive), and a line per request
#: costs a busy service a tenth of its throughput.
_UVICORN: dict[str, Any] = {"log_level": "info", "access_log": False, "timeout_keep_alive": 30}


def _to_json(config: ServerConfig) -> str:
    return json.dumps(asdict(config), default=str)


def _from_json(text: str) -> ServerConfig:
    data: dict[str, Any] = json.loads(text)
    types = {f.name: f.type for f in fields(ServerConfig)}
    for name, value in list(data.items()):
        if value is None:
            continue
        if name in ("home", "tenants_file", "tasks_dir"):
            data[name] = Path(value)
        elif name == "default_limits":
            data[name] = Limits(**value)
        elif name == "alerts":
            data[name] = AlertThresholds(**value)
    assert set(data) <= set(types)
    return ServerConfig(**data)


def app_from_environment() -> FastAPI:
    """The application for the configuration ``serve`` left in the environment (each worker process makes it)."""
    return create_app(_from_json(os.environ[_ENVIRONMENT]))


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


def serve(config: ServerConfig) -> None:
    """Serve until interrupted: one process, or ``config.workers`` processes sharing the socket.

    Raises:
        ValueError: the configuration cannot serve (auth is on and there is no key, the address cannot be listened
            on; the message says what to do).
    """
    _check_address(config.host, config.port)
    if config.workers <= 1:
        uvicorn.run(create_app(config), host=config.host, port=config.port, **_UVICORN)
        return
    create_app(config)  # the same checks as each worker's, here, where the error can be read
    os.environ[_ENVIRONMENT] = _to_json(config)
    uvicorn.run(
        "rollbox.server._serve:app_from_environment",
        factory=True,
        host=config.host,
        port=config.port,
        workers=config.workers,
        **_UVICORN,
    )
