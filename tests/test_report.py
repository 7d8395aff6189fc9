"""``rollbox report`` from a real service's archive (and from a run's JSONL), looked at in Chromium; ``rollbox top``
against the running service, and what it prints of a candidate's output."""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unicodedata
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollbox.cli._terminal import printable
from rollbox.cli._top import render
from rollbox.scheduler._events import RunEvents
from rollbox.server import ServerConfig
from rollbox.telemetry import Event, JsonlSink, LiveStats, render_report
from serving import double_task, running

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOT = Path(os.environ.get("ROLLBOX_REPORT_SCREENSHOT", Path(tempfile.gettempdir()) / "rollbox-report.png"))


def _rollbox(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLBOX_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "rollbox", *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.slow
def test_report_and_top_from_a_real_run(tmp_path: Path) -> None:
    config = ServerConfig(home=tmp_path, run="run-report-1", pool_size=2, tasks_dir=double_task(tmp_path))
    with running(config) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        for i in range(5):
            http.post(
                "/run_code", json={"code": f"import time; time.sleep({i / 20}); print({i})", "language": "python"}
            )
        http.post("/run_code", json={"code": "raise SystemExit('the-failure-log')", "language": "python"})
        for body in ("return x", "return 2 * x", "return x + x", "return x * 2", "return abs(2 * x)"):
            files = {"solution.py": f"def double(x):\n    {body}\n"}
            assert http.post("/v1/grade", json={"task": "double", "files": files}).status_code == 200
        top = subprocess.run(
            [sys.executable, "-m", "rollbox", "top", "--url", server.url, "--once"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert top.returncode == 0, top.stderr
        assert "run run-report-1" in top.stdout and "nonzero_exit" in top.stdout and "the-failure-log" in top.stdout
        assert "exec" in top.stdout and "ok" in top.stdout
    # The service flushed its archive when it stopped.
    output = tmp_path / "report.html"
    made = _rollbox("report", "run-report-1", "-o", str(output), home=tmp_path)
    assert made.returncode == 0, made.stderr
    page = output.read_text()
    assert "<svg" in page and "the-failure-log" in page and "run-report-1" in page and "<script" not in page
    assert 'aria-label="execution statuses"' in page and ">ok</text>" in page
    assert 'aria-label="reward over time"' in page and ">passed</text>" in page
    from_jsonl = _rollbox(
        "report",
        "run-report-1",
        "--events",
        str(tmp_path / "runs" / "run-report-1" / "events.jsonl"),
        "-o",
        str(tmp_path / "again.html"),
        home=tmp_path,
    )
    assert from_jsonl.returncode == 0 and "the-failure-log" in (tmp_path / "again.html").read_text()
    missing = _rollbox("report", "no-such-run", home=tmp_path)
    assert missing.returncode == 1 and "no events" in missing.stderr
    if Path(CHROMIUM).exists():
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
            page_ = browser.new_page(viewport={"width": 1150, "height": 1400})
            page_.goto(output.as_uri())
            assert page_.locator("svg").count() >= 3
            page_.screenshot(path=str(SCREENSHOT), full_page=True)
            browser.close()


@pytest.mark.parametrize("what", ["a directory", "nothing"])
def test_a_runs_events_that_cannot_be_read_are_named_with_the_path(tmp_path: Path, what: str) -> None:
    home = tmp_path / "home"
    events = home / "runs" / "r1" / "events.jsonl"
    events.parent.mkdir(parents=True)
    if what == "a directory":
        events.mkdir()
    done = _rollbox("report", "r1", "-o", str(tmp_path / "r1.html"), home=home)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    (line,) = done.stderr.splitlines()
    where = f"{events} (Is a directory)" if what == "a directory" else f"{home / 'archive'} (no archive at"
    assert line.startswith(f"rollbox report: cannot read the events at {where}"), line
    assert events.exists() == (what == "a directory")  # left as it was


@pytest.mark.parametrize("writer", ["RunEvents", "JsonlSink"])
def test_a_torn_line_costs_the_report_that_line_only_and_a_resumed_run_starts_a_line_of_its_own(
    tmp_path: Path, writer: str
) -> None:
    home = tmp_path / "home"
    path = home / "runs" / "r1" / "events.jsonl"

    def append(first: int, last: int) -> None:  # what one run (or its resumption) writes, as each writer does
        events = [
            Event("episode.end", 1.7e9 + i, {"run_id": "r1", "status": "passed", "reward": 1.0, "n": i})
            for i in range(first, last)
        ]
        sink = RunEvents(home) if writer == "RunEvents" else JsonlSink(path)
        for event in events:
            sink.write(event)
        if isinstance(sink, RunEvents):
            sink.flush()
        sink.close()

    append(0, 10)
    whole = path.read_bytes()
    last = whole.rindex(b"\n", 0, len(whole) - 1) + 1
    path.write_bytes(whole[: last + 30] + "é".encode()[:1])  # killed mid-line, inside a character
    append(10, 15)
    done = _rollbox("report", "r1", "--events", str(path), "-o", str(tmp_path / "r1.html"), home=home)
    assert done.returncode == 0, done.stderr
    assert "(14 events" in done.stdout  # 15 written, the one torn lost, the resumed run's all kept
    (warning,) = done.stderr.splitlines()
    assert warning.startswith("rollbox report: lines skipped as not events: 1 ") and f"{path}:10: " in warning


def test_the_report_reads_whichever_of_the_run_file_and_the_archive_holds_more_and_says_which(tmp_path: Path) -> None:
    from rollbox.telemetry import Archive

    home = tmp_path / "home"
    run_file = home / "runs" / "r2" / "events.jsonl"
    events = [Event("episode.end", 1.7e9 + i, {"run": "r2", "status": "passed", "reward": 1.0}) for i in range(100)]
    with Archive(str(home / "archive"), flush_s=3600) as archive:  # a killed run: its last flush never came
        for event in events[:10]:
            archive.write(event)
    with JsonlSink(run_file) as sink:
        for event in events:
            sink.write(event)

    def report(*args: str) -> str:
        done = _rollbox("report", "r2", *args, "-o", str(tmp_path / "r2.html"), home=home)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert report().endswith(f"(100 events, from {run_file})\n")
    assert report("--archive", str(home / "archive")).endswith(f"(10 events, from {home / 'archive'})\n")
    run_file.write_text("")  # the archive holds more: it is read
    assert report().endswith(f"(10 events, from {home / 'archive'})\n")
    missing = _rollbox("report", "r2", "--archive", "", home=home)  # the run's file only, and it holds none
    assert missing.returncode == 1 and "no events of run 'r2'" in missing.stderr


def _without_dac_override() -> None:
    """In the child, before it runs the command: root's power to read any file is dropped, so that a file's mode
    refuses root as it refuses anyone (capabilities 1 and 2, CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, taken out
    of the bounding set, which bounds what root holds after exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_the_report_says_in_one_line_that_the_archives_storage_refused_or_that_a_file_was_damaged(
    tmp_path: Path,
) -> None:
    """A file the storage refuses (here: one whose mode refuses the user who reports) is the storage's failure, said
    in one line that says what to check, never "no events" after a Python warning; a damaged file is skipped, said
    in one line too."""
    from rollbox.telemetry import Archive

    url = tmp_path / "home" / "archive"
    with Archive(str(url), flush_s=3600) as archive:
        for i in range(2):
            archive.write(Event("sandbox.exec", 1.7e9 + i, {"run": "r", "status": "ok"}))
            archive.flush()
    parts = sorted(url.rglob("*.parquet"))
    (parts[0].parent / "part-torn.parquet").write_bytes(parts[0].read_bytes()[:100])

    def report() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rollbox", "report", "r", "--archive", str(url), "-o", str(tmp_path / "r.html")],
            env={**os.environ, "ROLLBOX_HOME": str(tmp_path / "home")},
            preexec_fn=_without_dac_override if os.geteuid() == 0 else None,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    damaged = report()
    assert damaged.returncode == 0 and "(2 events" in damaged.stdout, damaged.stderr
    (line,) = damaged.stderr.splitlines()
    assert line.startswith("rollbox report: archive files skipped as not Parquet: 1 (damaged") and "torn" in line
    for part in url.rglob("*.parquet"):
        part.chmod(0)
    refused = report()
    assert refused.returncode == 2, refused.stderr
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"rollbox report: cannot read the events at {url} (the storage of the archive"), line
    assert "PermissionError" in line and "check its credentials" in line and "reachable" in line


def _card(page: str, name: str) -> str:
    match = re.search(rf'<div class="card">{name}<b>([^<]*)</b>', page)
    assert match, name
    return match.group(1)


def test_the_reports_figures_are_over_every_event_not_the_live_windows() -> None:
    """Half a 30-minute run's episodes were infra errors, all in its first 20 minutes; of 3,000 rewards the first
    1,000 were 0: the live figures' 10-minute and last-2,000 windows miss both, the report must not."""
    t0 = 1.7e9
    failing = [
        Event("episode.end", t0 + i * 4, {"run": "r", "status": "infra_error", "wall_s": 100.0}) for i in range(300)
    ]
    passing = [
        Event("episode.end", t0 + 1200 + i * 2, {"run": "r", "status": "passed", "reward": 1.0, "wall_s": 0.01})
        for i in range(300)
    ]
    page = render_report("r", failing + passing)
    assert _card(page, "infra error rate") == "50.0%"
    assert "<h3>episode</h3><p>p50 0.01 s · p90 100.0 s · p99 100.0 s · n=600</p>" in page
    live = LiveStats(clock=lambda: passing[-1].at)  # the dashboard keeps its window
    for event in failing + passing:
        live.write(event)
    assert live.snapshot()["infra_error_rate"] == 0.0

    scored = [
        Event(
            "episode.end",
            t0 + i,
            {
                "run": "r",
                "status": "passed" if i >= 1000 else "failed",
                "reward": float(i >= 1000),
                "wall_s": 0.01 if i >= 1000 else 50.0,
            },
        )
        for i in range(3000)
    ]
    page = render_report("r", scored)
    assert _card(page, "mean reward") == "0.667" and _card(page, "verdicts") == "3000"
    assert "<h3>episode</h3><p>p50 0.01 s · p90 50.0 s · p99 50.0 s · n=3000</p>" in page


EVIL = "\x1b]0;pwned-title\x07\x1b[2J\x1b[31mFAKE: all green\x1b[0m\x1b]52;c;ZWNobyBoaQ==\x07\x9b2J\rok"


def test_top_shows_a_candidates_escapes_and_never_sends_them_to_the_terminal() -> None:
    stats = LiveStats()
    stats.write(Event("sandbox.exec", time.time(), {"status": "nonzero_exit", "language": "python", "stderr": EVIL}))
    snap = {**stats.snapshot(), "run": f"run{EVIL}", "alerts": [{"name": "x", "severity": "page", "summary": EVIL}]}
    screen = render(snap)
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", screen), screen
    assert "\\x1b]0;pwned-title\\x07\\x1b[2J\\x1b[31mFAKE" in screen  # shown, to be read


@given(st.text())
def test_printable_escapes_exactly_the_controls_a_terminal_acts_on(text: str) -> None:
    # Unicode's "Cc" category is the C0 controls, DEL and the C1 controls: all but tab and newline are escaped.
    expected = "".join(f"\\x{ord(c):02x}" if unicodedata.category(c) == "Cc" and c not in "\t\n" else c for c in text)
    assert printable(text) == expected
