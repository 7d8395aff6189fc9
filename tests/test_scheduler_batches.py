"""What the scheduler's hot path relies on: a worker with no CPU left is full, and a batch of inserts of any size
is written whole by SQLite's one-statement form."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from rollbox.scheduler._leases import Candidate
from rollbox.scheduler._model import Requirements
from rollbox.scheduler._placement import MIN_CPUS, Capacity, Placement
from rollbox.scheduler._sqlite import SqliteDatabase


def _placed(placement: Placement, job_id: int, cpus: float) -> None:
    needs = Requirements(cpus=cpus, memory_bytes=0)
    assert placement.pick([Candidate(job_id, "t", 0, needs)]) == [(job_id, "w")]


@pytest.mark.parametrize(
    ("cpus", "shares", "full"),
    [
        (2.0, [1.0], False),
        (2.0, [1.0, 1.0], True),  # no CPU left: the scheduler stops looking at the jobs waiting there
        (2.0, [1.0, 1.0 - MIN_CPUS], False),  # the smallest share still fits
        (1.0, [0.5, 0.5 - MIN_CPUS / 2], True),  # less than the smallest share left
    ],
)
def test_a_worker_is_full_when_not_even_the_smallest_share_of_a_cpu_is_left(
    cpus: float, shares: list[float], full: bool
) -> None:
    placement = Placement({"w": Capacity(cpus=cpus, memory_bytes=2**30)}, prefetch=8)
    for job_id, share in enumerate(shares):
        _placed(placement, job_id, share)
        assert placement.start(job_id)
    assert placement.full("w") is full
    _placed(placement, 99, MIN_CPUS)
    assert placement.start(99) is not full  # full means exactly: nothing more can start
    placement.release(0)
    assert not placement.full("w")


#: The most parameters one SQLite statement takes here (32,766 since SQLite 3.32).
_MOST = sqlite3.connect(":memory:").getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)


@pytest.mark.parametrize("width", [1, 6])
@pytest.mark.parametrize(("statements", "more"), [(0, 0), (0, 1), (1, -1), (1, 0), (1, 1), (3, 7)])
def test_a_batch_of_plain_inserts_is_written_whole_whatever_its_size(
    tmp_path: Path, width: int, statements: int, more: int
) -> None:
    """Around and past the rows one statement takes: ``statements`` statements' worth, and ``more``."""
    count = statements * (_MOST // width) + more
    db = SqliteDatabase(tmp_path / "jobs.db")
    try:
        columns = ", ".join(f"c{n}" for n in range(width - 1))
        names = ", ".join(filter(None, ["id", columns]))
        with db.write() as session:
            session.execute(f"CREATE TABLE t ({names})")
            session.executemany(
                f"INSERT INTO t ({names}) VALUES ({', '.join('?' * width)})",
                [(i, *(f"{i}-{n}" for n in range(width - 1))) for i in range(count)],
            )
        with db.read() as session:
            found = session.execute("SELECT * FROM t ORDER BY id").fetchall()
        assert found == [(i, *(f"{i}-{n}" for n in range(width - 1))) for i in range(count)]
    finally:
        db.close()
