"""``rollbox validate`` from the command line: its JSON contract, the cache, and the HTML report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollbox.curate import ReasonCode

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
