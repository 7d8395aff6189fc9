"""Each run's events in a JSONL file of its own: ``$ROLLBOX_HOME/runs/ID/events.jsonl``.

The scheduler records into a :class:`RunEvents` sink. An event goes to the file of the run it names
(``run_id``, as every ``job.transition`` does), or, when it names none (a sandbox's or the judge's own events),
to the run of the job being worked on where it was emitted (:func:`working_on` marks that).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from pathlib import Path

from rollbox.telemetry import Event, JsonlSink

from ._home import run_dir

__all__ = ["RunEvents", "working_on"]

_current_run: contextvars.ContextVar[str | None] = contextvars.ContextVar("rollbox_job_run", default=None)


@contextlib.contextmanager
def working_on(run_id: str) -> Iterator[None]:
    """Events emitted in this block (and the tasks it starts) that name no run belong to ``run_id``."""
    token = _current_run.set(run_id)
    try:
        yield
    finally:
        _current_run.reset(token)


class RunEvents:
    """A sink that appends each event to its run's ``events.jsonl`` under ``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self._files: dict[str, JsonlSink] = {}
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        run_id = event.fields.get("run_id") or _current_run.get()
        if not isinstance(run_id, str):
            return
        with self._lock:
            sink = self._files.get(run_id)
            if sink is None:
                sink = self._files[run_id] = JsonlSink(run_dir(run_id, self.home) / "events.jsonl")
        sink.write(event)

    def close(self) -> None:
        """Close every file (idempotent)."""
        with self._lock:
            files, self._files = list(self._files.values()), {}
        for sink in files:
            sink.close()
