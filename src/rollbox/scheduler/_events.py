"""Each run's events in a JSONL file of its own: ``$ROLLBOX_HOME/runs/ID/events.jsonl``.

The scheduler records into a :class:`RunEvents` sink. An event goes to the file of the run it names
(``run_id``, as every ``job.transition`` does), or, when it names none (a sandbox's or the judge's own events),
to the run of the job being worked on where it was emitted (:func:`working_on` marks that).

Lines wait in memory until the scheduler flushes, every tick of its loop (50 ms) and when it closes (or until 64
KiB of them wait): a busy scheduler emits several events for each job, and a write to the file for each (or for each
turn) would cost more than the rest of the job's bookkeeping. A flush writes a file's waiting lines whole, in one
write to the file opened to append: other processes append to the same file (every ``rollbox serve`` worker writes
its run's events there), and a line split across two writes could have theirs land inside it. A process killed
outright may lose the events of its last tick, and may leave the file's last line torn (a run that resumes ends it
before appending; ``rollbox report`` skips it); never a transition, which the job store holds (``rollbox jobs
show``).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path

from rollbox import telemetry
from rollbox.telemetry import Event, end_torn_line

from ._home import run_dir, run_file_error

__all__ = ["RunEvents", "recorded_file", "working_on"]

_current_run: contextvars.ContextVar[str | None] = contextvars.ContextVar("rollbox_job_run", default=None)
#: The RunEvents that records the events emitted in this context (inside a scheduler's work), if one does.
_recorder: contextvars.ContextVar[RunEvents | None] = contextvars.ContextVar("rollbox_run_events", default=None)
#: JSON as :class:`rollbox.telemetry.JsonlSink` writes it, its encoder made once.
_ENCODE = json.JSONEncoder(separators=(",", ":"), default=str).encode
_KEPT = "every move of every job is in the job store (rollbox jobs show JOB)"
#: Bytes of lines that wait for a flush at most: past it, they are written at once.
_MAX_WAITING = 1 << 16
_TRANSITION = frozenset({"job_id", "run_id", "attempt", "source", "target", "transition_at", "reason"})


def _text(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def _line(event: Event) -> str:
    """The event as one line of JSON. The moves of jobs, several for each job, are most of a busy run's events:
    theirs is formatted directly (the same JSON, a fraction of the encoder's cost)."""
    f = event.fields
    if event.kind != "job.transition" or f.keys() != _TRANSITION:
        return _ENCODE(event.to_json()) + "\n"
    return (
        f'{{"kind":"job.transition","at":{event.at!r},"job_id":{int(f["job_id"])},"run_id":{_text(f["run_id"])},'
        f'"attempt":{int(f["attempt"])},"source":{_text(f["source"])},"target":{_text(f["target"])},'
        f'"transition_at":{float(f["transition_at"])!r},"reason":{_text(f["reason"])}}}\n'
    )


def _run_of(event: Event) -> str | None:
    """The run whose file holds ``event``: the run it names, else the run of the job being worked on."""
    run_id = event.fields.get("run_id") or _current_run.get()
    return run_id if isinstance(run_id, str) else None


def recorded_file(event: Event) -> Path | None:
    """The file in which a scheduler records ``event``, emitted here inside its work (``None``: none records it). A
    sink of the whole process that writes a run's file too leaves out the events recorded there, so that each event
    is in its run's file once."""
    recorder = _recorder.get()
    run_id = _run_of(event) if recorder is not None else None
    return run_dir(run_id, recorder.home) / "events.jsonl" if recorder is not None and run_id is not None else None


@contextlib.contextmanager
def working_on(run_id: str) -> Iterator[None]:
    """Events emitted in this block (and the tasks it starts) that name no run belong to ``run_id``."""
    token = _current_run.set(run_id)
    try:
        yield
    finally:
        _current_run.reset(token)


@dataclass
class _RunFile:
    """A run's events file, opened to append, and its lines that wait to be written."""

    path: Path
    fd: int
    lines: list[str] = field(default_factory=list)
    size: int = 0
    torn: bool = False  # a write failed partway: the next starts on a line of its own

    def write_out(self) -> None:
        """Write the waiting lines in one write (the file is opened to append: it lands whole, after whatever other
        processes appended). A write the file takes only in part (a full disk) leaves the line it cut torn: the
        rest starts with that line again, on a line of its own.

        Raises:
            OSError: the file could not be written (the lines are dropped).
        """
        if not self.lines:
            return
        rest = (("\n" if self.torn else "") + "".join(self.lines)).encode()
        self.lines.clear()
        self.size = 0
        self.torn = True
        while rest:
            n = os.write(self.fd, rest)
            if n <= 0:
                raise OSError(errno.EIO, "the file took none of a write")
            cut = rest.rfind(b"\n", 0, n) + 1  # where the line the write cut starts
            rest = b"" if n == len(rest) else (b"\n" if cut < n else b"") + rest[cut:]
        self.torn = False


class RunEvents:
    """A sink that appends each event to its run's ``events.jsonl`` under ``home``; :meth:`flush` writes them out.

    A file that cannot be written is never an error in :meth:`write` (a sink must not raise into whoever emitted):
    the next :meth:`flush`, which the scheduler calls every tick, raises it.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self._files: dict[str, _RunFile] = {}
        self._lock = threading.Lock()
        self._error: OSError | None = None  # the first a write met since the last flush

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Record the events emitted inside this block (and in the tasks it starts) in their runs' files."""
        token = _recorder.set(self)
        try:
            with telemetry.recording(self):
                yield
        finally:
            _recorder.reset(token)

    def write(self, event: Event) -> None:
        run_id = _run_of(event)
        if run_id is None:
            return
        line = _line(event)
        with self._lock:
            try:
                out = self._files.get(run_id)
                if out is None:
                    out = self._files[run_id] = self._open(run_id)
                out.lines.append(line)
                out.size += len(line)
                if out.size >= _MAX_WAITING:
                    self._write_out(out)
            except OSError as exc:
                self._error = self._error or exc

    def _open(self, run_id: str) -> _RunFile:
        """The run's events file, opened to append (once: its path is not made again for each event); a torn last
        line that a killed run left is ended first."""
        path = run_dir(run_id, self.home) / "events.jsonl"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            end_torn_line(path)
            return _RunFile(path, os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666))
        except OSError as exc:
            raise run_file_error(path, exc, _KEPT) from exc

    @staticmethod
    def _write_out(out: _RunFile) -> None:
        try:
            out.write_out()
        except OSError as exc:
            raise run_file_error(out.path, exc, _KEPT) from exc

    def flush(self) -> None:
        """Write out what waits.

        Raises:
            OSError: a run's events file could not be made or written, by this flush or by a write since the last
                (the message says what to do).
        """
        with self._lock:
            error, self._error = self._error, None
            if error is not None:
                raise error
            for out in self._files.values():
                self._write_out(out)

    def close(self) -> None:
        """Write out what waits and close every file (idempotent).

        Raises:
            OSError: a run's events file could not be written (every file is closed all the same).
        """
        with self._lock:
            files, self._files = list(self._files.values()), {}
        error: OSError | None = None
        for out in files:
            try:
                self._write_out(out)
            except OSError as exc:
                error = error or exc
            finally:
                os.close(out.fd)
        if error is not None:
            raise error
