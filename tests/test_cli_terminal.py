"""What a candidate or a model controls, printed by ``rollbox grade`` and ``rollbox episode`` as real processes:
its file names, its program's output, its actions and the task's id reach the operator's terminal with every
control character shown as its escape, never acted on (no ESC/CSI/OSC sequence, no BEL)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from test_cli import make_function_task, rollbox
from test_env_cli import replay_file
from test_env_tasks import write_calc_task

#: What a terminal may act on: every C0 control but tab and newline, DEL, and the C1 controls.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: A clipboard write (OSC 52, ended by BEL), a clear screen and a recolour (CSI), a cursor move up, and a lone C1 CSI.
HOSTILE = "\x1b]52;c;aGk=\x07\x1b[2J\x1b[31m\x1b[1A\x9b0m"


def assert_inert(done: subprocess.CompletedProcess[str]) -> None:
    for stream in (done.stdout, done.stderr):
        assert not CONTROL.search(stream), stream
    assert "\\x1b]52;c;aGk=\\x07" in done.stdout  # shown, escaped, for the operator to read


def test_grade_shows_a_hostile_candidate_and_task_inertly(tmp_path: Path) -> None:
    task = make_function_task(tmp_path / "double")
    (task / "task.toml").write_text('id = "double\\u001b[8m"\n' + (task / "task.toml").read_text())
    solution = tmp_path / "solution"
    solution.mkdir()
    (solution / "sol.py").write_text(f"import sys\ndef double(x):\n    print({HOSTILE!r}, file=sys.stderr)\n")
    (solution / f"evil{HOSTILE}.py").write_text("def (:\n")  # unparsable: flagged by its path
    done = rollbox("grade", str(task), "--solution", str(solution))
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    assert "double\\x1b[8m: failed" in done.stdout and "flag unparsable_python: evil\\x1b]52" in done.stdout


def test_episode_shows_a_hostile_model_inertly(tmp_path: Path) -> None:
    task = write_calc_task(tmp_path / "calc").path
    actions = [
        {"name": "bash", "arguments": {"command": "printf '\\033]52;c;aGk=\\007\\033[2J\\a\\n'; echo two"}},
        {"name": "write_file", "arguments": {"path": f"evil{HOSTILE}.py", "content": "def (:\n"}},
        {"name": "submit", "arguments": {}},
    ]
    recorded = replay_file(tmp_path / "hostile.jsonl", actions)
    done = rollbox("episode", str(task), "--policy", f"replay:{recorded}")
    assert done.returncode == 0, done.stderr
    assert_inert(done)
    assert "\\x1b[2J\\x07\ntwo\n" in done.stdout  # the program's lines stay lines
    assert "flag unparsable_python: evil\\x1b]52" in done.stdout
