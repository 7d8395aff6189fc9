"""Where the scheduler keeps its state: everything lives under ``$ROLLBOX_HOME`` (default ``~/.rollbox``)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["rollbox_home", "run_dir", "run_file_error", "store_path"]


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


def run_file_error(path: Path, exc: OSError, remade: str) -> OSError:
    """A file of a run's directory could not be written: what happened, and what to do; ``remade`` says what of
    it the job store holds (it keeps every job, move and result whatever happens to the run's files)."""
    advice = "free space on its disk" if exc.errno == errno.ENOSPC else f"check that {path.parent} is writable"
    return OSError(f"cannot write {path} ({exc.strerror or exc}): {advice}, then run again; {remade}")
