"""Events: the one small interface through which every layer of rollbox reports what happened.

A layer calls :func:`emit` with a kind and plain fields; whoever wants the events (a run's JSONL file, the
service's metrics and archive, a test) registers a :class:`Sink`, for the whole process (:func:`add_sink`) or
for the work under one ``with`` block (:func:`recording`, which follows the context into the asyncio tasks it
starts). With no sink registered, :func:`emit` returns at once: reporting costs nothing where nobody listens.

Kinds are dotted names, the layer first: ``sandbox.exec``, ``judge.verdict``, ``job.transition``,
``episode.turn``, ``episode.end``. Fields are JSON values (str, int, float, bool, None, lists and dicts of them).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import threading
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

__all__ = ["Event", "JsonlSink", "Sink", "add_sink", "bound", "emit", "recording", "remove_sink"]


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened: what (``kind``), when (``at``, seconds since the epoch) and its details."""

    kind: str
    at: float
    fields: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The event as one flat JSON object: ``kind`` and ``at`` beside its fields."""
        return {"kind": self.kind, "at": self.at, **self.fields}


class Sink(Protocol):
    """Where events go. ``write`` is called in the emitting thread and must not block for long or raise."""

    def write(self, event: Event) -> None: ...


_process_sinks: list[Sink] = []
_context_sinks: contextvars.ContextVar[tuple[Sink, ...]] = contextvars.ContextVar("rollbox_sinks", default=())
_context_fields: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "rollbox_fields", default=types.MappingProxyType({})
)


def emit(kind: str, /, **fields: Any) -> None:
    """Report an event of ``kind`` to every sink registered for the process or the current context."""
    sinks = _context_sinks.get()
    if not sinks and not _process_sinks:
        return
    bound_fields = _context_fields.get()
    event = Event(kind, time.time(), {**bound_fields, **fields} if bound_fields else fields)
    for sink in (*_process_sinks, *sinks):
        sink.write(event)


def add_sink(sink: Sink) -> None:
    """Send every event of this process to ``sink`` until :func:`remove_sink`."""
    _process_sinks.append(sink)


def remove_sink(sink: Sink) -> None:
    """Stop sending events to ``sink`` (registered with :func:`add_sink`); a sink not registered is ignored."""
    with contextlib.suppress(ValueError):
        _process_sinks.remove(sink)


@contextlib.contextmanager
def recording(sink: Sink) -> Iterator[Sink]:
    """Send the events emitted inside this block (and in the tasks it starts) to ``sink`` as well."""
    token = _context_sinks.set((*_context_sinks.get(), sink))
    try:
        yield sink
    finally:
        _context_sinks.reset(token)


@contextlib.contextmanager
def bound(**fields: Any) -> Iterator[None]:
    """Add ``fields`` to every event emitted inside this block (and in the tasks it starts), under the event's own
    fields: the service binds ``tenant`` and ``run`` around a request, so that what the layers below report (an
    episode's turns, a job's transitions) says whose work it was without those layers knowing."""
    token = _context_fields.set({**_context_fields.get(), **fields})
    try:
        yield
    finally:
        _context_fields.reset(token)


class JsonlSink:
    """Appends each event to a file as one line of JSON, flushed at once, so a crash loses no written event.

    Usable as a context manager; :meth:`close` is idempotent. Safe to share between threads.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, event: Event) -> None:
        line = json.dumps(event.to_json(), separators=(",", ":"), default=str) + "\n"
        with self._lock:
            if self._file is not None:
                self._file.write(line)
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
