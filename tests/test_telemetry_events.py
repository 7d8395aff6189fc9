"""The events interface: sinks for the process and for a context, JSONL that survives the writer."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollbox import telemetry
from rollbox.telemetry import Event


class Collect:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def write(self, event: Event) -> None:
        self.events.append(event)


def test_emit_reaches_process_and_context_sinks_and_nothing_outside_the_context() -> None:
    everywhere, scoped = Collect(), Collect()
    telemetry.add_sink(everywhere)
    try:
        telemetry.emit("test.before", n=0)
        with telemetry.recording(scoped):
            telemetry.emit("test.inside", n=1)
        telemetry.emit("test.after", n=2)
    finally:
        telemetry.remove_sink(everywhere)
    telemetry.emit("test.unheard")
    assert [e.kind for e in everywhere.events] == ["test.before", "test.inside", "test.after"]
    assert [(e.kind, dict(e.fields)) for e in scoped.events] == [("test.inside", {"n": 1})]


def test_a_context_sink_follows_the_tasks_started_inside_it_only() -> None:
    scoped = Collect()

    async def work(name: str) -> None:
        await asyncio.sleep(0)
        telemetry.emit("test.task", name=name)

    async def main() -> None:
        with telemetry.recording(scoped):
            inside = asyncio.create_task(work("inside"))
        outside = asyncio.create_task(work("outside"))
        await asyncio.gather(inside, outside)

    asyncio.run(main())
    assert [e.fields["name"] for e in scoped.events] == ["inside"]


def test_jsonl_sink_writes_one_flushed_line_per_event(tmp_path: Path) -> None:
    path = tmp_path / "run" / "events.jsonl"
    with telemetry.JsonlSink(path) as sink, telemetry.recording(sink):
        telemetry.emit("job.transition", job="j1", to="running")
        # Flushed at once: a reader sees the line before the sink is closed.
        assert json.loads(path.read_text())["job"] == "j1"
        telemetry.emit("job.transition", job="j1", to="completed", extra=Path("/x"))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["to"] for line in lines] == ["running", "completed"]
    assert lines[1]["kind"] == "job.transition" and lines[1]["extra"] == "/x" and lines[0]["at"] <= lines[1]["at"]
    sink.write(Event("late", 0.0))  # after close: dropped, not an error
    assert len(path.read_text().splitlines()) == 2


def test_bound_fields_reach_every_event_inside_and_yield_to_the_events_own() -> None:
    scoped = Collect()

    async def below() -> None:  # a layer that knows nothing of tenants
        await asyncio.sleep(0)
        telemetry.emit("episode.turn", turn=1)

    async def main() -> None:
        with telemetry.recording(scoped), telemetry.bound(tenant="a", run="r1"):
            await asyncio.create_task(below())
            telemetry.emit("sandbox.exec", run="own")
        telemetry.emit("outside")

    asyncio.run(main())
    assert [dict(e.fields) for e in scoped.events] == [
        {"tenant": "a", "run": "r1", "turn": 1},
        {"tenant": "a", "run": "own"},
    ]


class Broken:
    def write(self, event: Event) -> None:
        raise RuntimeError("this sink is broken")


def test_a_failing_sink_reaches_neither_the_caller_nor_the_sinks_after_it(caplog: pytest.LogCaptureFixture) -> None:
    after = Collect()
    full = telemetry.JsonlSink("/dev/full")  # every write: ENOSPC
    with telemetry.recording(full), telemetry.recording(Broken()), telemetry.recording(after):
        telemetry.emit("sandbox.exec", status="ok")
        telemetry.emit("sandbox.exec", status="ok")
    full.close()
    assert [e.kind for e in after.events] == ["sandbox.exec", "sandbox.exec"]
    assert full.failed_writes == 2 and full.last_error is not None and "No space left" in full.last_error
    # The sink that raised is logged once, not once per event.
    (record,) = caplog.records
    assert record.getMessage().startswith("telemetry sink Broken failed on a 'sandbox.exec' event")
    assert record.exc_info is not None and "this sink is broken" in str(record.exc_info[1])


def test_a_line_cut_short_by_a_failed_write_is_ended_before_the_next(tmp_path: Path) -> None:
    """A write that fits only in part (here: past the file size limit) leaves a torn line; the next event that can
    be written starts a line of its own, so only the event that failed is lost."""
    path = tmp_path / "events.jsonl"
    script = f"""
import resource, signal
from rollbox.telemetry import Event, JsonlSink
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
sink = JsonlSink({str(path)!r})
sink.write(Event("first", 1.0))
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (100, hard))
sink.write(Event("second", 2.0, {{"pad": "x" * 200}}))
assert sink.failed_writes == 1, sink.last_error
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
sink.write(Event("third", 3.0))
assert sink.failed_writes == 1 and sink.last_error is None
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    lines = path.read_bytes().split(b"\n")
    assert json.loads(lines[0])["kind"] == "first" and lines[1].startswith(b'{"kind":"second"') and len(lines[1]) < 100
    assert json.loads(lines[2])["kind"] == "third" and lines[3:] == [b""]


