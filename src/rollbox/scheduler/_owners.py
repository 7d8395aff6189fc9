"""Who holds leases: each scheduler process registers as an owner, so that its successor on the same machine can
tell at once that it died (its process is gone) instead of waiting for its leases to expire."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

__all__ = ["Identity", "dead_owners"]


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "unknown-boot"


def process_start(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or ``None`` when there is no such process: a pid
    and its start time name one process, even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


class Identity:
    """This process as a lease owner: a fresh id, this host (its name and boot), its pid and start time."""

    def __init__(self) -> None:
        self.host = f"{socket.gethostname()}/{_boot_id()}"
        self.pid = os.getpid()
        self.started = process_start(self.pid) or "0"
        self.owner = f"{socket.gethostname()}:{self.pid}:{uuid.uuid4().hex[:12]}"


def dead_owners(registered: list[tuple[str, int, str]], me: str) -> list[str]:
    """The owners among ``registered`` (``(owner, pid, start time)`` on this host) whose process is gone."""
    return [owner for owner, pid, started in registered if owner != me and process_start(pid) != started]
