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
import logging
import secrets
import threading
import time
import urllib.parse
import warnings
from collections import defaultdict, deque
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
_log = logging.getLogger(__name__)
#: Another name a common field goes by in some events (episode events name their task ``task_id``).
_ALIASES = {"task": "task_id"}


def _text(value: str) -> str:
    """``value`` as text that UTF-8 can hold: a lone surrogate (what a JSON ``\\udcXX`` escape decodes to, which
    Arrow refuses) as its escape."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


def _partition(value: str) -> str:
    """A run id as a path segment: nothing of it can climb out of the archive or make another partition."""
    return urllib.parse.quote(_text(value), safe="") or _NO_RUN


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class Archive:
    """A sink that buffers events and writes them as Parquet, one file per run and day at each flush.

    Writing happens in a background thread every ``flush_s`` seconds (or as soon as ``max_buffered`` events
    wait), never in the thread that emits; :meth:`flush` writes now, :meth:`close` writes the rest and stops.
    Each file's table is made before the storage is touched. A file that fails to be written (the storage is
    unreachable or full) keeps its events buffered for the next try, while the other files are still written (the
    files written stay written, and their events are not written again), and :attr:`last_error` says what happened.
    An event that no row can hold (a field whose ``str`` raises) is dropped and counted in
    :attr:`unarchivable_events`; never does one event hold back another. Text that UTF-8 cannot hold (a lone
    surrogate, as a JSON ``\\udcXX`` escape decodes to) is kept exactly in ``fields`` and written as its escape in
    the other columns and in the partition's name. At most ``max_pending`` events wait: past that (the storage has
    failed for long) the oldest are dropped, counted in :attr:`dropped_events`, with a logged warning. Each file is
    written under a hidden temporary name and renamed once whole, so a reader never sees half of one.

    Args:
        url: A local directory or an fsspec URL (default scheme: the local file system).
        storage_options: Passed to the fsspec file system (credentials, ``client_kwargs.endpoint_url``).
        flush_s: How often buffered events are written.
        max_buffered: Buffered events that trigger a write at once.
        max_pending: Events kept waiting at most while the storage fails; the oldest are dropped past it.

    Raises:
        ValueError: ``max_pending`` is below ``max_buffered`` or ``max_buffered`` below 1.
    """

    def __init__(
        self,
        url: str,
        *,
        storage_options: Mapping[str, Any] | None = None,
        flush_s: float = 5.0,
        max_buffered: int = 5000,
        max_pending: int = 100_000,
    ) -> None:
        if not 1 <= max_buffered <= max_pending:
            raise ValueError(
                f"Archive needs 1 <= max_buffered <= max_pending, got max_buffered={max_buffered} and "
                f"max_pending={max_pending}: raise max_pending"
            )
        self.url = url.rstrip("/")
        self.fs, self.root = fsspec.core.url_to_fs(self.url, **dict(storage_options or {}))
        self.fs.makedirs(self.root, exist_ok=True)
        self.flush_s = flush_s
        self.max_buffered = max_buffered
        self.max_pending = max_pending
        self.last_error: str | None = None
        #: Events dropped, the oldest first, because ``max_pending`` waited (the storage failed for long).
        self.dropped_events = 0
        #: Events dropped because no row could hold them.
        self.unarchivable_events = 0
        self._dropping = False  # events are being dropped: warned once until a flush writes everything again
        self._buffer: deque[Event] = deque()
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
            if len(self._buffer) > self.max_pending:
                self._drop_oldest()
            if len(self._buffer) >= self.max_buffered:
                self._wake.set()

    def _drop_oldest(self) -> None:
        """Drop the events past ``max_pending``, the oldest first (called holding the lock)."""
        while len(self._buffer) > self.max_pending:
            self._buffer.popleft()
            self.dropped_events += 1
        if not self._dropping:
            self._dropping = True
            _log.warning(
                "the archive at %s holds %d events it could not write (%s): the oldest are dropped from now on, "
                "counted in its dropped_events; check the storage",
                self.url,
                self.max_pending,
                self.last_error,
            )

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_s)
            self._wake.clear()
            try:
                self.flush()
            except Exception as exc:  # never: flush contains its failures; the writer must outlive a bug all the same
                self.last_error = f"{type(exc).__name__}: {exc}"
                _log.exception("the archive at %s failed to flush", self.url)

    def flush(self) -> int:
        """Write every buffered event now; returns how many were written. Never raises: a file the storage refuses
        keeps its events for the next flush (:attr:`last_error` says why)."""
        with self._write_lock:
            with self._lock:
                events, self._buffer = list(self._buffer), deque()
            if not events:
                return 0
            written, error = 0, None
            left: list[Event] = []
            for (run, date), (group, table) in self._tables(events).items():
                try:
                    self._write(run, date, table)
                    written += len(group)
                except Exception as exc:  # the storage failed: this file's events wait for the next flush
                    error = f"{type(exc).__name__}: {exc}"
                    left += group
            self.last_error = error
            with self._lock:
                self._buffer.extendleft(reversed(left))
                if len(self._buffer) > self.max_pending:
                    self._drop_oldest()
                elif not left and self._dropping:
                    self._dropping = False
                    _log.warning("the archive at %s writes again; %d events dropped", self.url, self.dropped_events)
            return written

    def _tables(self, events: list[Event]) -> dict[tuple[str, str], tuple[list[Event], pa.Table]]:
        """Each file's events and table, by run and date; an event that no row can hold is counted and dropped."""
        rows: dict[tuple[str, str], tuple[list[Event], list[dict[str, Any]]]] = defaultdict(lambda: ([], []))
        failures: list[str] = []
        for event in events:
            try:
                date = datetime.datetime.fromtimestamp(event.at, datetime.UTC).strftime("%Y-%m-%d")
                fields = event.fields
                run = str(fields.get("run") or fields.get("run_id") or _NO_RUN)
                row = self._row(event, run, date)
            except Exception as exc:  # any field's str may raise: the event is dropped, counted
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            group, group_rows = rows[(run, date)]
            group.append(event)
            group_rows.append(row)
        tables: dict[tuple[str, str], tuple[list[Event], pa.Table]] = {}
        for key, (group, group_rows) in rows.items():
            try:
                tables[key] = (group, pa.Table.from_pylist(group_rows, schema=_SCHEMA))
                continue
            except Exception:  # one row refused: find it, keep the others
                pass
            kept: list[tuple[Event, pa.Table]] = []
            for event, row in zip(group, group_rows, strict=True):
                try:
                    kept.append((event, pa.Table.from_pylist([row], schema=_SCHEMA)))
                except Exception as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
            if kept:
                tables[key] = ([e for e, _ in kept], pa.concat_tables([t for _, t in kept]))
        if failures:
            self.unarchivable_events += len(failures)
            _log.warning(
                "the archive at %s dropped %d events that no row can hold; the first: %s",
                self.url,
                len(failures),
                failures[0],
            )
        return tables

    def _write(self, run: str, date: str, table: pa.Table) -> None:
        """One Parquet file of ``run``'s events of ``date``, in place only once written whole."""
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
        row: dict[str, Any] = {"kind": _text(event.kind), "at": event.at, "run": _text(run), "date": date}
        for name in _COLUMNS:
            value = f.get(name) if f.get(name) is not None else f.get(_ALIASES.get(name, ""))
            row[name] = None if value is None else _text(str(value))
        row["reward"] = _number(f.get("reward"))
        row["wall_s"] = _number(f.get("wall_s"))
        # ASCII JSON: a lone surrogate is kept as its \\u escape, which reads back as the same character.
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
    skipped: list[str] | None = None,
) -> list[Event]:
    """Every archived event under ``url`` (of one ``run``, of one ``kind``), in the order they happened.

    A file that is not an archive's Parquet (damaged, or cut short by an archive of an older rollbox, which did not
    write under a temporary name) is skipped: added to ``skipped`` as ``PATH (why)`` where one is given, else
    with one warning that counts them and names the first. A file the storage cannot give (no permission, not
    reachable) is an error, never a file skipped.

    Raises:
        FileNotFoundError: nothing was ever archived under ``url``.
        OSError: the storage refused or failed to list or read the archive (the message says to check the
            credentials and that the storage is reachable).

    Warns:
        RuntimeWarning: files were skipped, and no ``skipped`` list was given.
    """
    fs, root = fsspec.core.url_to_fs(url.rstrip("/"), **dict(storage_options or {}))
    try:
        if not fs.exists(root):
            raise FileNotFoundError(
                f"no archive at {url!r}: check the URL, or archive there first (rollbox serve --archive)"
            )
        pattern = f"{root}/run={_partition(run) if run is not None else '*'}/date=*/*.parquet"
        paths = sorted(fs.glob(pattern))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _storage_error(url, root, exc) from exc
    events: list[Event] = []
    bad: list[str] = []
    for path in paths:
        try:
            data = fs.cat_file(path)
        except FileNotFoundError as exc:  # moved aside since it was listed
            bad.append(f"{path} ({type(exc).__name__}: {exc})")
            continue
        except OSError as exc:
            raise _storage_error(url, path, exc) from exc
        try:
            events += _read_part(data, kind)
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:  # read whole: its content
            bad.append(f"{path} ({type(exc).__name__}: {exc})")
    if skipped is not None:
        skipped += bad
    elif bad:
        warnings.warn(
            f"read_archive skipped {len(bad)} of the {len(paths)} files under {url!r} that could not be read "
            f"(move them aside to silence this); the first: {bad[0]}",
            RuntimeWarning,
            stacklevel=2,
        )
    events.sort(key=lambda e: e.at)
    return events


def _storage_error(url: str, path: str, exc: OSError) -> OSError:
    """What the storage's failure to give ``path`` means, and what to do."""
    message = (
        f"the storage of the archive at {url!r} failed to give {path} ({type(exc).__name__}: {exc}); check its "
        "credentials (storage_options, or AWS_ACCESS_KEY_ID and the like for s3://) and that it is reachable"
    )
    return OSError(exc.errno, message) if exc.errno else OSError(message)


def _read_part(data: bytes, kind: str | None) -> list[Event]:
    """The events of one Parquet file's bytes (of one ``kind``): a file read whole, so that whatever fails here is
    the file's content, never the storage."""
    # ParquetFile, not read_table: read_table's dataset scanner leaves Arrow threads that can abort the
    # interpreter at exit ("terminate called without an active exception", apache/arrow#34314).
    table = pq.ParquetFile(pa.BufferReader(data)).read(columns=["kind", "at", "fields"], use_threads=False)
    return [
        Event(row["kind"], row["at"], json.loads(row["fields"]))
        for row in table.to_pylist()
        if kind is None or row["kind"] == kind
    ]
