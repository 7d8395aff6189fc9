"""The events interface: sinks for the process and for a context, JSONL that survives the writer."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
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
