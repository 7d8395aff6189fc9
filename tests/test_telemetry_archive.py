"""The archive: events written as partitioned Parquet through fsspec and read back with one call, to a local
directory and to a real S3-compatible server (moto's, started on loopback by the test)."""

from __future__ import annotations

import errno
import json
import logging
import math
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollbox import telemetry
from rollbox.telemetry import Archive, Event, read_archive


def _emit_run() -> None:
    telemetry.emit("job.transition", job_id=1, target="pending", run_id="run-1", tenant="a")
    telemetry.emit("sandbox.exec", id="e1", run="run-1", status="ok", wall_s=0.01, tenant="a", stderr="")
    telemetry.emit("judge.verdict", id="v1", run="run-1", status="passed", reward=1.0, task="t", tenant="a")
    telemetry.emit("episode.turn", run="run-2", episode="ep", turn=1, messages=[{"role": "user", "content": "hi"}])
    telemetry.emit("service.start", host="127.0.0.1")  # no run: partition run=_


def test_local_round_trip_partitions_and_keeps_every_field(tmp_path: Path) -> None:
    url = str(tmp_path / "archive")
    with Archive(url, flush_s=60) as archive, telemetry.recording(archive):
        _emit_run()
    partitions = sorted(str(p.relative_to(url).parent) for p in Path(url).rglob("*.parquet"))
    assert [p.split("/")[0] for p in partitions] == ["run=_", "run=run-1", "run=run-2"]
    assert all(p.split("/")[1].startswith("date=20") for p in partitions)
    run1 = read_archive(url, run="run-1")
    assert [e.kind for e in run1] == ["job.transition", "sandbox.exec", "judge.verdict"]
    assert run1[2].fields["reward"] == 1.0 and run1[0].fields["tenant"] == "a"
    turn = read_archive(url, run="run-2", kind="episode.turn")[0]
    assert turn.fields["messages"] == [{"role": "user", "content": "hi"}]  # trajectories survive whole
    assert len(read_archive(url)) == 5
    # Readable by any Parquet reader as a Hive-partitioned dataset.
    table = ds.dataset(url, format="parquet", partitioning="hive").to_table()
    assert table.num_rows == 5 and set(table.column("kind").to_pylist()) >= {"judge.verdict"}
    with pytest.raises(FileNotFoundError, match="no archive"):
        read_archive(str(tmp_path / "never"))


