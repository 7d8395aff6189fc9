"""The job store's batches: many jobs moved and ended in one transaction, each exactly as alone (on each store);
what an idle scheduler asks never takes SQLite's write lock; digests stay those of earlier stores; events lines are
the events."""

from __future__ import annotations

import hashlib
import itertools
import json
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollbox.scheduler import JobSpec, JobState, JobStore, PayloadError, Requirements
from rollbox.scheduler._events import RunEvents
from rollbox.scheduler._model import Transition, canonical_json, storable, unstorable
from rollbox.scheduler._store import Candidate, Ending
from rollbox.telemetry import Event


def _leased(store: JobStore, count: int) -> list[tuple[int, int]]:
    specs = [
        (JobSpec(kind="exec", payload={"argv": ["true"], "i": i}, key=f"k{i}"), Requirements()) for i in range(count)
    ]
    store.submit(specs)
    leased = store.lease("me", lambda offered: [(c.id, "w") for c in offered], window=count, lease_s=60)
    return [(job.id, job.attempts) for job in leased]


def test_moves_and_endings_of_many_jobs_in_one_batch(store_target: str | Path) -> None:
    store = JobStore(store_target)
    (a, n), (b, _), (c, _), (d, _), (e, _) = _leased(store, 5)
    moves = [Transition(job, n, None, JobState.RUNNING, 1.0) for job in (a, b, c, d)]
    moves.append(Transition(b, n, None, JobState.GRADING, 2.0))
    moves.append(Transition(e, n + 1, None, JobState.RUNNING, 1.0))  # another attempt's: not held
    endings = [
        Ending(job_id=a, attempt=n, target=JobState.COMPLETED, status="ok", reward=1.0, output={"x": 1}, at=3.0),
        Ending(job_id=b, attempt=n, target=JobState.COMPLETED, status="failed", reward=0.0, at=3.0),
        Ending(job_id=b, attempt=n, target=JobState.COMPLETED, status="passed", reward=1.0, at=4.0),  # twice: lost
        Ending(job_id=c, attempt=n, target=JobState.PENDING, status="infra_error", outcome="infra_error", at=3.0),
    ]
    assert store.finish("me", endings, moves) == [b, e]
    moved = {job: [(t.source, t.target) for t in store.transitions(job)][2:] for job in (a, b, c, d, e)}
    assert moved == {
        a: [(JobState.SCHEDULED, JobState.RUNNING), (JobState.RUNNING, JobState.COMPLETED)],
        b: [(JobState.SCHEDULED, JobState.RUNNING), (JobState.RUNNING, JobState.GRADING),
            (JobState.GRADING, JobState.COMPLETED)],
        c: [(JobState.SCHEDULED, JobState.RUNNING), (JobState.RUNNING, JobState.PENDING)],
        d: [(JobState.SCHEDULED, JobState.RUNNING)],
        e: [],
    }  # fmt: skip
    states = {job: store.job(job) for job in (a, b, c, d, e)}
    assert {job: s.state for job, s in states.items()} == {
        a: JobState.COMPLETED, b: JobState.COMPLETED, c: JobState.PENDING, d: JobState.RUNNING, e: JobState.SCHEDULED,
    }  # fmt: skip
    assert [states[job].lease_owner for job in (a, b, c, d, e)] == [None, None, None, "me", "me"]
    first = store.result(b)
    assert first is not None and (first.status, first.reward) == ("failed", 0.0)  # the first ending is the result
    result = store.result(a)
    assert result is not None and (result.reward, result.output) == (1.0, {"x": 1})
    assert store.result(c) is None and [x.outcome for x in store.attempts(c)] == ["infra_error"]
    with store.db.read() as db:
        assert tuple(db.execute("SELECT failures, updated_at FROM jobs WHERE id = ?", (c,)).fetchone()) == (1, 3.0)
        assert tuple(db.execute("SELECT updated_at FROM jobs WHERE id = ?", (d,)).fetchone()) == (1.0,)
    store.close()


