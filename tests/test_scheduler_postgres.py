"""The job store on PostgreSQL, where several schedulers write at once: leasing passes over the jobs another is
leasing, results are numbered in the order they commit, a connection that broke is made again, and a server that
cannot be reached is one line that never shows the password."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from postgres_server import free_port
from rollbox.scheduler import JobSpec, JobState, JobStore, Requirements, StoreError
from rollbox.scheduler._sql import Serial
from rollbox.scheduler._store import Ending

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed: pip install 'rollbox[postgres]'")


def _submit(store: JobStore, count: int) -> list[int]:
    specs = [(JobSpec(kind="exec", payload={"argv": ["true"], "i": i}), Requirements()) for i in range(count)]
    return [job.id for job, _ in store.submit(specs)]


def _take_all(offered: list[object]) -> list[tuple[int, str]]:
    return [(candidate.id, "w") for candidate in offered]  # type: ignore[attr-defined]


@pytest.fixture
def store(postgres_url: str) -> Iterator[JobStore]:
    opened = JobStore(postgres_url)
    yield opened
    opened.close()


def _in_thread(call: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    got: list[object] = []
    thread = threading.Thread(target=lambda: got.append(call()))
    thread.start()
    return thread, got


def test_leasing_passes_over_the_jobs_another_scheduler_is_leasing(store: JobStore, postgres_url: str) -> None:
    first, second, third = _submit(store, 3)
    with psycopg.connect(postgres_url) as other:  # another scheduler, in the middle of leasing the first job
        other.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (first,))
        thread, got = _in_thread(lambda: store.lease("me", _take_all, window=2, lease_s=60))
        thread.join(timeout=10)
        assert got, "leasing waited for the other scheduler's row"
        assert [job.id for job in got[0]] == [second, third]  # type: ignore[attr-defined]
    assert store.job(first).state is JobState.PENDING


def test_results_are_numbered_in_the_order_they_commit(store: JobStore, postgres_url: str) -> None:
    """A writer of results waits for another one's commit before it takes a number: a reader following results by
    number (``results(after=...)``) never passes over one that commits later with a smaller number."""
    _submit(store, 1)
    (job,) = store.lease("me", _take_all, window=1, lease_s=60)
    done = Ending(job_id=job.id, attempt=job.attempts, target=JobState.COMPLETED, status="ok", at=1.0)
    with psycopg.connect(postgres_url) as other:  # another scheduler, writing results of its own
        other.execute("SELECT pg_advisory_xact_lock(%s)", (int(Serial.RESULTS),))
        thread, got = _in_thread(lambda: store.finish("me", [done]))
        time.sleep(0.5)
        assert not got, "the result was numbered while another writer had not committed"
        other.commit()
        thread.join(timeout=10)
    assert got == [[]] and [result.job_id for _, result in store.results()] == [job.id]


def test_a_broken_connection_is_made_again(store: JobStore, postgres_url: str) -> None:
    (job_id,) = _submit(store, 1)
    with psycopg.connect(postgres_url, autocommit=True) as admin:  # the server ends the store's connection
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
            "AND datname = current_database()"
        )
    assert store.job(job_id).state is JobState.PENDING


def test_a_server_that_cannot_be_reached_is_one_line_without_the_password() -> None:
    closed = free_port()  # nothing listens there
    url = f"postgresql://rollbox:s3cret-word@127.0.0.1:{closed}/postgres?connect_timeout=5"
    with pytest.raises(StoreError) as raised:
        JobStore(url)
    message = str(raised.value)
    assert "s3cret-word" not in message and "s3cret-word" not in raised.value.path
    assert message.startswith(f"the job store postgresql://rollbox:***@127.0.0.1:{closed}/postgres")
    assert "cannot be reached" in message and "check that the PostgreSQL server is running" in message
    assert "\n" not in message


def test_a_lease_taken_over_while_its_holder_finishes_is_not_finished(store: JobStore, postgres_url: str) -> None:
    """The holder's finish locks the job's row before it reads whether it still holds the lease: when another
    scheduler is taking the job over at that moment, the holder waits for it, then finds the lease gone and writes
    nothing (read without the lock, the lease looked held and the result was written over the takeover)."""
    _submit(store, 1)
    (job,) = store.lease("me", _take_all, window=1, lease_s=60)
    done = Ending(job_id=job.id, attempt=job.attempts, target=JobState.COMPLETED, status="ok", at=1.0)
    with psycopg.connect(postgres_url) as other:  # another scheduler returns the job to the queue (its lease expired)
        other.execute(
            "UPDATE jobs SET state = 'pending', lease_owner = NULL, lease_expires = NULL WHERE id = %s", (job.id,)
        )
        thread, got = _in_thread(lambda: store.finish("me", [done]))
        time.sleep(0.5)
        other.commit()
        thread.join(timeout=10)
    assert got == [[job.id]]  # lost: nothing written
    assert store.result(job.id) is None and store.job(job.id).state is JobState.PENDING
