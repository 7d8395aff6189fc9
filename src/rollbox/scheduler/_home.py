"""Where the scheduler keeps its state: everything lives under ``$ROLLBOX_HOME`` (default ``~/.rollbox``)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["rollbox_home", "run_dir", "store_path"]


def rollbox_home() -> Path:
    """``$ROLLBOX_HOME``, or ``~/.rollbox``: the job store, and each run's results, trajectories and events."""
    configured = os.environ.get("ROLLBOX_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".rollbox"


def store_path(home: Path | None = None) -> Path:
    """The job store's database file."""
    return (home or rollbox_home()) / "jobs.db"


def run_dir(run_id: str, home: Path | None = None) -> Path:
    """A run's directory: ``results.jsonl``, ``events.jsonl``, ``trajectories/``."""
    return (home or rollbox_home()) / "runs" / run_id
