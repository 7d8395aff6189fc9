"""Where rollbox keeps what it records by default."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["rollbox_home"]


def rollbox_home() -> Path:
    """``$ROLLBOX_HOME``, or ``~/.rollbox``: the service's tenants, each run's events (``runs/RUN/events.jsonl``)
    and the default archive (``archive/``)."""
    return Path(os.environ.get("ROLLBOX_HOME") or Path.home() / ".rollbox")
