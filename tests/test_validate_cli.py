"""``rollbox validate`` from the command line: its JSON contract, the cache, and the HTML report."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollbox.cli import main
from rollbox.curate import Reason, ReasonCode, _validate
from rollbox.curate._reference import Reference
from rollbox.tasks import Task

#: Many gradings each; a loaded machine makes them slow.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SIGN = "def sign(n):\n    if n > 0:\n        return 1\n    if n < 0:\n        return -1\n    return 0\n"
CASES = "".join(f'{{"args": [{n}], "expected": {(n > 0) - (n < 0)}}}\n' for n in (5, -5, 0, 2, -9))


def task(root: Path, name: str, solution: str = SIGN) -> Path:
    path = root / name
    for relative, text in {
        "workspace/sol.py": "def sign(n):\n    pass\n",
        "solution/sol.py": solution,
        "tests/cases.jsonl": CASES,
        "task.toml": '[grading]\nrunner = "function"\nmodule = "sol.py"\nentry_point = "sign"\n',
    }.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    return path


def rollbox(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLBOX_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "rollbox", "validate", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


def test_json_cache_and_report(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    task(tasks, "good")
    task(tasks, "bad", SIGN.replace("return -1", "return 1"))
    home = tmp_path / "home"
    report = tmp_path / "report.html"
    first = rollbox(home, str(tasks), "--json", "--no-pressure", "--runs", "2", "--report", str(report))
    assert first.returncode == 1, first.stderr  # a task is rejected
    out = json.loads(first.stdout)
    by_id = {t["task_id"]: t for t in out["tasks"]}
    assert set(by_id) == {"good", "bad"}
    assert by_id["good"]["decision"] == "admit" and by_id["good"]["reasons"] == []
    assert by_id["bad"]["decision"] == "reject"
    assert {"code", "detail"} == set(by_id["bad"]["reasons"][0])
    assert all(r["code"] in {c.value for c in ReasonCode} for t in out["tasks"] for r in t["reasons"])
    assert "reference_fails" in {r["code"] for r in by_id["bad"]["reasons"]}
    assert not any(t["cached"] for t in out["tasks"])
    page = report.read_text()
    assert page.startswith("<!doctype html>") and "reference_fails" in page and "<script" not in page

    started = time.monotonic()
    second = rollbox(home, str(tasks), "--json", "--no-pressure", "--runs", "2")
    again = json.loads(second.stdout)
    assert all(t["cached"] for t in again["tasks"])
    assert [t["decision"] for t in again["tasks"]] == [t["decision"] for t in out["tasks"]]
    assert time.monotonic() - started < 30  # no grading at all: an interpreter's start and the hashing

    (tasks / "good" / "tests" / "cases.jsonl").write_text(CASES + '{"args": [7], "expected": 1}\n')
    third = json.loads(rollbox(home, str(tasks / "good"), "--json", "--no-pressure", "--runs", "2").stdout)
    assert third["tasks"][0]["cached"] is False  # its content changed
    other = json.loads(rollbox(home, str(tasks / "bad"), "--json", "--no-pressure", "--runs", "3").stdout)
    assert other["tasks"][0]["cached"] is False  # other options


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    result = rollbox(tmp_path, str(tmp_path / "nothing"))
    assert result.returncode == 2 and "does not exist" in result.stderr
    (tmp_path / "empty").mkdir()
    result = rollbox(tmp_path, str(tmp_path / "empty"))
    assert result.returncode == 2 and "neither a task directory" in result.stderr
    result = rollbox(tmp_path, str(task(tmp_path, "t")), "--runs", "0")
    assert result.returncode == 2 and "--runs: must be a whole number from 1" in result.stderr


def test_a_fault_in_one_task_is_its_validation_error_not_the_runs_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = tmp_path / "tasks"
    task(tasks, "good")
    task(tasks, "broken")
    (tasks / "broken" / "tests" / "cases.jsonl").write_text(CASES + '{"args": [7], "expected": 1}\n')  # no duplicate
    home = tmp_path / "home"
    monkeypatch.setenv("ROLLBOX_HOME", str(home))
    plain = _validate.find_leaks
    fault: list[BaseException] = [KeyboardInterrupt()]

    async def find_leaks(checked: Task, reference: Reference | None) -> list[Reason]:
        if checked.id != "broken":
            return await plain(checked, reference)
        waited = time.monotonic()
        while not list((home / "validate").glob("*.json")) and time.monotonic() - waited < 120:
            await asyncio.sleep(0.1)  # until the other task's report is kept
        raise fault.pop(0)

    monkeypatch.setattr(_validate, "find_leaks", find_leaks)
    args = ["validate", str(tasks), "--json", "--no-pressure", "--runs", "2"]
    # Interrupted: the task that finished first was kept as it finished.
    assert main(args) == 130
    # A fault of rollbox's in one task (here, planted) is that task's validation_error, and the run goes on.
    fault.append(RuntimeError("a planted fault"))
    assert main(args) == 3  # not 1: no task's tests were found wanting
    by_id = {t["task_id"]: t for t in json.loads(capsys.readouterr().out)["tasks"]}
    assert by_id["good"]["decision"] == "admit" and by_id["good"]["cached"] is True
    assert by_id["broken"]["decision"] == "reject"
    (reason,) = by_id["broken"]["reasons"]
    assert reason["code"] == "validation_error" and reason["detail"].startswith("validation failed in rollbox (")
    assert reason["detail"].endswith("): RuntimeError: a planted fault"), reason
