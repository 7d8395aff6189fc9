"""What the reference's runs say: only what was observed. A test that never reported in a run (the run hit a limit
before it, or died) is neither a pass nor a failure there, so it can never make a test look order-, hash-seed- or
date-dependent, or failing; but one that passed on other runs of that condition is flaky (the runs disagree), and a
reference that is not steady is never admitted for want of a test to blame."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from rollbox.curate import ReasonCode, ValidateOptions
from rollbox.curate._grader import Measured
from rollbox.curate._reference import Reference
from rollbox.curate._reference_runs import Item, ReferenceRuns
from rollbox.curate._runs import BASELINE, Condition, read_runs
from rollbox.curate._validate import _TaskRun
from rollbox.curate._variants import Variant
from rollbox.judge import GradedTest, Outcome, Verdict, VerdictStatus
from rollbox.tasks import load_task

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
def test_missing_outcomes_change_nothing_but_disagreement(runs: dict[Condition, list[dict[str, Outcome]]]) -> None:
    """Whatever the runs, removing the reports of tests that never reported finds the same, but for the tests that
    passed on another run of the same condition, which are flaky: a missing outcome is no failure (the class behind
    spurious ``order_dependent`` reasons from runs cut short), and no pass either."""
    with_missing = {c: [verdict(o) for o in seen] for c, seen in runs.items()}
    observed = {
        c: [verdict({t: x for t, x in o.items() if x is not Outcome.MISSING}) for o in seen] for c, seen in runs.items()
    }
    first, second = read_runs(with_missing, variants()), read_runs(observed, variants())
    lost = {
        t
        for seen in runs.values()
        for t in TESTS
        if Outcome.MISSING in {o[t] for o in seen} and Outcome.PASSED in {o[t] for o in seen}
    }
    assert first.flaky == sorted({*second.flaky, *lost})
    assert first.failing == [t for t in second.failing if t not in lost]
    assert first.dependent == {t: c for t, c in second.dependent.items() if t not in lost}
    for test, condition in first.dependent.items():
        seen = [o[test] for o in runs[condition]]
        assert any(o in (Outcome.FAILED, Outcome.ERROR) for o in seen) and Outcome.PASSED not in seen


def test_a_test_that_sometimes_kills_its_process_is_flaky() -> None:
    # Its run dies in it (pytest never hears of it again): failed, the test missing, every other test passed.
    ok = verdict(dict.fromkeys(TESTS, Outcome.PASSED))
    died = verdict({**dict.fromkeys(TESTS, Outcome.PASSED), "t::c": Outcome.MISSING})
    found = read_runs({BASELINE: [ok, died, ok, died], Condition(order=1): [ok]}, variants())
    assert found.flaky == ["t::c"] and found.failing == [] and found.dependent == {}


def reference_runs(tmp_path: Path, own: Sequence[Verdict]) -> ReferenceRuns:
    """A pytest task's reference runs, ``own`` the verdicts of the runs in the tests' own order in turn (the other
    conditions' runs pass)."""
    for relative, text in {
        "workspace/calc.py": "def one():\n    return 0\n",
        "solution/calc.py": "def one():\n    return 1\n",
        "tests/test_calc.py": "from calc import one\n\n\ndef test_a():\n    assert one() == 1\n",
        "task.toml": '[grading]\nrunner = "pytest"\n',
    }.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    task = load_task(tmp_path)
    reference = Reference.of(task)
    assert reference is not None
    queue = list(own)
    passing = verdict({"tests/test_calc.py::test_a": Outcome.PASSED})

    async def measure(items: Sequence[Item]) -> list[Measured]:
        # The tests' own order is variant 0's task, under no variables; the others pass.
        return [Measured(queue.pop(0) if t == "own" and env is None else passing, 0.1) for t, _, env in items]

    return ReferenceRuns(
        task=task,
        reference=reference,
        variants=[Variant(task="own"), Variant(task="reversed")],  # type: ignore[arg-type]
        measure=measure,
        workers=2,
        steady_runs=6,
        reruns=2,
        hash_seeds=2,
        clock=False,
    )


def test_a_reference_that_is_not_steady_is_never_admitted_without_a_culprit(tmp_path: Path) -> None:
    # Its first run in the tests' own order reported no test at all, its reruns passed: no test passed and failed,
    # none failed on every run, yet the reference did not pass steadily.
    passing = verdict({"tests/test_calc.py::test_a": Outcome.PASSED})
    silent = Verdict(task_id="t", status=VerdictStatus.ERROR, reward=0.0, tests=())
    runs = reference_runs(tmp_path, [silent, passing, passing])
    asyncio.run(runs.finish(asyncio.run(runs.measure(runs.first()))))
    assert runs.steady is None
    assert [r.code for r in runs.reasons] == [ReasonCode.FLAKY], runs.reasons
    assert "passed 2 of 3 runs in the tests' own order and got error" in runs.reasons[0].detail
    assert "crashed (killed by a signal, or exited) before every test reported on 1 of" in runs.reasons[0].detail


def under_pressure(tmp_path: Path, graded: list[Verdict]) -> list[tuple[ReasonCode, str]]:
    """The reasons the check under CPU pressure gives when its runs of a steady reference get ``graded``."""
    reference_runs(tmp_path, [])  # writes the task
    options = ValidateOptions(pressure_runs=len(graded))
    run = _TaskRun(load_task(tmp_path), options, SimpleNamespace(workers=2), tmp_path, "")  # type: ignore[arg-type]

    async def grade(items: Sequence[object]) -> list[Verdict]:
        return graded

    run.grade = grade  # type: ignore[method-assign]
    run.steady = {"t::a", "t::b"}
    asyncio.run(run.under_pressure())
    return [(r.code, r.detail) for r in run.reasons]


def test_runs_under_pressure_cut_short_by_a_limit_blame_no_test(tmp_path: Path) -> None:
    # A loaded machine's wall limit cut both runs under pressure after test_a: test_b never reported.
    cut = verdict({"t::a": Outcome.PASSED, "t::b": Outcome.MISSING}, VerdictStatus.TIMEOUT)
    assert under_pressure(tmp_path, [cut, cut]) == [
        (
            ReasonCode.VALIDATION_ERROR,
            "the reference passed every ordinary run, but its run under CPU pressure hit the time limit on 2 of 2 "
            "runs: that check could not be made",
        )
    ]
    # A test seen failing is a finding, whatever the other run did; only it is named.
    failing = verdict({"t::a": Outcome.FAILED, "t::b": Outcome.PASSED})
    assert under_pressure(tmp_path, [cut, failing]) == [
        (ReasonCode.TIMING_DEPENDENT, "t::a pass on every ordinary run of the reference but fail under CPU pressure")
    ]
