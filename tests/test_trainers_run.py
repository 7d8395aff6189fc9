"""``rollbox run`` as a trainer's user reads it: the summary at the end (mean reward, pass@k per task, wrong
answers apart from dead-policy jobs), one typed Parquet row per episode, events archived as ``rollbox serve``
archives them, and a model server that is down refused in seconds."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rollbox
from rollbox.cli._run_summary import pass_at_k
from rollbox.env import policy_from_name, run_episode, write_trajectories
from test_env_tasks import write_calc_task

ROLLBOX = [sys.executable, "-m", "rollbox"]


def rollbox_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLBOX_HOME": str(home)}
    return subprocess.run([*ROLLBOX, *args], check=False, capture_output=True, text=True, env=env, timeout=300)


def test_pass_at_k_is_the_unbiased_estimate() -> None:
    assert pass_at_k(4, 0, 1) == 0.0 and pass_at_k(4, 4, 2) == 1.0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25) and pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)


@pytest.mark.slow
def test_a_run_ends_with_its_summary_its_episodes_table_and_its_archive(tmp_path: Path) -> None:
    """Three tasks replayed: one fixed (passes), one submitted as it was (a wrong answer), one with nothing to
    replay (the policy cannot act: a dead-policy job, no reward)."""
    pytest.importorskip("pyarrow")
    duckdb = pytest.importorskip("duckdb")
    tasks = tmp_path / "tasks"
    fixed, wrong, dead = (write_calc_task(tasks / name, toml_extra="") for name in ("fixed", "wrong", "dead"))
    for task, name in ((fixed, "fixed"), (wrong, "wrong"), (dead, "dead")):
        toml = (task.path / "task.toml").read_text().replace('id = "calc"', f'id = "{name}"')
        (task.path / "task.toml").write_text(toml)
    recorded = [
        asyncio.run(run_episode(rollbox.make(rollbox.tasks.load_task(fixed.path)), policy_from_name("reference"))),
        asyncio.run(run_episode(rollbox.make(rollbox.tasks.load_task(wrong.path)), policy_from_name("noop"))),
    ]
    replay = write_trajectories(tmp_path / "replay.jsonl", recorded)
    home = tmp_path / "home"
    done = rollbox_cli(
        home, "run", str(tasks), "--policy", f"replay:{replay}", "--samples", "2", "--run-id", "r1", "--workers", "2"
    )
    assert done.returncode == 1, done.stderr  # the dead-policy jobs failed
    out = done.stdout
    assert "6 jobs; reward: mean 0.500 over 4 scored episodes" in out, out
    assert "2 passed, 2 wrong answers (failed 2); 2 dead-policy jobs" in out and "0 infra_error" in out, out
    rows = {
        line.split()[0]: line.split()[1:] for line in out.splitlines() if line.split()[:1] in (["fixed"], ["wrong"])
    }
    assert rows["fixed"][:4] == ["2", "2", "1.000", "1.000"] and rows["wrong"][:4] == ["2", "0", "0.000", "0.000"]
    assert any(line.startswith("dead ") and "(2 dead policy)" in line for line in out.splitlines()), out

    episodes = home / "runs" / "r1" / "episodes.parquet"
    query = (
        "SELECT task_id, count(*), sum(reward), sum(tests_passed), min(state), max(num_turns) "
        "FROM read_parquet(?) GROUP BY task_id ORDER BY task_id"
    )
    assert duckdb.connect().execute(query, [str(episodes)]).fetchall() == [
        ("dead", 2, None, None, "failed", None),
        ("fixed", 2, 2.0, 4, "completed", 3),
        ("wrong", 2, 0.0, 2, "completed", 1),
    ]
    import pyarrow.dataset as ds

    archived = ds.dataset(home / "archive", format="parquet", partitioning="hive").to_table()
    ends = archived.filter(ds.field("kind") == "episode.end").to_pylist()
    assert sorted(e["task"] for e in ends) == ["fixed", "fixed", "wrong", "wrong"]
    assert {str(e["run"]) for e in ends} == {"r1"}


def test_a_model_server_that_is_down_is_refused_in_seconds(tmp_path: Path) -> None:
    task = write_calc_task(tmp_path / "calc")
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    start = time.monotonic()
    done = rollbox_cli(
        tmp_path / "home", "run", str(task.path), "--policy", "openai:m", "--base-url", f"http://127.0.0.1:{port}/v1"
    )
    assert done.returncode == 2 and time.monotonic() - start < 15, (done.returncode, done.stderr)
    error = done.stderr.strip().splitlines()
    assert len(error) == 1 and f"model server at http://127.0.0.1:{port}/v1 does not answer" in error[0], error
