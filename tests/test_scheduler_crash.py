"""Crash recovery: a scheduler SIGKILLed at random moments, twice, then started again, loses no job and records
none twice; every result is what an uninterrupted run records. With exec jobs, and with episode jobs (whose
trajectories are the committed attempt's), on each store (a SQLite file, a PostgreSQL database)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rollbox.env import read_trajectories
from rollbox.scheduler import JobState, JobStore
from scheduler_helpers import real_tasks

CHILD = Path(__file__).with_name("scheduler_child.py")


@dataclass(frozen=True)
class Home:
    """A scheduler's home directory (its run's files) and its job store."""

    path: Path
    store: str | Path


@pytest.fixture(params=["sqlite", "postgresql"])
def homes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Home, Home]]:
    """Two homes, each with a store of its own, of each kind in turn: one for the crashed run, one for the calm."""
    made = []
    for name in ("crashed", "calm"):
        store = tmp_path / name / "jobs.db" if request.param == "sqlite" else request.getfixturevalue("postgres_server")
        made.append(Home(tmp_path / name, store if isinstance(store, Path) else store.schema()))
    yield made[0], made[1]


def _start(home: Home, jobs: int, extra: list[str]) -> subprocess.Popen[bytes]:
    environment = {**os.environ, "ROLLBOX_DB": str(home.store)}
    return subprocess.Popen([sys.executable, str(CHILD), str(home.path), "run", str(jobs), *extra], env=environment)


def _results(store: JobStore) -> int:
    with store.db.read() as db:
        return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])


def _kill_when(child: subprocess.Popen[bytes], store: JobStore, results: int, rng: random.Random) -> int:
    """SIGKILL the child once the store holds ``results`` results, a random moment later; returns how many it held."""
    deadline = time.monotonic() + 120
    while _results(store) < results:
        assert child.poll() is None, f"the scheduler ended before it was killed (status {child.returncode})"
        assert time.monotonic() < deadline, "the scheduler made no progress"
        time.sleep(0.005)
    time.sleep(rng.uniform(0, 0.05))  # anywhere: between jobs, in a commit, in a sandbox's start
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    return _results(store)


def _crash_twice_then_finish(homes: tuple[Home, Home], jobs: int, extra: list[str], steps: tuple[int, int]) -> None:
    """The same run killed twice then finished (the first home), and uninterrupted (the second)."""
    rng = random.Random()
    crashed, calm = homes
    store = JobStore(crashed.store)  # made before the child starts, so that it can be watched from the start
    try:
        child = _start(crashed, jobs, extra)
        first = _kill_when(child, store, rng.randint(*steps), rng)
        child = _start(crashed, jobs, extra)
        second = _kill_when(child, store, first + rng.randint(*steps), rng)
    finally:
        store.close()
    assert first < second < jobs  # both kills fell in the middle of the run
    assert _start(crashed, jobs, extra).wait(timeout=300) == 0
    assert _start(calm, jobs, extra).wait(timeout=300) == 0


def _outputs(home: Home, fields: Any) -> dict[str, tuple[Any, ...]]:
    store = JobStore(home.store)
    try:
        found = {}
        for job, result in store.results(run_id="run"):
            assert job.key is not None and job.key not in found, f"two results for {job.key}"
            found[job.key] = (result.state.value, result.status, result.reward, *fields(home, job, result))
        return found
    finally:
        store.close()


def _check_the_store(home: Home, jobs: int) -> None:
    store = JobStore(home.store)
    with store.db.read() as db:
        (count,) = db.execute("SELECT COUNT(*) FROM jobs").fetchone()
        (results,) = db.execute("SELECT COUNT(*) FROM results").fetchone()
        ends = dict(db.execute("SELECT outcome, COUNT(*) FROM attempts GROUP BY outcome").fetchall())
        reasons = [r for (r,) in db.execute("SELECT reason FROM transitions WHERE source IN ('scheduled', 'running')")]
        (double,) = db.execute(
            "SELECT COUNT(*) FROM (SELECT job_id FROM transitions WHERE target = 'completed' "
            "GROUP BY job_id HAVING COUNT(*) > 1) AS doubled"
        ).fetchone()
    assert count == results == jobs  # resubmitting after each crash added no job (idempotency keys)
    assert double == 0
    # Jobs that were leased when a kill came were returned by the next scheduler (their owner's process was gone),
    # each such attempt recorded.
    assert ends.get("lease_expired", 0) >= 1 and ends["ok"] == jobs
    returned = [r for r in reasons if r is not None]
    assert returned and all("which held its lease, is gone" in r for r in returned)  # at once, not at expiry
    assert set(ends) <= {"ok", "lease_expired"}
    assert {j.state for j in store.jobs(run_id="run")} == {JobState.COMPLETED}
    store.close()


@pytest.mark.slow
def test_killed_twice_then_restarted_every_job_completes_exactly_once(homes: tuple[Home, Home]) -> None:
    jobs = 300
    _crash_twice_then_finish(homes, jobs, [], (10, 80))
    crashed, calm = homes
    printed = lambda home, job, result: (result.output["stdout"], result.output["stderr"])  # noqa: E731
    got, expected = _outputs(crashed, printed), _outputs(calm, printed)
    assert len(expected) == jobs and all(v[1] == "ok" for v in expected.values())
    assert got == expected  # none lost, none twice, each the same as without crashes
    _check_the_store(crashed, jobs)


@pytest.mark.slow
def test_episode_jobs_killed_twice_then_restarted_each_complete_once_with_their_trajectory(
    homes: tuple[Home, Home], tmp_path_factory: pytest.TempPathFactory
) -> None:
    jobs, tasks = 36, sorted(str(p) for p in real_tasks(tmp_path_factory, calc=False).iterdir())
    _crash_twice_then_finish(homes, jobs, ["30", "--episodes", *tasks], (3, 8))
    crashed, calm = homes

    def graded(home: Home, job: Any, result: Any) -> tuple[Any, ...]:
        (trajectory,) = read_trajectories(home.path / "runs" / "run" / result.output["trajectory"])
        # The file is the committed attempt's (an attempt killed after writing it was run again and replaced it).
        assert trajectory.episode_id == f"run-job{job.id}-attempt{job.attempts}"
        assert (trajectory.reward, trajectory.status) == (result.reward, result.status)
        return (job.payload["policy"], result.output["verdict"]["passed"], len(trajectory.turns))

    got, expected = _outputs(crashed, graded), _outputs(calm, graded)
    assert len(expected) == jobs
    assert {(v[1], v[2], v[3]) for v in expected.values()} == {("passed", 1.0, "reference"), ("failed", 0.0, "noop")}
    assert got == expected  # none lost, none twice, each the same as without crashes
    _check_the_store(crashed, jobs)