def test_a_run_id_cannot_climb_out_of_the_archive(tmp_path: Path) -> None:
    url = str(tmp_path / "archive")
    with Archive(url) as archive, telemetry.recording(archive):
        telemetry.emit("sandbox.exec", run="../../escape", status="ok")
    assert not (tmp_path / "escape").exists()
    assert [e.fields["run"] for e in read_archive(url, run="../../escape")] == ["../../escape"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_server() -> Iterator[str]:
    """moto's S3-compatible server on 127.0.0.1, for this test only."""
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "moto's server did not start"
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.slow
def test_s3_round_trip(s3_server: str) -> None:
    import boto3
    import s3fs

    client = {"endpoint_url": s3_server, "region_name": "us-east-1"}
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    boto3.client("s3", **client, **credentials).create_bucket(Bucket="rollbox-test")
    options = {"key": "testing", "secret": "testing", "client_kwargs": client}
    fs = s3fs.S3FileSystem(**options)
    url = "s3://rollbox-test/archive"
    with Archive(url, storage_options=options) as archive, telemetry.recording(archive):
        _emit_run()
    keys = fs.find("rollbox-test/archive")
    assert any("/run=run-1/date=" in k and k.endswith(".parquet") for k in keys), keys
    run1 = read_archive(url, run="run-1", storage_options=options)
    assert [e.kind for e in run1] == ["job.transition", "sandbox.exec", "judge.verdict"]
    assert json.dumps(run1[2].fields, sort_keys=True) == json.dumps(
        {"id": "v1", "reward": 1.0, "run": "run-1", "status": "passed", "task": "t", "tenant": "a"}, sort_keys=True
    )


def test_a_failing_storage_keeps_the_events_for_the_next_flush(tmp_path: Path) -> None:
    url = tmp_path / "archive"
    archive = Archive(str(url), flush_s=60)
    try:
        with telemetry.recording(archive):
            telemetry.emit("sandbox.exec", run="r", status="ok")
        # The storage breaks: the archive's directory becomes a file (root ignores permission bits).
        moved = tmp_path / "moved"
        url.rename(moved)
        url.write_text("not a directory")
        assert archive.flush() == 0 and archive.last_error is not None
        url.unlink()
        moved.rename(url)
        assert archive.flush() == 1 and archive.last_error is None
    finally:
        archive.close()
    assert [e.kind for e in read_archive(str(url))] == ["sandbox.exec"]


def test_episode_events_fill_the_task_column(tmp_path: Path) -> None:
    """Episode events name their task ``task_id``: the archive's ``task`` column holds it, never null."""
    url = str(tmp_path / "archive")
    with Archive(url, flush_s=60) as archive, telemetry.recording(archive):
        telemetry.emit("episode.end", run="r", episode_id="e", task_id="calc", status="passed", reward=1.0)
        telemetry.emit("judge.verdict", run="r", task="calc", task_id="other", status="passed")
    table = ds.dataset(url, format="parquet", partitioning="hive").to_table()
    assert sorted(table.column("task").to_pylist()) == ["calc", "calc"]


def _fail_writes(monkeypatch: pytest.MonkeyPatch, archive: Archive, fail: Callable[[int, Any], Any]) -> None:
    """Make the archive's storage fail as ``fail(n, file)`` says, for its ``n``-th file opened to write."""
    real_open, opened = archive.fs.open, [0]

    def open_(path: str, mode: str = "rb", **kwargs: Any) -> Any:
        f = real_open(path, mode, **kwargs)
        if "w" in mode:
            opened[0] += 1
            return fail(opened[0], f)
        return f

    monkeypatch.setattr(archive.fs, "open", open_)  # the file system is fsspec's cached one: undone after the test


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_file_that_fails_keeps_only_its_own_events_and_the_others_are_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = str(tmp_path / "archive")
    archive = Archive(url, flush_s=3600)
    try:
        for i in range(10):
            archive.write(Event("episode.end", 1.7e9 + i, {"run": "A", "status": "passed"}))
        archive.write(Event("episode.end", 1.7e9 + 20, {"run": "B", "status": "passed"}))
        archive.write(Event("episode.end", 1.7e9 + 21, {"run": "C", "status": "passed"}))

        def second_fails(n: int, f: Any) -> Any:
            if n == 2:
                f.close()
                _no_space()
            return f

        _fail_writes(monkeypatch, archive, second_fails)
        # B's file fails; C's, after it, is written all the same.
        assert archive.flush() == 11 and archive.last_error is not None and "No space" in archive.last_error
        assert archive.flush() == 1 and archive.last_error is None
    finally:
        archive.close()
    assert [len(read_archive(url, run=run)) for run in "ABC"] == [10, 1, 1]  # run A's events are not written twice


class _Torn:
    """A file whose storage fills after its first write."""

    def __init__(self, f: Any) -> None:
        self._f, self._writes = f, 0

    def write(self, data: bytes) -> int:
        self._writes += 1
        if self._writes > 1:
            _no_space()
        return int(self._f.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def __enter__(self) -> _Torn:
        return self

    def __exit__(self, *exc: object) -> None:
        self._f.close()


def test_a_file_cut_short_is_never_seen_and_one_left_by_an_older_archive_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = tmp_path / "archive"
    archive = Archive(str(url), flush_s=3600)
    try:
        archive.write(Event("sandbox.exec", 1.7e9, {"run": "r", "status": "ok"}))
        _fail_writes(monkeypatch, archive, lambda n, f: _Torn(f))
        assert archive.flush() == 0 and archive.last_error is not None
        (day,) = (url / "run=r").iterdir()
        assert list(day.iterdir()) == []  # neither the part written nor its temporary name is left
        monkeypatch.undo()  # the storage has room again
        assert archive.flush() == 1
    finally:
        archive.close()
    (part,) = day.iterdir()
    (day / "part-torn.parquet").write_bytes(part.read_bytes()[:100])  # what an older rollbox could leave
    with pytest.warns(RuntimeWarning, match=r"skipped 1 of the 2 files .*part-torn\.parquet"):
        assert [e.kind for e in read_archive(str(url), run="r")] == ["sandbox.exec"]


class _Unprintable:
    """A field value whose ``str`` raises: no row can hold it."""

    def __str__(self) -> str:
        raise RuntimeError("no text for this")

    __repr__ = __str__


#: Any text: lone surrogates included (a JSON ``\\udcXX`` escape decodes to one), which UTF-8 cannot hold.
_ANY_TEXT = st.text(st.characters(codec=None, categories=None, exclude_categories=()), max_size=8)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _ANY_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ANY_TEXT, inner, max_size=3),
    max_leaves=8,
)
_VALUE = _JSON | st.just(_Unprintable())
_FIELDS = st.dictionaries(
    st.sampled_from(["run", "run_id", "id", "job_id", "task", "task_id", "tenant", "status", "reward", "wall_s"])
    | _ANY_TEXT,
    _VALUE,
    max_size=6,
)
_AT = st.floats(0, 4e9) | st.sampled_from([math.nan, math.inf, -math.inf, 1e300])  # the last: no date
_EVENTS = st.lists(st.builds(Event, _ANY_TEXT, _AT, _FIELDS), max_size=6)


