"""``rollbox run``, ``rollbox jobs`` and ``rollbox runs``: results files, resumption after Ctrl-C, the job store's
views."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROLLBOX = [sys.executable, "-m", "rollbox"]


def make_task(root: Path, name: str) -> Path:
    task = root / name
    (task / "workspace").mkdir(parents=True)
    (task / "workspace" / "solution.py").write_text("print('todo')\n")
    (task / "solution").mkdir()
    (task / "solution" / "solution.py").write_text("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n")
    (task / "tests").mkdir()
    (task / "tests" / "cases.jsonl").write_text(json.dumps({"input": "1 2\n", "output": "3\n"}) + "\n")
    (task / "task.toml").write_text(f'id = "{name}"\n[grading]\nrunner = "stdio"\ncommand = "python3 solution.py"\n')
    return task


def rollbox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLBOX_HOME": str(home)}
    return subprocess.run([*ROLLBOX, *args], check=False, capture_output=True, text=True, env=env, timeout=300)


def lines(home: Path, run_id: str) -> list[dict[str, object]]:
    text = (home / "runs" / run_id / "results.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.slow
def test_run_writes_one_result_per_task_and_sample_and_a_rerun_redoes_nothing(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", "add")
    make_task(tmp_path / "tasks", "sum")
    home = tmp_path / "home"
    done = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "reference", "--samples", "2", "--run-id", "r1")
    assert done.returncode == 0, done.stderr
    assert "4/4" in done.stderr and "run r1: 4 jobs" in done.stderr
    got = lines(home, "r1")
    assert [(x["task_id"], x["sample"], x["status"], x["reward"]) for x in got] == [
        ("add", 0, "passed", 1.0),
        ("add", 1, "passed", 1.0),
        ("sum", 0, "passed", 1.0),
        ("sum", 1, "passed", 1.0),
    ]
    again = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "reference", "--samples", "2", "--run-id", "r1")
    assert again.returncode == 0 and lines(home, "r1") == got  # nothing was run again
    listed = rollbox(home, "jobs", "--run", "r1", "--json")
    jobs = [json.loads(line) for line in listed.stdout.splitlines()]
    assert len(jobs) == 4 and {j["attempts"] for j in jobs} == {1} and {j["state"] for j in jobs} == {"completed"}
    shown = rollbox(home, "jobs", "show", str(jobs[0]["id"]))
    assert "pending -> scheduled" in shown.stdout.replace("  ", " ") or "-> scheduled" in shown.stdout
    assert "running -> grading" in shown.stdout and "grading -> completed" in shown.stdout
    assert "#1" in shown.stdout and "status passed" in shown.stdout
    runs = rollbox(home, "runs")
    assert runs.stdout.startswith("r1") and "4 jobs" in runs.stdout and "completed 4" in runs.stdout
    events = (home / "runs" / "r1" / "events.jsonl").read_text().splitlines()
    assert sum(json.loads(e)["kind"] == "job.transition" for e in events) == 4 * 5
    refused = rollbox(home, "run", str(tmp_path / "tasks"), "--policy", "noop")
    assert refused.returncode == 2 and "needs episodes" in refused.stderr


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    make_task(tmp_path / "tasks", "add")
    home = tmp_path / "home"
    args = [*ROLLBOX, "run", str(tmp_path / "tasks"), "--samples", "40", "--run-id", "r", "--workers", "1"]
    child = subprocess.Popen(args, env={**os.environ, "ROLLBOX_HOME": str(home)}, stderr=subprocess.PIPE, text=True)
    results = home / "runs" / "r" / "results.jsonl"
    deadline = time.monotonic() + 120
    while not (results.exists() and len(results.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and child.poll() is None
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, stderr = child.communicate(timeout=60)
    assert child.returncode == 130, stderr
    assert "resume with --run-id r" in stderr
    before = lines(home, "r")
    assert 3 <= len(before) < 40
    done = rollbox(home, "run", str(tmp_path / "tasks"), "--samples", "40", "--run-id", "r", "--workers", "1")
    assert done.returncode == 0, done.stderr
    after = lines(home, "r")
    assert sorted(x["sample"] for x in after) == list(range(40))  # type: ignore[type-var]
    assert {x["status"] for x in after} == {"passed"}
    finished = {x["job_id"] for x in before}
    assert all(x["attempts"] == 1 for x in after if x["job_id"] in finished)  # finished work was not redone
    states = json.loads(rollbox(home, "runs", "--json").stdout)["counts"]
    assert states == {"completed": 40}
