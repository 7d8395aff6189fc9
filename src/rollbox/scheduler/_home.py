"""Where the scheduler keeps its state: everything lives under ``$ROLLBOX_HOME`` (default ``~/.rollbox``), but the
job store when ``$ROLLBOX_DB`` names another (a PostgreSQL database that schedulers on many hosts share)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from ._db import is_postgres_url

__all__ = ["RUN_ID_MAX", "RUN_ID_PATTERN", "rollbox_home", "run_dir", "run_file_error", "store_path", "store_target"]

#: A run id is a plain name (its directory under ``HOME/runs``): no '/', no leading '.', at most this long. Every
#: command and the service take one only in this form.
RUN_ID_PATTERN = r"^[^/.][^/]*$"
RUN_ID_MAX = 128


def rollbox_home() -> Path:
    """``$ROLLBOX_HOME``, or ``~/.rollbox``: the job store, and each run's results, trajectories and events."""
    configured = os.environ.get("ROLLBOX_HOME")
    return Path(configured).expanduser() if configured else Path.home() / ".rollbox"


def store_path(home: Path | None = None) -> Path:
    """The job store's database file."""
    return (home or rollbox_home()) / "jobs.db"


def store_target(db: str | None = None, home: Path | None = None) -> str | Path:
    """The job store to open: ``db`` (a command's ``--db``), else ``$ROLLBOX_DB``, else :func:`store_path`. Either
    is a PostgreSQL URL (``postgresql://USER:PASSWORD@HOST:PORT/DATABASE``) or a SQLite file."""
    chosen = db or os.environ.get("ROLLBOX_DB")
    if not chosen:
        return store_path(home)
    return chosen if is_postgres_url(chosen) else Path(chosen).expanduser()


def run_dir(run_id: str, home: Path | None = None) -> Path:
    """A run's directory: ``results.jsonl``, ``events.jsonl``, ``trajectories/``."""
    return (home or rollbox_home()) / "runs" / run_id


def run_file_error(path: Path, exc: OSError, remade: str) -> OSError:
    """A file of a run's directory could not be written: what happened, and what to do; ``remade`` says what of
    it the job store holds (it keeps every job, move and result whatever happens to the run's files)."""
    advice = "free space on its disk" if exc.errno == errno.ENOSPC else f"check that {path.parent} is writable"
    return OSError(f"cannot write {path} ({exc.strerror or exc}): {advice}, then run again; {remade}")