def _leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, Event):
        yield from _leaves(dict(value.fields))
    elif isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value


@settings(max_examples=60, deadline=None)
@given(_EVENTS)
def test_no_event_holds_back_another_and_each_is_kept_exactly_or_counted(events: list[Event]) -> None:
    """Whatever an event carries (any text, any JSON, a value whose str raises, any time), one flush writes every
    other event: each is archived with its fields exactly, or dropped and counted; nothing is left waiting."""
    good = Event("judge.verdict", 1.7e9, {"run": "good", "task_id": "ok", "status": "passed"})
    with tempfile.TemporaryDirectory() as directory:
        archive = Archive(directory, flush_s=3600)
        try:
            for event in [*events, good]:
                archive.write(event)
            archive.flush()
            assert archive.last_error is None and len(archive._buffer) == 0
            read = read_archive(directory)
        finally:
            archive.close()
    kept = [e for e in [*events, good] if 0 <= e.at <= 4e9 and not any(isinstance(v, _Unprintable) for v in _leaves(e))]
    assert archive.unarchivable_events == len(events) + 1 - len(kept)
    # The kind is a column: text UTF-8 cannot hold is written as its escape there. The fields are kept exactly.
    assert sorted(json.dumps([e.kind, e.at, e.fields], sort_keys=True) for e in read) == sorted(
        json.dumps([e.kind.encode("utf-8", "backslashreplace").decode(), e.at, dict(e.fields)], sort_keys=True)
        for e in kept
    )


def test_a_bad_event_in_the_writer_thread_leaves_it_writing(tmp_path: Path) -> None:
    """An event whose time is no date (NaN) reaches the background writer: it is dropped and the writer goes on."""
    url = str(tmp_path / "archive")
    with Archive(url, flush_s=0.05) as archive:
        archive.write(Event("sandbox.exec", math.nan, {"run": "r"}))
        time.sleep(0.3)
        archive.write(Event("sandbox.exec", 1.7e9, {"run": "r", "status": "ok"}))
        deadline = time.monotonic() + 10
        while not list(Path(url).rglob("*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert archive._thread.is_alive() and archive.unarchivable_events == 1
    assert [e.fields["status"] for e in read_archive(url, run="r")] == ["ok"]


def test_the_events_waiting_are_capped_the_oldest_dropped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = tmp_path / "archive"
    archive = Archive(str(url), flush_s=3600, max_buffered=2, max_pending=3)
    try:
        url.rename(tmp_path / "moved")
        url.write_text("not a directory")  # the storage is broken
        with caplog.at_level(logging.WARNING, "rollbox.telemetry._archive"):
            for i in range(5):
                archive.write(Event("sandbox.exec", 1.7e9 + i, {"run": "r", "n": i}))
            assert archive.flush() == 0 and archive.last_error is not None
            archive.write(Event("sandbox.exec", 1.7e9 + 5, {"run": "r", "n": 5}))
        with archive._write_lock:  # not in the middle of a flush by the background writer (max_buffered woke it)
            assert archive.dropped_events == 3 and len(archive._buffer) == 3
        (warning,) = [r for r in caplog.records if "dropped" in r.getMessage()]
        assert "could not write" in warning.getMessage()
        url.unlink()
        (tmp_path / "moved").rename(url)  # the storage is back: the three kept are written (by whichever flush)
    finally:
        archive.close()
    assert [e.fields["n"] for e in read_archive(str(url), run="r")] == [3, 4, 5]
    with pytest.raises(ValueError, match="max_pending"):
        Archive(str(url), max_buffered=10, max_pending=5)
