"""What the reference's runs say: only what was observed. A test that never reported in a run (the run hit a limit
before it, or died) is neither a pass nor a failure there, so it can never make a test look order-, hash-seed- or
date-dependent, flaky, or failing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rollbox.curate._runs import BASELINE, Condition, read_runs
from rollbox.curate._variants import Variant
from rollbox.judge import GradedTest, Outcome, Verdict, VerdictStatus

TESTS = ("t::a", "t::b", "t::c")
CONDITIONS = (BASELINE, Condition(order=1), Condition(hash_seed=3), Condition(clock="+3750d"))


def verdict(outcomes: dict[str, Outcome], status: VerdictStatus = VerdictStatus.FAILED) -> Verdict:
    tests = tuple(GradedTest(t, o) for t, o in outcomes.items())
    if all(o is Outcome.PASSED for o in outcomes.values()):
        status = VerdictStatus.PASSED
    return Verdict(task_id="t", status=status, reward=0.0, tests=tests)


def variants() -> list[Variant]:
    """Two orders whose ids are the original's (pytest's are; only a reordered cases file renames them)."""
    return [Variant(task=None), Variant(task=None)]  # type: ignore[arg-type]


def test_a_timeout_in_two_orders_is_no_order_dependence() -> None:
    # The tests' own order runs a, then b hangs and c never runs; reversed, c runs, b hangs and a never runs.
    own = verdict({"t::a": Outcome.PASSED, "t::b": Outcome.MISSING, "t::c": Outcome.MISSING}, VerdictStatus.TIMEOUT)
    back = verdict({"t::a": Outcome.MISSING, "t::b": Outcome.MISSING, "t::c": Outcome.PASSED}, VerdictStatus.TIMEOUT)
    found = read_runs({BASELINE: [own, own], Condition(order=1): [back, back]}, variants())
    assert found.dependent == {} and found.flaky == [] and found.failing == []
    assert found.missing == ["t::b", "t::c"]


def test_each_condition_is_named_by_what_it_changes() -> None:
    ok = verdict(dict.fromkeys(TESTS, Outcome.PASSED))
    bad = verdict({**dict.fromkeys(TESTS, Outcome.PASSED), "t::b": Outcome.FAILED})
    for condition in CONDITIONS[1:]:
        found = read_runs({BASELINE: [ok, ok], condition: [bad, bad]}, variants())
        assert found.dependent == {"t::b": condition}
    assert "PYTHONHASHSEED=3" in Condition(hash_seed=3).describe()
    assert "ahead" in Condition(clock="+3750d").describe() and "back" in Condition(clock="-3750d").describe()


OUTCOMES = st.sampled_from([Outcome.PASSED, Outcome.FAILED, Outcome.ERROR, Outcome.MISSING])
RUNS = st.dictionaries(
    st.sampled_from(CONDITIONS),
    st.lists(st.fixed_dictionaries({t: OUTCOMES for t in TESTS}), min_size=1, max_size=3),
    min_size=1,
)


@settings(max_examples=300, deadline=None)
@given(RUNS)
def test_missing_outcomes_change_nothing(runs: dict[Condition, list[dict[str, Outcome]]]) -> None:
    """Whatever the runs, removing the reports of tests that never reported finds the same: a missing outcome is
    no observation (the class behind spurious ``order_dependent`` reasons from runs cut short)."""
    with_missing = {c: [verdict(o) for o in seen] for c, seen in runs.items()}
    observed = {
        c: [verdict({t: x for t, x in o.items() if x is not Outcome.MISSING}) for o in seen] for c, seen in runs.items()
    }
    first, second = read_runs(with_missing, variants()), read_runs(observed, variants())
    assert (first.flaky, first.failing, first.dependent) == (second.flaky, second.failing, second.dependent)
    for test, condition in first.dependent.items():
        seen = [o[test] for o in runs[condition]]
        assert any(o in (Outcome.FAILED, Outcome.ERROR) for o in seen) and Outcome.PASSED not in seen
