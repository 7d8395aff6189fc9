"""``rollbox train --ray ADDRESS``: the loop's rollouts on a real Ray cluster (a head and two worker nodes, started by
the test in a network namespace of its own, as in test_ray_cluster), through the scheduler's Ray backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rollbox.scheduler import JobState, JobStore
from rollbox.tasks import humaneval_tasks
from test_ray_cluster import Cluster, cluster  # noqa: F401  (the fixture)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_rollbox_train_runs_its_rollouts_on_the_nodes_of_a_ray_cluster(tmp_path: Path, cluster: Cluster) -> None:  # noqa: F811
    home = tmp_path / "home"
    found = humaneval_tasks(tmp_path / "humaneval")
    tasks = [str(found[f"HumanEval/{n}"]) for n in (0, 2)]
    argv = [sys.executable, "-m", "rollbox", "train", "--ray", cluster.address, "--tasks", *tasks, "--no-validate",
            "--iterations", "2", "--samples", "2", "--run-id", "on-ray", "--json"]  # fmt: skip
    done = subprocess.run(
        cluster.inside(*argv), env={**cluster.env, "ROLLBOX_HOME": str(home)}, capture_output=True, text=True,
        timeout=500, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    for arm in ("naive", "rollbox"):
        assert [s["infra_errors"] for s in summary["arms"][arm]["iterations"]] == [0, 0]
    store = JobStore(home / "jobs.db")
    try:
        results = store.results(run_id="on-ray")
        assert len(results) == 2 * 2 * 2 * 2  # iterations x arms x tasks x samples
        assert {job.kind for job, _ in results} == {"rollout"}
        assert all(r.state is JobState.COMPLETED and r.output["node"] for _, r in results)  # each ran on a node
        assert all("verdict" in r.output and "naive" in r.output for _, r in results)
    finally:
        store.close()
