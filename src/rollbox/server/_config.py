"""The service's configuration: where it listens, whom it lets in, and the bounds on everything it serves."""

from __future__ import annotations

import ipaddress
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from rollbox.sandbox import Limits
from rollbox.telemetry import AlertThresholds, rollbox_home

from ._peers import valid_node

__all__ = ["ServerConfig", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address or ``localhost`` (anything else is reachable from elsewhere)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """Everything ``rollbox serve`` can be told. Sizes in bytes, times in seconds.

    Raises:
        ValueError: a port outside 0..65535, a count below 1, a time that is not a positive finite number of
            seconds (the message names the field).
    """

    host: str = "127.0.0.1"
    port: int = 8080
    #: Worker processes. A sandbox or an episode lives in one of them, which serves every request for it.
    workers: int = 1
    #: This host's name on a service of several hosts behind one proxy: the ids of its sandboxes and episodes
    #: carry it, and the proxy routes by it (lowercase letters, digits and inner hyphens; at most 32).
    node: str | None = None
    #: Whether requests need an API key; ``None``: only when ``host`` is not a loopback address.
    auth: bool | None = None
    home: Path = field(default_factory=rollbox_home)
    #: The job store: a PostgreSQL URL or a SQLite file (default ``$ROLLBOX_DB``, else ``home/jobs.db``).
    db: str | None = None
    #: The tenants file (default ``home/tenants.json``).
    tenants_file: Path | None = None
    #: A directory of task directories served by ``/v1/tasks``, ``/v1/grade`` and ``/submit``.
    tasks_dir: Path | None = None
    #: Where events are archived (default ``home/archive``); ``""`` turns the archive off.
    archive_url: str | None = None
    archive_options: dict[str, Any] = field(default_factory=dict)
    #: The run that work without a run of its own belongs to (default: ``serve-`` and the start time).
    run: str = field(default_factory=lambda: time.strftime("serve-%Y%m%d-%H%M%S"))
    #: Limits of sandboxes made without any, and the most a request may ask for.
    default_limits: Limits = field(default_factory=Limits)
    max_timeout_s: float = 60.0
    max_memory_bytes: int = 4 * 2**30
    max_output_bytes: int = 8 * 2**20
    max_disk_bytes: int = 2 * 2**30
    max_pids: int = 1024
    max_open_files: int = 4096
    #: The largest request body.
    max_body_bytes: int = 32 * 2**20
    #: A request's whole body must arrive within this many seconds of the application starting to read it (else 408).
    body_timeout_s: float = 60.0
    #: The largest file read back (``fetch_files``, ``GET .../files``), and the most bytes one ``/run_code`` request
    #: reads back in all: its answer is built in memory, and a hard link to a file counts as a copy of it.
    max_file_bytes: int = 16 * 2**20
    max_fetch_bytes: int = 32 * 2**20
    #: Warm sandboxes per configuration for ``/run_code`` and grading (default: twice the CPUs), and how many
    #: configurations are kept warm (others get a fresh sandbox per request).
    pool_size: int = field(default_factory=lambda: 2 * len(os.sched_getaffinity(0)))
    warm_configs: int = 4
    #: Where ``/run_code`` runs each language: ``host`` (the host's toolchains), ``recipes`` (each language in the
    #: image built from its recipe, on first use), or an image every language runs in (a reference in the image
    #: store, or an OCI layout directory); see :mod:`rollbox.server._languages`.
    language_images: str = "host"
    #: Executions waiting for a sandbox, over every tenant, beyond which requests get 429.
    max_queue: int = 2048
    #: A sandbox of the sandboxes API unused for this long is closed.
    idle_timeout_s: float = 300.0
    alerts: AlertThresholds = field(default_factory=AlertThresholds)
    #: How often alerts are evaluated and gauges refreshed.
    tick_s: float = 1.0
    #: A stream (a run's results) with nothing to send for this long sends a blank line, which readers skip: no
    #: proxy or load balancer between it and its reader closes it as idle while a long job runs.
    stream_keepalive_s: float = 15.0

    def __post_init__(self) -> None:
        if self.node is not None and not valid_node(self.node):
            raise ValueError(
                f"node must be lowercase letters, digits and inner hyphens (at most 32), got {self.node!r}"
            )
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be a whole number from 0 to 65535, got {self.port!r}")
        counts = ("workers", "max_memory_bytes", "max_output_bytes", "max_disk_bytes", "max_pids", "max_open_files")
        for name in (*counts, "max_body_bytes", "max_file_bytes", "max_fetch_bytes", "pool_size", "max_queue"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
        if isinstance(self.warm_configs, bool) or not isinstance(self.warm_configs, int) or self.warm_configs < 0:
            raise ValueError(f"warm_configs must be a whole number of at least 0, got {self.warm_configs!r}")
        for name in ("max_timeout_s", "body_timeout_s", "idle_timeout_s", "tick_s", "stream_keepalive_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
                raise ValueError(f"{name} must be a number of seconds above 0, got {value!r}")

    @property
    def auth_required(self) -> bool:
        """Whether requests need an API key."""
        return self.auth if self.auth is not None else not is_loopback(self.host)

    @property
    def tenants_path(self) -> Path:
        """The tenants file."""
        return self.tenants_file or self.home / "tenants.json"

    @property
    def archive(self) -> str | None:
        """The archive's URL, or ``None`` when it is off."""
        if self.archive_url == "":
            return None
        return self.archive_url or str(self.home / "archive")

    def to_json(self) -> str:
        """The configuration as JSON (what a worker process is started with)."""
        return json.dumps(asdict(self), default=str)

    @classmethod
    def from_json(cls, text: str) -> ServerConfig:
        """The configuration :meth:`to_json` wrote."""
        data: dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        for name, value in list(data.items()):
            if value is None:
                continue
            if name in ("home", "tenants_file", "tasks_dir"):
                data[name] = Path(value)
            elif name == "default_limits":
                data[name] = Limits(**value)
            elif name == "alerts":
                data[name] = AlertThresholds(**value)
        assert set(data) <= known, set(data) - known
        return cls(**data)
