"""Crash recovery: a scheduler SIGKILLed at random moments, twice, then started again, loses no job and records
none twice; every result is what an uninterrupted run records."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollbox.scheduler import JobState, JobStore

CHILD = Path(__file__).with_name("scheduler_child.py")
JOBS = 300


def _start(home: Path, run_id: str, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(CHILD), str(home), run_id, str(JOBS), *extra])


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


def _outputs(home: Path, run_id: str) -> dict[str, tuple[str, str | None, str, str]]:
    store = JobStore(home / "jobs.db")
    try:
        found = {}
        for job, result in store.results(run_id=run_id):
            assert job.key is not None and job.key not in found, f"two results for {job.key}"
            found[job.key] = (result.state.value, result.status, result.output["stdout"], result.output["stderr"])
        return found
    finally:
        store.close()


@pytest.mark.slow
def test_killed_twice_then_restarted_every_job_completes_exactly_once(tmp_path: Path) -> None:
    rng = random.Random()
    crashed, calm = tmp_path / "crashed", tmp_path / "calm"
    child = _start(crashed, "run")
    first = _kill_when(child, crashed, rng.randint(10, 80), rng)
    child = _start(crashed, "run")
    second = _kill_when(child, crashed, first + rng.randint(20, 100), rng)
    assert first < second < JOBS  # both kills fell in the middle of the run
    assert _start(crashed, "run").wait(timeout=300) == 0
    assert _start(calm, "run").wait(timeout=300) == 0

    got, expected = _outputs(crashed, "run"), _outputs(calm, "run")
    assert len(expected) == JOBS and all(v[1] == "ok" for v in expected.values())
    assert got == expected  # none lost, none twice, each the same as without crashes

    with sqlite3.connect(crashed / "jobs.db") as db:
        (jobs,) = db.execute("SELECT COUNT(*) FROM jobs").fetchone()
        (results,) = db.execute("SELECT COUNT(*) FROM results").fetchone()
        ends = dict(db.execute("SELECT outcome, COUNT(*) FROM attempts GROUP BY outcome").fetchall())
        reasons = [r for (r,) in db.execute("SELECT reason FROM transitions WHERE source IN ('scheduled', 'running')")]
        (double,) = db.execute(
            "SELECT COUNT(*) FROM (SELECT job_id FROM transitions WHERE target = 'completed' "
            "GROUP BY job_id HAVING COUNT(*) > 1)"
        ).fetchone()
    assert jobs == results == JOBS  # resubmitting after each crash added no job (idempotency keys)
    assert double == 0
    # Jobs that were leased when a kill came were returned by the next scheduler (their owner's process was gone),
    # each such attempt recorded.
    assert ends.get("lease_expired", 0) >= 1 and ends["ok"] == JOBS
    returned = [r for r in reasons if r is not None]
    assert returned and all("which held its lease, is gone" in r for r in returned)  # at once, not at expiry
    assert set(ends) <= {"ok", "lease_expired"}
    store = JobStore(crashed / "jobs.db")
    assert {j.state for j in store.jobs(run_id="run")} == {JobState.COMPLETED}
    store.close()
