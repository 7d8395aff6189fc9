"""``rollbox tasks``: import with a summary and exit status, list and show as tables and JSON, rehash, help."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from rollbox.cli import main

ROLLBOX = [sys.executable, "-m", "rollbox"]
PROBLEM = {"id": "p1", "statement": "Print 6.", "tests": [{"input": "", "output": "6\n"}], "solutions": ["print(6)"]}


@pytest.fixture(autouse=True)
def rollbox_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLBOX_HOME", str(tmp_path / "rollbox-home"))


def problems(tmp_path: Path, *extra: str) -> Path:
    source = tmp_path / "problems.jsonl"
    lines = [json.dumps(PROBLEM), json.dumps({**PROBLEM, "id": "p2", "solutions": None}), *extra]
    source.write_text("\n".join(lines) + "\n")
    return source


def test_import_summarizes_and_exits_1_when_anything_was_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = problems(tmp_path, '{"id": "p3"}')
    assert main(["tasks", "import", "stdio", str(source), str(tmp_path / "out")]) == 1
    out, err = capsys.readouterr()
    assert out == f"imported 2 tasks into {tmp_path / 'out'}, refused 1\n"
    assert err == f"refused {source}:3: p3: missing key 'statement': give the problem statement (a string)\n"
    assert main(["tasks", "import", "stdio", str(source), str(tmp_path / "out"), "--force", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in report["imported"]] == ["p1", "p2"] and report["refused"][0]["id"] == "p3"
    source.write_text(json.dumps(PROBLEM) + "\n")
    assert main(["tasks", "import", "stdio", str(source), str(tmp_path / "again")]) == 0
    assert main(["tasks", "import", "stdio", str(tmp_path / "nope.jsonl"), str(tmp_path / "x")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_list_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["tasks", "import", "stdio", str(problems(tmp_path)), str(tmp_path / "out")])
    capsys.readouterr()
    assert main(["tasks", "list", str(tmp_path / "out")]) == 0
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split() == ["ID", "RUNNER", "CHECKS", "LIMITS", "RUNTIME", "WORKSPACE", "TESTS", "REFERENCE", "HASH"]
    assert first.split()[:4] == ["p1", "stdio", "1", "cases"] and first.split()[-2:] == ["yes", "ok"]
    assert second.split()[-2:] == ["no", "ok"]
    assert main(["tasks", "show", str(tmp_path / "out" / "p1"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == "p1" and shown["grading"]["command"] == ["python3", "solution.py"]
    assert shown["workspace"]["state"] == "ok" and shown["solution"] == {"files": 1, "bytes": 8}
    assert shown["environment"]["layer_key"] and shown["limits"]["network"] == "none"
    assert main(["tasks", "show", str(tmp_path / "out" / "p1")]) == 0
    table = capsys.readouterr().out
    assert "grading.runner" in table and "workspace.state           ok" in table
    # A changed workspace: list and show say so and exit 1; rehash records the new state.
    (tmp_path / "out" / "p2" / "workspace" / "solution.py").write_text("print(6)\n")
    assert main(["tasks", "list", str(tmp_path / "out"), "--json"]) == 1
    states = [json.loads(line)["workspace"]["state"] for line in capsys.readouterr().out.splitlines()]
    assert states == ["ok", "changed"]
    assert main(["tasks", "show", str(tmp_path / "out" / "p2")]) == 1
    capsys.readouterr()
    assert main(["tasks", "rehash", str(tmp_path / "out" / "p2")]) == 0
    assert "workspace sha256" in capsys.readouterr().out
    assert main(["tasks", "show", str(tmp_path / "out" / "p2")]) == 0
    # A task that does not load is a row of its own in list, and exit status 2 in show.
    (tmp_path / "out" / "p1" / "task.toml").write_text("[grading\n")
    assert main(["tasks", "list", str(tmp_path / "out")]) == 1
    assert "invalid  task.toml: not valid TOML" in capsys.readouterr().out
    assert main(["tasks", "show", str(tmp_path / "out" / "p1")]) == 2


def test_help_teaches() -> None:
    top = subprocess.run([*ROLLBOX, "tasks", "--help"], capture_output=True, text=True, check=True).stdout
    for verb in ("import", "list", "show", "rehash", "scrub", "audit"):
        assert f"rollbox tasks {verb}" in top
    imported = subprocess.run([*ROLLBOX, "tasks", "import", "--help"], capture_output=True, text=True, check=True)
    for word in ("humaneval", "stdio", "harbor", "swebench", "--force", "exit status"):
        assert word in imported.stdout


def test_the_progress_bar_is_drawn_only_on_a_terminal(tmp_path: Path) -> None:
    source = problems(tmp_path)
    command = [*ROLLBOX, "tasks", "import", "stdio", str(source)]
    piped = subprocess.run([*command, str(tmp_path / "a")], capture_output=True, text=True, check=False)
    assert piped.returncode == 0 and piped.stderr == ""
    leader, follower = pty.openpty()
    with subprocess.Popen([*command, str(tmp_path / "b")], stdout=subprocess.PIPE, stderr=follower) as process:
        os.close(follower)
        drawn = b""
        while chunk := _read(leader):
            drawn += chunk
        assert process.wait(timeout=60) == 0
    os.close(leader)
    assert b"importing [" in drawn and b"2/2" in drawn


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: the other side closed
        return b""