_WRITER = """
import sys, time
from pathlib import Path
from rollbox.scheduler._events import RunEvents
from rollbox.telemetry import Event, JsonlSink
kind, home, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
path = home / "runs" / "r" / "events.jsonl"
while not go.exists():
    time.sleep(0.001)
pad, n, until = kind * 300, 0, time.monotonic() + 1.0
scheduler = RunEvents(home)
while time.monotonic() < until:
    if kind == "scheduler":  # a scheduler's RunEvents, flushed every tick: more than 64 KiB of lines each
        for _ in range(300):
            scheduler.write(Event("job.transition", 1.7e9, {"run_id": "r", "n": n, "pad": pad}))
            n += 1
        scheduler.flush()
        time.sleep(0.002)
    else:  # a service worker's JsonlSink (its _RunLog), opened again and again (each open ends a torn last line)
        with JsonlSink(path) as sink:
            for _ in range(20):
                sink.write(Event("sandbox.exec", 1.7e9, {"run": "r", "n": n, "pad": pad}))
                n += 1
scheduler.close()
print(n)
"""


def test_writers_in_two_processes_appending_to_one_run_file_leave_every_line_whole(tmp_path: Path) -> None:
    """A scheduler's RunEvents and a service worker's sink append to the same events.jsonl at once: each line is
    written whole in one write to a file opened to append, and ending a torn line appends, so no line of one
    lands inside a line of the other."""
    home, go = tmp_path / "home", tmp_path / "go"
    (home / "runs" / "r").mkdir(parents=True)
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, kind, str(home), str(go)], stdout=subprocess.PIPE, text=True)
        for kind in ("scheduler", "worker")
    ]
    time.sleep(0.5)  # both imported and waiting
    go.touch()
    written = [int(w.communicate(timeout=120)[0]) for w in writers]
    assert [w.returncode for w in writers] == [0, 0]
    lines = [line for line in (home / "runs" / "r" / "events.jsonl").read_bytes().split(b"\n") if line]
    events = [json.loads(line) for line in lines]  # every line is one whole event
    assert sorted(e["n"] for e in events if e["kind"] == "job.transition") == list(range(written[0]))
    assert sorted(e["n"] for e in events if e["kind"] == "sandbox.exec") == list(range(written[1]))


def test_a_run_file_write_cut_short_never_leaves_the_rest_of_its_line_for_a_later_write(tmp_path: Path) -> None:
    """A flush that the file takes only in part (here: past the file size limit; a full disk alike) must not leave
    the rest of the line it cut to a later write, after whatever other writers appended meanwhile (a service
    worker that starts ends the torn line and appends its own): only the cut event is lost, every other line
    whole."""
    home = tmp_path / "home"
    path = home / "runs" / "r" / "events.jsonl"
    script = f"""
import resource, signal
from pathlib import Path
from rollbox.scheduler._events import RunEvents
from rollbox.telemetry import Event, JsonlSink
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
sink = RunEvents(Path({str(home)!r}))
sink.write(Event("first", 1.0, {{"run_id": "r"}}))
sink.flush()
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (Path({str(path)!r}).stat().st_size + 40, hard))
sink.write(Event("cut", 2.0, {{"run_id": "r", "pad": "x" * 200}}))
try:
    sink.flush()
    raise AssertionError("the flush past the file size limit did not fail")
except OSError:
    pass
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
with JsonlSink({str(path)!r}) as other:  # another writer of the run's file
    other.write(Event("other", 3.0, {{"run": "r"}}))
sink.write(Event("after", 4.0, {{"run_id": "r"}}))
sink.close()
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    parsed, torn = [], []
    for line in path.read_bytes().split(b"\n"):
        try:
            parsed.append(json.loads(line)["kind"]) if line else None
        except ValueError:
            torn.append(line)
    assert parsed == ["first", "other", "after"]
    assert len(torn) == 1 and torn[0].startswith(b'{"kind":"cut"') and len(torn[0]) == 40


class Flaky:
    """A sink that fails while ``failing`` is set."""

    def __init__(self) -> None:
        self.failing = True

    def write(self, event: Event) -> None:
        if self.failing:
            raise OSError("the sink's storage is gone")


def test_a_sink_that_recovers_and_fails_again_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    sink = Flaky()
    with telemetry.recording(sink):
        telemetry.emit("sandbox.exec")
        telemetry.emit("sandbox.exec")  # the same failure: not logged again
        sink.failing = False
        telemetry.emit("sandbox.exec")  # it recovered
        sink.failing = True
        telemetry.emit("sandbox.exec")  # days later, it fails again: logged
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "telemetry sink Flaky failed on a 'sandbox.exec' event"
    ] * 2
