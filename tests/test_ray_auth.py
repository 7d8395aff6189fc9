"""``rollbox run --ray`` against real Ray clusters (a head with 2 CPUs, in a network namespace of the test's own,
isolated from whatever Ray ran on this machine before, as in test_ray_cluster): with Ray's token authentication
off and on; on, a driver without the token is refused in one line that says what to give it; no cluster at all
for ``--ray auto``, and nodes that cannot run rollbox, are one line too, never a traceback."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollbox.scheduler import JobState, JobStore
from test_ray_cluster import Cluster, isolated_environment, started_cluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _task(root: Path) -> Path:
    """A function task with its reference solution (the reference policy submits it)."""
    task = root / "tasks" / "double"
    for part in ("workspace", "tests", "solution"):
        (task / part).mkdir(parents=True)
    (task / "task.toml").write_text(
        'id = "double"\n[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "double"\n'
    )
    (task / "instruction.md").write_text("Make double(x) return twice x.\n")
    (task / "workspace" / "solution.py").write_text("def double(x):\n    raise NotImplementedError\n")
    (task / "solution" / "solution.py").write_text("def double(x):\n    return 2 * x\n")
    (task / "tests" / "cases.jsonl").write_text('{"args": [2], "expected": 4}\n')
    return task


def _run(
    prefix: list[str], task: Path, address: str, env: dict[str, str], home: Path, *, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    """``rollbox run TASK --samples 2 --ray ADDRESS`` (after ``prefix``: the namespace to run it in)."""
    argv = [*prefix, sys.executable, "-m", "rollbox", "run", str(task), "--samples", "2", "--ray", address]
    return subprocess.run(
        [*argv, "--run-id", "on-ray", "--archive", ""],
        env={**env, "ROLLBOX_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _train(
    prefix: list[str], task: Path, address: str, env: dict[str, str], home: Path, *, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    """``rollbox train --tasks TASK --no-validate --ray ADDRESS``, one iteration (after ``prefix``, as ``_run``)."""
    argv = [*prefix, sys.executable, "-m", "rollbox", "train", "--tasks", str(task), "--no-validate", "--ray", address]
    return subprocess.run(
        [*argv, "--iterations", "1", "--samples", "2", "--run-id", "on-ray"],
        env={**env, "ROLLBOX_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _ran_on_ray(done: subprocess.CompletedProcess[str], home: Path) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    store = JobStore(home / "jobs.db")
    try:
        results = store.results(run_id="on-ray")
        assert len(results) == 2
        assert all(r.state is JobState.COMPLETED and r.reward == 1.0 for _, r in results)
        assert all(str(r.output["node"]).startswith("ray:") for _, r in results)  # each ran on the cluster's node
    finally:
        store.close()


def _one_line(done: subprocess.CompletedProcess[str], command: str = "run") -> str:
    """The one line of ``rollbox COMMAND`` that says why it stopped (after the lines that say what it began)."""
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    begun = ("jobs;", "given:", "tasks x")
    lines = [
        line
        for line in done.stderr.splitlines()
        if line.startswith(f"rollbox {command}: ") and not any(what in line for what in begun)
    ]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def _inside(cluster: Cluster) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{cluster.ns}"]


def test_on_a_cluster_without_token_authentication(tmp_path: Path) -> None:
    task = _task(tmp_path)
    with started_cluster(tmp_path, token=None, nodes=()) as cluster:
        home = tmp_path / "home"
        _ran_on_ray(_run(_inside(cluster), task, cluster.address, cluster.env, home), home)


def test_on_a_cluster_with_token_authentication_the_driver_needs_its_token(tmp_path: Path) -> None:
    task = _task(tmp_path)
    with started_cluster(tmp_path, token=secrets.token_hex(32), nodes=()) as cluster:
        without = isolated_environment(tmp_path / "elsewhere", token=None)
        line = _one_line(_run(_inside(cluster), task, cluster.address, without, tmp_path / "refused"))
        assert "token authentication" in line and "RAY_AUTH_TOKEN" in line, line
        home = tmp_path / "home"  # given the token, as its nodes have it
        _ran_on_ray(_run(_inside(cluster), task, cluster.address, cluster.env, home), home)


@pytest.mark.parametrize("command", ["run", "train"])
def test_ray_auto_with_no_cluster_says_what_it_tried_and_what_to_do(tmp_path: Path, command: str) -> None:
    task = _task(tmp_path)
    (tmp_path / "ray").mkdir()
    env = isolated_environment(tmp_path / "home", token=None, RAY_TMPDIR=str(tmp_path / "ray"))
    # Its own pid and network namespaces: no Ray process of anyone else's on this machine is found or reached.
    alone = ["unshare", "--pid", "--fork", "--mount-proc", "--net"]
    line = _one_line(_COMMANDS[command](alone, task, "auto", env, tmp_path / "rollbox"), command)
    assert "no Ray cluster found for --ray auto" in line and "--ray HOST:PORT" in line, line
    assert "ray start --head" in line, line


_COMMANDS = {"run": _run, "train": _train}


@pytest.mark.parametrize(
    ("command", "left"),
    [("run", "recorded"), ("train", "recorded"), ("run", "RAY_ADDRESS"), ("run", "given")],
)
def test_a_cluster_that_is_gone_is_one_line_at_once(tmp_path: Path, command: str, left: str) -> None:
    """No cluster runs, but its address is still about: recorded by a ``ray start`` whose head was killed (no
    ``ray stop`` to forget it), left in ``$RAY_ADDRESS``, or given. ``ray.init`` waits for minutes there, printing
    Ray's warnings; rollbox says at once what it tried and what to do."""
    task = _task(tmp_path)
    (tmp_path / "ray" / "ray").mkdir(parents=True)
    if left == "recorded":  # where Ray keeps it, under $RAY_TMPDIR
        (tmp_path / "ray" / "ray" / "ray_current_cluster").write_text("127.0.0.1:6399\n")
    extra = {"RAY_ADDRESS": "127.0.0.1:6399"} if left == "RAY_ADDRESS" else {}
    env = isolated_environment(tmp_path / "home", token=None, RAY_TMPDIR=str(tmp_path / "ray"), **extra)
    alone = ["unshare", "--pid", "--fork", "--mount-proc", "--net"]  # nothing of anyone else's listens there
    address = "127.0.0.1:6399" if left == "given" else "auto"
    began = time.monotonic()
    done = _COMMANDS[command](alone, task, address, env, tmp_path / "rollbox", timeout=120)
    line = _one_line(done, command)
    assert time.monotonic() - began < 60, done.stderr[-3000:]
    origin = {"recorded": "'ray start' last started", "RAY_ADDRESS": "$RAY_ADDRESS", "given": "--ray"}[left]
    assert "no Ray cluster answers at 127.0.0.1:6399" in line and origin in line, line
    assert "ray start --head" in line and "--ray HOST:PORT" in line, line


def test_nodes_that_cannot_run_rollbox_are_one_line(tmp_path: Path) -> None:
    task = _task(tmp_path)
    broken = tmp_path / "broken" / "rollbox"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('this node has no rollbox')\n")
    with started_cluster(tmp_path, token=None, nodes=(), PYTHONPATH=str(broken.parent)) as cluster:
        line = _one_line(_run(_inside(cluster), task, cluster.address, cluster.env, tmp_path / "home"))
    assert "could not start rollbox's worker there" in line and "pip install" in line, line
