"""Crash recovery: a scheduler SIGKILLed at random moments, twice, then started again, loses no job and records
none twice; every result is what an uninterrupted run records. With exec jobs, and with episode jobs (whose
trajectories are the committed attempt's)."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rollbox.env import read_trajectories
from rollbox.scheduler import JobState, JobStore
from scheduler_helpers import real_tasks

CHILD = Path(__file__).with_name("scheduler_child.py")


def _start(home: Path, jobs: int, extra: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(CHILD), str(home), "run", str(jobs), *extra])


def _results(home: Path) -> int:
    try:
        with sqlite3.connect(home / "jobs.db", timeout=30) as db:
            return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:  # not made yet
        return 0


def _kill_when(child: subprocess.Popen[bytes], home: Path, results: int, rng: random.Random) -> int:
    """SIGKILL the child once the store holds ``results`` results, a random moment later; returns how many it held."""
    deadline = time.monotonic() + 120
    while _results(home) < results:
        assert child.poll() is None, f"the scheduler ended before it was killed (status {child.returncode})"
        assert time.monotonic() < deadline, "the scheduler made no progress"
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.05))  # anywhere: between jobs, in a commit, in a sandbox's start
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    return _results(home)


def _crash_twice_then_finish(tmp_path: Path, jobs: int, extra: list[str], steps: tuple[int, int]) -> tuple[Path, Path]:
    """The same run killed twice then finished (``crashed``), and uninterrupted (``calm``)."""
    rng = random.Random()
    crashed, calm = tmp_path / "crashed", tmp_path / "calm"
    child = _start(crashed, jobs, extra)
    first = _kill_when(child, crashed, rng.randint(*steps), rng)
    child = _start(crashed, jobs, extra)
    second = _kill_when(child, crashed, first + rng.randint(*steps), rng)
    assert first < second < jobs  # both kills fell in the middle of the run
    assert _start(crashed, jobs, extra).wait(timeout=300) == 0
    assert _start(calm, jobs, extra).wait(timeout=300) == 0
    return crashed, calm


def _outputs(home: Path, fields: Any) -> dict[str, tuple[Any, ...]]:
    store = JobStore(home / "jobs.db")
    try:
        found = {}
        for job, result in store.results(run_id="run"):
            assert job.key is not None and job.key not in found, f"two results for {job.key}"
            found[job.key] = (result.state.value, result.status, result.reward, *fields(home, job, result))
        return found
    finally:
        store.close()


def _check_the_store(home: Path, jobs: int) -> None:
    with sqlite3.connect(home / "jobs.db") as db:
        (count,) = db.execute("SELECT COUNT(*) FROM jobs").fetchone()
        (results,) = db.execute("SELECT COUNT(*) FROM results").fetchone()
        ends = dict(db.execute("SELECT outcome, COUNT(*) FROM attempts GROUP BY outcome").fetchall())
        reasons = [r for (r,) in db.execute("SELECT reason FROM transitions WHERE source IN ('scheduled', 'running')")]
        (double,) = db.execute(
            "SELECT COUNT(*) FROM (SELECT job_id FROM transitions WHERE target = 'completed' "
            "GROUP BY job_id HAVING COUNT(*) > 1)"
        ).fetchone()
    assert count == results == jobs  # resubmitting after each crash added no job (idempotency keys)
    assert double == 0
    # Jobs that were leased when a kill came were returned by the next scheduler (their owner's process was gone),
    # each such attempt recorded.
    assert ends.get("lease_expired", 0) >= 1 and ends["ok"] == jobs
    returned = [r for r in reasons if r is not None]
    assert returned and all("which held its lease, is gone" in r for r in returned)  # at once, not at expiry
    assert set(ends) <= {"ok", "lease_expired"}
    store = JobStore(home / "jobs.db")
    assert {j.state for j in store.jobs(run_id="run")} == {JobState.COMPLETED}
    store.close()


@pytest.mark.slow
def test_killed_twice_then_restarted_every_job_completes_exactly_once(tmp_path: Path) -> None:
    jobs = 300
    crashed, calm = _crash_twice_then_finish(tmp_path, jobs, [], (10, 80))
    printed = lambda home, job, result: (result.output["stdout"], result.output["stderr"])  # noqa: E731
    got, expected = _outputs(crashed, printed), _outputs(calm, printed)
    assert len(expected) == jobs and all(v[1] == "ok" for v in expected.values())
    assert got == expected  # none lost, none twice, each the same as without crashes
    _check_the_store(crashed, jobs)


@pytest.mark.slow
def test_episode_jobs_killed_twice_then_restarted_each_complete_once_with_their_trajectory(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    jobs, tasks = 36, sorted(str(p) for p in real_tasks(tmp_path_factory, calc=False).iterdir())
    crashed, calm = _crash_twice_then_finish(tmp_path, jobs, ["30", "--episodes", *tasks], (3, 8))

    def graded(home: Path, job: Any, result: Any) -> tuple[Any, ...]:
        (trajectory,) = read_trajectories(home / "runs" / "run" / result.output["trajectory"])
        # The file is the committed attempt's (an attempt killed after writing it was run again and replaced it).
        assert trajectory.episode_id == f"run-job{job.id}-attempt{job.attempts}"
        assert (trajectory.reward, trajectory.status) == (result.reward, result.status)
        return (job.payload["policy"], result.output["verdict"]["passed"], len(trajectory.turns))

    got, expected = _outputs(crashed, graded), _outputs(calm, graded)
    assert len(expected) == jobs
    assert {(v[1], v[2], v[3]) for v in expected.values()} == {("passed", 1.0, "reference"), ("failed", 0.0, "noop")}
    assert got == expected  # none lost, none twice, each the same as without crashes
    _check_the_store(crashed, jobs)