def _returns_while_locked(path: Path, call: Callable[[], object]) -> object:
    """``call()`` while another connection holds the database's write lock (it would wait for it for a minute)."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    got: list[object] = []
    try:
        worker = threading.Thread(target=lambda: got.append(call()))
        worker.start()
        worker.join(timeout=20)
        assert got, "it waited for the write lock"
    finally:
        other.execute("ROLLBACK")
        other.close()
        worker.join()
    return got[0]


def test_an_idle_schedulers_checks_never_wait_for_the_write_lock(tmp_path: Path) -> None:
    """(SQLite's: PostgreSQL has no database-wide write lock.)"""
    store = JobStore(tmp_path / "jobs.db")
    _leased(store, 1)  # one job, leased: nothing pending, nothing expired, no deadline
    pick = lambda offered: [(c.id, "w") for c in offered]  # noqa: E731
    assert _returns_while_locked(store.path, lambda: store.lease("me", pick, window=8, lease_s=60)) == []
    assert _returns_while_locked(store.path, lambda: store.expire(owners=["nobody"])) == []
    assert _returns_while_locked(store.path, store.expire_deadlines) == []
    store.close()


def test_a_digest_is_that_of_the_canonical_kind_and_payload() -> None:
    """Stores written before payloads were encoded once keep their keys: the same spec has the same digest."""
    spec = JobSpec(kind='ex"é', payload={"b": [1, 2.5, None, {"z": 1, "a": "ü\n"}], "a": True})
    expected = hashlib.sha256(canonical_json([spec.kind, spec.payload]).encode()).hexdigest()
    assert spec.digest() == expected


def test_event_lines_are_the_events(tmp_path: Path) -> None:
    events = RunEvents(tmp_path)
    sent = [
        Event("job.transition", 1796337506.2891345, {"job_id": 3, "run_id": "r", "attempt": 1, "source": None,
              "target": "pending", "transition_at": 1.25, "reason": 'why "x" é\n'}),
        Event("job.transition", 2.5, {"job_id": 4, "run_id": "r", "attempt": 2, "source": "pending",
              "target": "scheduled", "transition_at": 1796337506.139129, "reason": None}),
        Event("pool.resize", 3.0, {"run_id": "r", "pool": '{"limits":{}}', "size": 2, "extra": [1, {"a": None}]}),
    ]  # fmt: skip
    for event in sent:
        events.write(event)
    events.flush()
    lines = (tmp_path / "runs" / "r" / "events.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [event.to_json() for event in sent]
    events.close()


def test_a_cancel_that_names_a_job_twice_cancels_it_once(store_target: str | Path) -> None:
    """(Each id was read and ended as often as it was named: the second result broke the one-result rule, and the
    whole cancel failed as a store error.)"""
    store = JobStore(store_target)
    (job, _), (other, _) = store.submit([(JobSpec(kind="exec", payload={"argv": [c]}), Requirements()) for c in "ab"])
    assert store.cancel([other.id, job.id, other.id]) == [other.id, job.id]
    assert [store.job(i).state for i in (job.id, other.id)] == [JobState.CANCELLED, JobState.CANCELLED]
    assert [m.target for m in store.transitions(other.id)] == [JobState.PENDING, JobState.CANCELLED]
    store.close()


#: Any text, with NUL and lone surrogates (which the default alphabet leaves out) among what it draws often.
_TEXT = st.text(
    st.one_of(st.characters(codec=None, exclude_categories=()), st.sampled_from("\x00\udc80é")), max_size=24
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(error=_TEXT, key=_TEXT, payload=_TEXT)
def test_any_text_is_kept_or_refused_in_one_line_on_every_store(
    store_target: str | Path, error: str, key: str, payload: str
) -> None:
    """What a program printed may reach an attempt's error and a move's reason: every store keeps it (a NUL, which
    PostgreSQL's text cannot hold, or a lone surrogate, which is not UTF-8, as U+FFFD) and never fails the
    transaction that ends the job. Text a submitter gives (a key, a payload) is kept exactly, or refused when the
    job is made, saying what is wrong."""
    store = JobStore(store_target)
    try:
        _keeps_or_refuses(store, error, f"k{next(_examples)}/{key}", payload)
    finally:
        store.close()


_examples = itertools.count()


def _keeps_or_refuses(store: JobStore, error: str, key: str, payload: str) -> None:
    try:
        spec = JobSpec(kind="exec", payload={"argv": ["true"], "text": payload}, key=key)
    except ValueError as exc:
        assert unstorable(key) and "must be text without NUL characters or lone surrogates" in str(exc)
        spec = JobSpec(kind="exec", payload={"argv": ["true"], "text": payload})
    try:
        ((job, _),) = store.submit([(spec, Requirements())])
    except PayloadError as exc:
        assert unstorable(payload) and "holds text that is not Unicode" in str(exc)
        return
    assert (store.job(job.id).key, store.job(job.id).payload["text"]) == (spec.key, payload)
    (leased,) = store.lease("me", lambda offered: [(c.id, "w") for c in offered if c.id == job.id], window=10**6,
                            lease_s=60)  # fmt: skip
    ending = Ending(job_id=job.id, attempt=leased.attempts, target=JobState.COMPLETED, status="x", error=error, at=1.0)
    assert store.finish("me", [ending]) == []
    result = store.result(job.id)
    assert (
        result is not None
        and result.error == storable(error)
        and store.transitions(job.id)[-1].reason == storable(error)
    )
    assert storable(error) == error or (unstorable(error) and "\ufffd" in str(storable(error)))


def test_a_lease_reads_the_queue_only_as_far_as_placement_looks(tmp_path: Path) -> None:
    """Every row read is a step of SQLite that lets go of the interpreter's lock, which the event loop then waits to
    take back: a window of 200 rows of which placement takes the first two must not read the other 198. Counted in
    SQLite's own virtual-machine steps, each lease against one that looks at the whole window."""
    store = JobStore(tmp_path / "jobs.db")
    store.submit([(JobSpec(kind="exec", payload={"argv": ["true"], "i": i}), Requirements()) for i in range(600)])
    steps = itertools.count()
    store.db._db.set_progress_handler(lambda: next(steps) and 0, 1)  # type: ignore[attr-defined]

    def cost(pick: Callable[[Sequence[Candidate]], list[tuple[int, str]]]) -> int:
        before = next(steps)
        assert len(store.lease("me", pick, window=200, lease_s=60)) == 2
        return next(steps) - before

    def first_two(offered: Sequence[Candidate]) -> list[tuple[int, str]]:
        placed = []
        for candidate in offered:
            placed.append((candidate.id, "w"))
            if len(placed) == 2:
                break
        return placed

    def looking_at_all(offered: Sequence[Candidate]) -> list[tuple[int, str]]:
        assert len(list(offered)) == 200
        return first_two(offered)

    early, whole = cost(first_two), cost(looking_at_all)
    assert early < whole / 4, (early, whole)
    assert store.lease("me", looking_at_all, window=0, lease_s=60) == []  # nothing offered: nothing asked
    store.close()


#: Statements, each with the parameters it takes from a generated row.
_UPDATES: dict[str, Callable[[tuple[object, object, object, int]], tuple[object, ...]]] = {
    "UPDATE t SET a = ?, b = b + ?, c = NULL WHERE id = ?": lambda r: (r[0], r[1], r[2]),
    "UPDATE t SET c = ?, a = ? WHERE id = ? AND b = ?": lambda r: r,
    "UPDATE t SET a = ? WHERE id = ? AND c IS NULL": lambda r: (r[0], r[2]),
    "UPDATE t SET c = ?, a = ? WHERE id = ? AND b = ? AND c IS NULL": lambda r: r,  # as an attempt's end is written
    "UPDATE t SET a = ? WHERE id = ? OR c IS NULL": lambda r: (r[0], r[2]),  # not keyed: a statement a row
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    statement=st.sampled_from(sorted(_UPDATES)),
    rows=st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=3)),
            st.one_of(st.integers(-3, 3), st.text(max_size=2)),
            st.one_of(st.integers(0, 6), st.sampled_from(["1", "2", 1.0])),
            st.integers(-3, 3),
        ),
        max_size=30,
    ),
)
def test_a_batch_of_updates_in_one_statement_changes_what_one_statement_a_row_would(
    statement: str, rows: list[tuple[object, object, object, int]]
) -> None:
    """SQLite's session makes a batch of updates each of its own row one ``UPDATE ... FROM (VALUES ...)`` (a step
    for the batch, not one per row): the table after it is the table after sqlite3's ``executemany``, whatever
    the values (of any type), keys named twice, or once as text and once as a number (where it falls back to a
    statement a row), or keys matching nothing."""
    from rollbox.scheduler._sqlite import _KEYED_UPDATE, _Session

    assert (_KEYED_UPDATE.fullmatch(statement) is not None) == (" OR " not in statement)  # batched, where it may be
    params = [_UPDATES[statement](row) for row in rows]
    tables = []
    for batched in (True, False):
        db = sqlite3.connect(":memory:", isolation_level=None)
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, a TEXT, b INTEGER, c REAL)")
        db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(i, f"a{i}", i, None if i % 2 else 0.5) for i in range(5)])
        if batched:
            _Session(db).executemany(statement, params)
        else:
            db.executemany(statement, params)
        tables.append(db.execute("SELECT id, a, typeof(a), b, typeof(b), c, typeof(c) FROM t ORDER BY id").fetchall())
        db.close()
    assert tables[0] == tables[1]
