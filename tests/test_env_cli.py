"""``rollbox episode``: turns shown as they happen, JSON lines, trajectories, replays, and its exit codes; and an
episode job of ``rollbox run`` whose model sends what no tool can take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rollbox.cli._main import main
from rollbox.env import Observation, Trajectory, Turn, read_trajectories, write_trajectories
from test_env_tasks import write_calc_task
from test_scheduler_cli import lines, rollbox


def replay_file(path: Path, actions: list[dict[str, object]]) -> Path:
    """A trajectory file whose turns make ``actions`` in order, for ``--policy replay:PATH``."""
    turns = [
        Turn(turn=i + 1, action=action, observation=Observation(text=""), started_s=0.0, wall_s=0.0)
        for i, action in enumerate(actions)
    ]
    return write_trajectories(path, [Trajectory(episode_id="recorded", task_id="calc", task_path="", turns=turns)])


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_calc_task(tmp_path_factory.mktemp("calc")).path


def test_reference_episode_in_text_then_replayed_as_json(
    task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs.jsonl"
    assert main(["episode", str(task_dir), "--policy", "reference", "--trajectories", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "--- turn 1: write_file(" in out and "--- turn 3: submit({})" in out
    assert "=== submitted: passed, reward 1.0, 2/2 hidden tests passed, 3 turns" in out

    assert main(["episode", str(task_dir), "--policy", f"replay:{runs}", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["turn"]["turn"] for line in lines[:-1]] == [1, 2, 3]
    final = lines[-1]["trajectory"]
    assert final["reward"] == 1.0 and final["status"] == "passed" and final["end_reason"] == "submitted"


def test_budget_override_and_bad_arguments(task_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["episode", str(task_dir), "--policy", "reference", "--max-turns", "1", "--json"]) == 0
    final = json.loads(capsys.readouterr().out.splitlines()[-1])["trajectory"]
    assert final["end_reason"] == "max_turns" and final["reward"] == 1.0  # the fix came in the one turn
    assert main(["episode", str(task_dir), "--policy", "greedy"]) == 2
    assert "unknown policy 'greedy'" in capsys.readouterr().err
    assert main(["episode", str(tmp_path), "--policy", "noop"]) == 2
    assert "task.toml" in capsys.readouterr().err
    assert main(["episode", str(task_dir), "--policy", "openai:m", "--base-url", "http://127.0.0.1:9/v1"]) == 1
    assert "ConnectError" in capsys.readouterr().err


def test_a_model_that_sends_what_crashed_step_fails_its_job_through_rollbox_run(task_dir: Path, tmp_path: Path) -> None:
    """Arguments nested 1,000 deep, a 2 MB command, a value nested 500 deep: through ``rollbox run`` they are the
    model's turns and its failure (reward 0.0, one attempt), never infra_error with a null reward."""
    actions = [
        {"name": "bash", "arguments": "[" * 1000 + "]" * 1000},
        {"name": "bash", "arguments": {"command": "x" * 2_000_000}},
        {"name": "bash", "arguments": {"command": json.loads("[" * 500 + "]" * 500)}},
        {"name": "submit", "arguments": {}},
    ]
    recorded = replay_file(tmp_path / "hostile.jsonl", actions)
    home = tmp_path / "home"
    done = rollbox(home, "run", str(task_dir), "--policy", f"replay:{recorded}", "--run-id", "hostile")
    assert done.returncode == 0, done.stderr
    (result,) = lines(home, "hostile")
    assert (result["status"], result["reward"], result["attempts"]) == ("failed", 0.0, 1), result
    (trajectory,) = read_trajectories(home / "runs" / "hostile" / str(result["trajectory"]))
    assert [t.observation.error for t in trajectory.turns] == [True, True, True, False]
