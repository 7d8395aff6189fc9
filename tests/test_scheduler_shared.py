"""Several schedulers share one job store, each in a process of its own with a host name of its own (a UTS namespace
each: to one another they are on separate hosts, so none can tell by its pid that another died). The jobs are
spread over them; one is SIGKILLed while it holds leases, and the others take its jobs over when its leases expire;
every job completes exactly once, with the one result it would have had. On each store: a PostgreSQL database, and
a SQLite file (which processes of one host may share)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from rollbox.scheduler import JobState, JobStore

CHILD = Path(__file__).with_name("scheduler_child.py")
SCHEDULERS, JOBS, LEASE_S = 3, 150, 3.0


def _start(home: Path, host: str, store: str | Path) -> subprocess.Popen[bytes]:
    """A scheduler child as if on host ``host``: a UTS namespace of its own, named so."""
    command = [sys.executable, str(CHILD), str(home), "run", str(JOBS), str(LEASE_S), "sleep 0.1; echo $(({i} * {i}))"]
    return subprocess.Popen(
        ["unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"', host, *command],
        env={**os.environ, "ROLLBOX_DB": str(store)},
    )


def _held(store: JobStore) -> Counter[str]:
    """How many leases each host's scheduler holds now."""
    with store.db.read() as db:
        rows = db.execute("SELECT lease_owner FROM jobs WHERE lease_owner IS NOT NULL").fetchall()
    return Counter(owner.split(":")[0] for (owner,) in rows)


def _done(store: JobStore) -> int:
    with store.db.read() as db:
        return int(db.execute("SELECT COUNT(*) FROM results").fetchone()[0])


@pytest.mark.slow
def test_schedulers_on_several_hosts_share_a_store_and_take_over_a_killed_ones_jobs(
    store_target: str | Path, tmp_path: Path, reap: None
) -> None:
    if os.geteuid() != 0:
        pytest.skip("a UTS namespace of each scheduler's own (its host name) needs root")
    store = JobStore(store_target)  # made before the schedulers start, so that it can be watched from the start
    hosts = [f"host-{n}" for n in range(SCHEDULERS)]
    children = {host: _start(tmp_path / host, host, store_target) for host in hosts}
    try:
        deadline = time.monotonic() + 120
        while True:  # every scheduler has work, and a third of the jobs are done: kill one that holds leases
            held = _held(store)
            if len(held) == SCHEDULERS and _done(store) >= JOBS // 3:
                break
            assert all(child.poll() is None for child in children.values()), "a scheduler ended early"
            assert time.monotonic() < deadline, f"the schedulers did not all get work: {held}"
            time.sleep(0.01)
        victim = hosts[-1]
        children[victim].send_signal(signal.SIGKILL)
        children[victim].wait()
        killed_at = time.time()
        for host in hosts[:-1]:
            assert children[host].wait(timeout=180) == 0
    finally:
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait()
    results = store.results(run_id="run")
    assert sorted(job.key or "" for job, _ in results) == sorted(f"run/{i}" for i in range(JOBS))  # each once
    for job, result in results:
        i = int(str(job.key).split("/")[1])
        assert (result.state, result.status, result.output["stdout"]) == (JobState.COMPLETED, "ok", f"{i * i}\n")
    with store.db.read() as db:
        ends = db.execute("SELECT job_id, owner, outcome, ended_at FROM attempts").fetchall()
        (double,) = db.execute(
            "SELECT COUNT(*) FROM (SELECT job_id FROM transitions WHERE target = 'completed' "
            "GROUP BY job_id HAVING COUNT(*) > 1) AS doubled"
        ).fetchone()
    assert double == 0
    ran = Counter(owner.split(":")[0] for _, owner, outcome, _ in ends if outcome == "ok")
    assert set(ran) == set(hosts) and sum(ran.values()) == JOBS  # spread over every scheduler; each job ran once
    taken = [(job_id, at) for job_id, owner, outcome, at in ends if owner.startswith(f"{victim}:") and outcome != "ok"]
    assert taken and all(outcome == "lease_expired" for *_, outcome, _ in ends if outcome != "ok")
    assert all(at >= killed_at + LEASE_S * 0.5 for _, at in taken)  # when its leases expired, not before
    for job_id, _ in taken:
        reasons = [move.reason or "" for move in store.transitions(job_id) if move.target is JobState.PENDING]
        assert any(f"the lease of {victim}:" in why and why.endswith("stopped answering") for why in reasons)
    store.close()
