"""The job state machine: every legal move is accepted, every other one refused, in the table and in each store
(SQLite and PostgreSQL)."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from rollbox.scheduler import TERMINAL, TRANSITIONS, IllegalTransition, JobSpec, JobState, JobStore, Requirements
from rollbox.scheduler._model import Transition
from rollbox.scheduler._states import ACTIVE, check_transition
from rollbox.scheduler._store import Ending

LEGAL = {
    (None, JobState.PENDING),
    (JobState.PENDING, JobState.SCHEDULED),
    (JobState.PENDING, JobState.CANCELLED),
    (JobState.PENDING, JobState.TIMED_OUT),
    (JobState.PENDING, JobState.FAILED),
    *((s, t) for s in ACTIVE for t in TERMINAL),
    (JobState.SCHEDULED, JobState.RUNNING),
    (JobState.SCHEDULED, JobState.PENDING),
    (JobState.RUNNING, JobState.GRADING),
    (JobState.RUNNING, JobState.PENDING),
    (JobState.GRADING, JobState.PENDING),
}
PAIRS = list(itertools.product([None, *JobState], JobState))


def test_the_states_are_closed() -> None:
    assert [s.value for s in JobState] == [
        "pending",
        "scheduled",
        "running",
        "grading",
        "completed",
        "failed",
        "timed_out",
        "cancelled",
    ]
    assert {s for s, targets in TRANSITIONS.items() if not targets} == TERMINAL


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{s and s.value}->{t.value}" for s, t in PAIRS])
def test_every_move_is_legal_or_refused(source: JobState | None, target: JobState) -> None:
    if (source, target) in LEGAL:
        check_transition(1, source, target)
    else:
        with pytest.raises(IllegalTransition, match=f"cannot move from {source.value if source else '.new.'} to "):
            check_transition(1, source, target)


def _held(store: JobStore, state: JobState) -> tuple[int, int]:
    """A job leased to 'me' and moved to ``state`` (one of the leased states); its id and attempt."""
    store.submit([(JobSpec(kind="exec", payload={"argv": ["true"]}), Requirements())])
    (leased,) = store.lease("me", lambda offered: [(offered[0].id, "w")], window=1, lease_s=60)
    moves = {JobState.RUNNING: [JobState.RUNNING], JobState.GRADING: [JobState.RUNNING, JobState.GRADING]}
    for target in moves.get(state, []):
        store.advance("me", [Transition(leased.id, leased.attempts, None, target, 1.0)])
    assert store.job(leased.id).state is state
    return leased.id, leased.attempts


def _snapshot(store: JobStore) -> list[tuple[object, ...]]:
    """Every row the moves write, as the database holds them."""
    with store.db.read() as db:
        return [
            *map(tuple, db.execute("SELECT id, state, lease_owner, attempts, failures FROM jobs ORDER BY id")),
            *map(tuple, db.execute(f"SELECT * FROM transitions ORDER BY {store.db.dialect.insertion}")),
            *map(tuple, db.execute("SELECT * FROM results ORDER BY seq")),
            *map(tuple, db.execute("SELECT * FROM attempts ORDER BY job_id, number")),
        ]


@pytest.mark.parametrize("source", sorted(ACTIVE, key=list(JobState).index), ids=lambda s: s.value)
@pytest.mark.parametrize("target", list(JobState), ids=lambda s: s.value)
def test_the_store_writes_only_legal_moves(store_target: str | Path, source: JobState, target: JobState) -> None:
    """From each leased state, the lease holder's move to each state is written, or refused leaving no trace."""
    store = JobStore(store_target)
    job_id, attempt = _held(store, source)
    before = _snapshot(store)
    legal = (source, target) in LEGAL

    def act() -> list[int]:
        if target in TERMINAL or target is JobState.PENDING:
            return store.finish("me", [Ending(job_id=job_id, attempt=attempt, target=target, status="ok", at=2.0)])
        return store.advance("me", [Transition(job_id, attempt, None, target, 2.0)])

    if legal:
        assert act() == []
        assert store.job(job_id).state is target
        assert store.transitions(job_id)[-1] == Transition(job_id, attempt, source, target, 2.0, None)
        assert (store.result(job_id) is not None) == (target in TERMINAL)
    else:
        with pytest.raises(IllegalTransition):
            act()
        assert _snapshot(store) == before
    store.close()


def test_a_final_job_never_moves_again(store_target: str | Path) -> None:
    """A result is written once: a second ending of the same attempt is refused as lost (its attempt was ended
    already, so nothing is written), and a cancel of a final job changes nothing."""
    store = JobStore(store_target)
    job_id, attempt = _held(store, JobState.RUNNING)
    done = Ending(job_id=job_id, attempt=attempt, target=JobState.COMPLETED, status="ok", at=2.0)
    assert store.finish("me", [done]) == []
    before = _snapshot(store)
    assert store.finish("me", [done]) == [job_id]
    assert store.cancel([job_id, job_id]) == []
    assert _snapshot(store) == before
    store.close()
