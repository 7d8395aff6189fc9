"""Trajectories as analysts read them: one Parquet row per episode, typed columns and turns as a nested list,
queried with pyarrow and DuckDB without parsing a string; and the file reads back exactly."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import rollbox
from rollbox.env import Trajectory, policy_from_name, read_trajectories, run_episode, write_trajectories
from rollbox.tasks import Task
from test_env_tasks import write_calc_task

pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed: pip install -e '.[parquet]'")


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Task, list[Trajectory]]:
    """A fixed episode (with a model's token counts recorded on its turns) and an unfixed one."""
    calc = write_calc_task(tmp_path_factory.mktemp("calc"))
    fixed = asyncio.run(run_episode(rollbox.make(calc), policy_from_name("reference")))
    for number, turn in enumerate(fixed.turns):
        turn.policy = {"prompt_tokens": 100 + number, "completion_tokens": 10, "token_ids": [1, 2], "logprobs": [-0.5]}
    unfixed = asyncio.run(run_episode(rollbox.make(calc), policy_from_name("noop")))
    return calc, [fixed, unfixed]


def test_parquet_trajectories_have_typed_columns_and_nested_turns(
    episodes: tuple[Task, list[Trajectory]], tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    _, trajectories = episodes
    path = write_trajectories(tmp_path / "episodes.parquet", trajectories)
    table = pq.ParquetFile(path).read(use_threads=False)
    schema = table.schema
    assert schema.field("reward").type == pa.float64() and schema.field("tests_passed").type == pa.int64()
    assert schema.field("turns").type.value_type.field("observation").type.field("exit_code").type == pa.int64()
    rows = table.to_pylist()
    fixed, unfixed = rows
    assert (fixed["task_id"], fixed["status"], fixed["reward"]) == ("calc", "passed", 1.0)
    assert (fixed["tests_passed"], fixed["tests_total"], fixed["num_turns"]) == (2, 2, 3)
    assert (fixed["prompt_tokens"], fixed["completion_tokens"]) == (100 + 101 + 102, 30)
    assert fixed["cpu_s"] > 0 and fixed["peak_memory_bytes"] > 0 and fixed["runtime"] is None
    assert [t["observation"]["tool"] for t in fixed["turns"]] == ["write_file", "run_tests", "submit"]
    assert (unfixed["status"], unfixed["reward"], unfixed["tests_passed"], unfixed["prompt_tokens"]) == (
        "failed",
        0.0,
        1,
        None,
    )
    assert [t.to_json() for t in read_trajectories(path)] == [t.to_json() for t in trajectories]


def test_duckdb_reads_episodes_and_turns_without_parsing_text(
    episodes: tuple[Task, list[Trajectory]], tmp_path: Path
) -> None:
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed: pip install -e '.[dev]'")
    _, trajectories = episodes
    path = write_trajectories(tmp_path / "episodes.parquet", trajectories)
    connection = duckdb.connect()
    per_task = connection.execute(
        "SELECT task_id, avg(reward), sum(tests_passed), sum(num_turns) FROM read_parquet(?) GROUP BY task_id",
        [str(path)],
    ).fetchall()
    assert per_task == [("calc", 0.5, 3, 4)]
    tools = connection.execute(
        "SELECT t.observation.tool, t.observation.exit_code FROM (SELECT unnest(turns) AS t FROM read_parquet(?)) "
        "ORDER BY t.started_s",
        [str(path)],
    ).fetchall()
    assert sorted(tool for tool, _ in tools) == ["run_tests", "submit", "submit", "write_file"]
    assert dict(tools)["run_tests"] == 0
