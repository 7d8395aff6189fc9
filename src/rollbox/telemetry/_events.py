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
import io
import json
import logging
import os
import threading
import time
import types
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Event", "JsonlSink", "Sink", "add_sink", "bound", "emit", "end_torn_line", "recording", "remove_sink"]


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
    """Where events go. ``write`` is called in the emitting thread and must not block for long or raise (a sink
    that fails keeps its own account of it, as :attr:`JsonlSink.last_error` does); :func:`emit` contains any
    exception one raises all the same."""

    def write(self, event: Event) -> None: ...


_process_sinks: list[Sink] = []
_context_sinks: contextvars.ContextVar[tuple[Sink, ...]] = contextvars.ContextVar("rollbox_sinks", default=())
_context_fields: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "rollbox_fields", default=types.MappingProxyType({})
)
_log = logging.getLogger(__name__)
#: The exception types already logged of each sink failing now (by ``id``): a sink that fails on every event is
#: logged once, and logged again if it fails after it wrote (it leaves this table when it writes).
_failing: dict[int, set[type]] = {}


def emit(kind: str, /, **fields: Any) -> None:
    """Report an event of ``kind`` to every sink registered for the process or the current context."""
    sinks = _context_sinks.get()
    if not sinks and not _process_sinks:
        return
    bound_fields = _context_fields.get()
    event = Event(kind, time.time(), {**bound_fields, **fields} if bound_fields else fields)
    for sink in (*_process_sinks, *sinks):
        try:
            sink.write(event)
        except Exception as exc:  # one sink's failure must reach neither the caller nor the sinks after it
            logged = _failing.setdefault(id(sink), set())
            if type(exc) not in logged:
                logged.add(type(exc))
                _log.exception(
                    "telemetry sink %s failed on a %r event (its later failures of this kind are not logged until "
                    "it writes again)",
                    type(sink).__name__,
                    kind,
                )
        else:
            if _failing:  # it recovered: its next failure is news
                _failing.pop(id(sink), None)


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


def end_torn_line(path: str | Path) -> None:
    """End the last line of the JSON Lines file at ``path`` where a writer killed mid-line left it unterminated, so
    that what is appended next (a resumed run's events) starts a line of its own instead of joining the torn one.
    A missing file is left missing. Safe while other processes append whole lines to the file: the newline is
    appended too, after whatever they wrote (at worst an empty line, which readers skip), never written over theirs.

    Raises:
        OSError: the file is there but cannot be read and written.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
    finally:
        os.close(fd)


class JsonlSink:
    """Appends each event to a file as one line of JSON, written at once, so a crash loses no written event.

    A write that fails (a full disk) loses that event and never raises: :attr:`failed_writes` counts the events
    lost, and :attr:`last_error` says why the last write failed (``None`` once one succeeds again). Usable as a
    context manager; :meth:`close` is idempotent. Safe to share between threads.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        end_torn_line(self.path)
        # Unbuffered: each line is written whole by this call, never left half in a buffer for the next to finish.
        self._file: io.FileIO | None = self.path.open("ab", buffering=0)
        self._lock = threading.Lock()
        self._torn = False  # a failed write may have left part of a line: the next starts on a line of its own
        self.failed_writes = 0
        self.last_error: str | None = None

    def write(self, event: Event) -> None:
        line = (json.dumps(event.to_json(), separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            if self._file is None:
                return
            data = memoryview(b"\n" + line if self._torn else line)
            try:
                while data:
                    data = data[self._file.write(data) :]
            except OSError as exc:
                self._torn = True
                self.failed_writes += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                return
            self._torn = False
            self.last_error = None

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
