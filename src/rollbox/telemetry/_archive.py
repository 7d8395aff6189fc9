"""The archive: every event (executions, verdicts, job transitions, episode turns and trajectories) kept as
Parquet files through fsspec, on a local directory or any fsspec URL (``s3://bucket/prefix`` through s3fs).

    archive = Archive("s3://bucket/rollbox", storage_options={"client_kwargs": {"endpoint_url": ...}})
    telemetry.add_sink(archive)           # or: with telemetry.recording(archive): ...
    ...
    archive.close()                       # writes what is buffered
    events = read_archive("s3://bucket/rollbox", run="run-1")

Layout: ``URL/run=RUN/date=YYYY-MM-DD/part-<time>-<random>.parquet``, Hive-style partitions (readable as a
dataset by pyarrow, DuckDB, Spark, pandas); RUN is an event's ``run`` or ``run_id`` field, ``_`` when it has none.
Columns: ``kind``, ``at`` (seconds since the epoch), ``run``, ``date``, the common fields ``id``, ``job_id``,
``task`` (an event's ``task``, or its ``task_id`` as episode events name it), ``tenant``, ``status``, ``reward`` and
``wall_s`` (null where an event has none), and ``fields``: every field as JSON, so that nothing an event carried is
lost. One row per episode with typed columns is the trajectories' Parquet (``rollbox.env.write_trajectories``;
``rollbox run`` writes it as ``episodes.parquet`` in the run's directory). Needs the ``archive`` extra
(``fsspec``, ``pyarrow``; ``s3fs`` for s3://).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import secrets
import threading
import time
import urllib.parse
import warnings
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from ._events import Event

__all__ = ["Archive", "read_archive"]

_COLUMNS = ("id", "job_id", "task", "tenant", "status")
_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("at", pa.float64()),
        ("run", pa.string()),
        ("date", pa.string()),
        *((name, pa.string()) for name in _COLUMNS),
        ("reward", pa.float64()),
        ("wall_s", pa.float64()),
        ("fields", pa.string()),
    ]
)
_NO_RUN = "_"
#: Another name a common field goes by in some events (episode events name their task ``task_id``).
_ALIASES = {"task": "task_id"}


def _partition(value: str) -> str:
    """A run id as a path segment: nothing of it can climb out of the archive or make another partition."""
    return urllib.parse.quote(value, safe="") or _NO_RUN


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Archive:
    """A sink that buffers events and writes them as Parquet, one file per run and day at each flush.

    Writing happens in a background thread every ``flush_s`` seconds (or as soon as ``max_buffered`` events
    wait), never in the thread that emits; :meth:`flush` writes now, :meth:`close` writes the rest and stops.
    A file that fails to be written (the storage is unreachable or full) keeps its events buffered for the next
    try, with those of the files not tried after it (the files written stay written, and their events are not
    written again), and :attr:`last_error` says what happened. Each file is written under a hidden temporary name
    and renamed once whole, so a reader never sees half of one.

    Args:
        url: A local directory or an fsspec URL (default scheme: the local file system).
        storage_options: Passed to the fsspec file system (credentials, ``client_kwargs.endpoint_url``).
        flush_s: How often buffered events are written.
        max_buffered: Buffered events that trigger a write at once.
    """

    def __init__(
        self,
        url: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        flush_s: float = 5.0,
        max_buffered: int = 5000,
    ) -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **dict(storage_options or {}))
        self.fs.makedirs(self.root, exist_ok=True)
        self.flush_s = flush_s
        self.max_buffered = max_buffered
        self.last_error: str | None = None
        self._buffer: list[Event] = []
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="rollbox-archive", daemon=True)
        self._thread.start()

    def write(self, event: Event) -> None:
        with self._lock:
            if self._closed:
                return
            self._buffer.append(event)
            if len(self._buffer) >= self.max_buffered:
                self._wake.set()

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            self.flush()

    def flush(self) -> int:
        """Write every buffered event now; returns how many were written."""
        with self._write_lock:
            with self._lock:
                events, self._buffer = self._buffer, []
            if not events:
                return 0
            parts: dict[tuple[str, str], list[Event]] = defaultdict(list)
            for event in events:
                date = datetime.datetime.fromtimestamp(event.at, datetime.UTC).strftime("%Y-%m-%d")
                fields = event.fields
                parts[(str(fields.get("run") or fields.get("run_id") or _NO_RUN), date)].append(event)
            groups = list(parts.items())
            for done, ((run, date), group) in enumerate(groups):
                try:
                    self._write(run, date, group)
                except Exception as exc:  # the storage failed: this file's events and the rest wait for the next flush
                    self.last_error = f"{type(exc).__name__}: {exc}"
                    left = [event for _, rest in groups[done:] for event in rest]
                    with self._lock:
                        self._buffer[:0] = left
                    return len(events) - len(left)
            self.last_error = None
            return len(events)

    def _write(self, run: str, date: str, group: list[Event]) -> None:
        """One Parquet file of ``run``'s events of ``date``, in place only once written whole."""
        table = pa.Table.from_pylist([self._row(e, run, date) for e in group], schema=_SCHEMA)
        directory = f"{self.root}/run={_partition(run)}/date={date}"
        self.fs.makedirs(directory, exist_ok=True)
        name = f"part-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(6)}.parquet"
        temporary = f"{directory}/.{name}.tmp"  # hidden, not *.parquet: no reader takes it for a file of events
        try:
            with self.fs.open(temporary, "wb") as f:
                pq.write_table(table, f, compression="zstd")
            self.fs.mv(temporary, f"{directory}/{name}")
        except BaseException:
            with contextlib.suppress(Exception):  # nothing was left there, or the storage is gone: either way, go on
                self.fs.rm(temporary)
            raise

    @staticmethod
    def _row(event: Event, run: str, date: str) -> dict[str, Any]:
        f = event.fields
        row: dict[str, Any] = {"kind": event.kind, "at": event.at, "run": run, "date": date}
        for name in _COLUMNS:
            value = f.get(name) if f.get(name) is not None else f.get(_ALIASES.get(name, ""))
            row[name] = None if value is None else str(value)
        row["reward"] = _number(f.get("reward"))
        row["wall_s"] = _number(f.get("wall_s"))
        row["fields"] = json.dumps(dict(f), separators=(",", ":"), default=str)
        return row

    def close(self) -> None:
        """Write what is buffered and stop the writer (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        self._thread.join()
        self.flush()

    def __enter__(self) -> Archive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_archive(
    url: str,
    *,
    run: str | None = None,
    kind: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> list[Event]:
    """Every archived event under ``url`` (of one ``run``, of one ``kind``), in the order they happened.

    A file that cannot be read (damaged, or cut short by an archive of an older rollbox, which did not write under
    a temporary name) is skipped, with one warning that counts them and names the first.

    Raises:
        FileNotFoundError: nothing was ever archived under ``url``.

    Warns:
        RuntimeWarning: files were skipped.
    """
    fs, root = fsspec.core.url_to_fs(url.rstrip("/"), **dict(storage_options or {}))
    if not fs.exists(root):
        raise FileNotFoundError(
            f"no archive at {url!r}: check the URL, or archive there first (rollbox serve --archive)"
        )
    pattern = f"{root}/run={_partition(run) if run is not None else '*'}/date=*/*.parquet"
    paths = sorted(fs.glob(pattern))
    events: list[Event] = []
    skipped: list[str] = []
    for path in paths:
        try:
            events += _read_part(fs, path, kind)
        except (OSError, ValueError, pa.ArrowException) as exc:
            skipped.append(f"{path} ({type(exc).__name__}: {exc})")
    if skipped:
        warnings.warn(
            f"read_archive skipped {len(skipped)} of the {len(paths)} files under {url!r} that could not be read "
            f"(move them aside to silence this); the first: {skipped[0]}",
            RuntimeWarning,
            stacklevel=2,
        )
    events.sort(key=lambda e: e.at)
    return events


def _read_part(fs: Any, path: str, kind: str | None) -> list[Event]:
    """The events of one Parquet file (of one ``kind``)."""
    # ParquetFile, not read_table: read_table's dataset scanner leaves Arrow threads that can abort the
    # interpreter at exit ("terminate called without an active exception", apache/arrow#34314).
    with fs.open(path, "rb") as f:
        table = pq.ParquetFile(f).read(columns=["kind", "at", "fields"], use_threads=False)
    return [
        Event(row["kind"], row["at"], json.loads(row["fields"]))
        for row in table.to_pylist()
        if kind is None or row["kind"] == kind
    ]
