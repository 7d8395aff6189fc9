"""What the reference's runs say: only what was observed. A test that never reported in a run (the run hit a limit
before it, or died before it started) is neither a pass nor a failure there, so it can never make a test look
order-, hash-seed- or date-dependent, failing or flaky; the test a run died in (a signal, an exit) did not pass
there, so one that passed on other runs of that condition is flaky (the runs disagree); and a reference that is not
steady is never admitted for want of a test to blame."""

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
from rollbox.sandbox import Status
from rollbox.tasks import load_task

TESTS = ("t::a", "t::b", "t::c")
CONDITIONS = (BASELINE, Condition(order=1), Condition(hash_seed=3), Condition(clock="+3750d"))


#: The sandbox status of a run that ended with the verdict's status (a run that failed exited; one that died, unless
#: told otherwise, was killed by a signal).
RUN_STATUS = {
    VerdictStatus.PASSED: Status.OK,
    VerdictStatus.FAILED: Status.NONZERO_EXIT,
    VerdictStatus.TIMEOUT: Status.TIMEOUT,
    VerdictStatus.MEMORY_LIMIT: Status.MEMORY_LIMIT,
}


def verdict(
    outcomes: dict[str, Outcome],
    status: VerdictStatus = VerdictStatus.FAILED,
    *,
    run_status: Status | None = None,
    running: str | None = None,
) -> Verdict:
    """A verdict as the judge gives it: a run that died in ``running`` was killed by a signal unless ``run_status``
    says otherwise."""
    tests = tuple(GradedTest(t, o) for t, o in outcomes.items())
    if all(o is Outcome.PASSED for o in outcomes.values()):
        status = VerdictStatus.PASSED
    if run_status is None:
        run_status = Status.SIGNALED if running is not None and status is VerdictStatus.FAILED else RUN_STATUS[status]
    return Verdict(task_id="t", status=status, reward=0.0, tests=tests, run_status=run_status, running=running)


def variants() -> list[Variant]:
    """Two orders whose ids are the original's (pytest's are; only a reordered cases file renames them)."""
    return [Variant(task=None), Variant(task=None)]  # type: ignore[arg-type]


def test_a_timeout_in_two_orders_is_no_order_dependence() -> None:
    # The tests' own order runs a, then b hangs and c never runs; reversed, c runs, b hangs and a never runs.
    missing = {"t::a": Outcome.MISSING, "t::b": Outcome.MISSING, "t::c": Outcome.MISSING}
    own = verdict({**missing, "t::a": Outcome.PASSED}, VerdictStatus.TIMEOUT, running="t::b")
    back = verdict({**missing, "t::c": Outcome.PASSED}, VerdictStatus.TIMEOUT, running="t::b")
    found = read_runs({BASELINE: [own, own], Condition(order=1): [back, back]}, variants())
    assert found.dependent == {} and found.flaky == [] and found.failing == []
    assert found.missing == ["t::b", "t::c"]
    # Every limit of the sandbox is a limit, whatever status the verdict took for it: the output limit cuts a run short
    # as a timeout does (its verdict is failed), and the test it fell on is no finding either.
    for limit in (Status.OUTPUT_LIMIT, Status.PIDS_LIMIT, Status.DISK_LIMIT, Status.CPU_TIME_LIMIT):
        ok = verdict(dict.fromkeys(TESTS, Outcome.PASSED))
        cut = verdict({**missing, "t::a": Outcome.PASSED}, run_status=limit, running="t::b")
        found = read_runs({BASELINE: [ok, cut, ok], Condition(order=1): [cut, cut]}, variants())
        assert found.flaky == [] and found.failing == [] and found.dependent == {}, limit


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
    # No run died in a test (each ended by itself, or between tests): the tests that never reported never ran.
    assert first.flaky == second.flaky
    assert first.failing == second.failing
    assert first.dependent == second.dependent
    for test, condition in first.dependent.items():
        seen = [o[test] for o in runs[condition]]
        assert any(o in (Outcome.FAILED, Outcome.ERROR) for o in seen) and Outcome.PASSED not in seen


def test_a_test_that_sometimes_kills_its_process_is_flaky() -> None:
    # Its run dies in it (pytest never hears of it again): failed, the test missing, every other test passed.
    ok = verdict(dict.fromkeys(TESTS, Outcome.PASSED))
    died = verdict({**dict.fromkeys(TESTS, Outcome.PASSED), "t::c": Outcome.MISSING}, running="t::c")
    found = read_runs({BASELINE: [ok, died, ok, died], Condition(order=1): [ok]}, variants())
    assert found.flaky == ["t::c"] and found.failing == [] and found.dependent == {}


def test_the_tests_after_the_one_a_run_died_in_never_ran() -> None:
    # a kills the run now and then, by a signal or an exit (os._exit): b and c, after it, never run in those runs.
    ok = verdict(dict.fromkeys(TESTS, Outcome.PASSED))
    for ending in (Status.SIGNALED, Status.NONZERO_EXIT, Status.OK):
        died = verdict(dict.fromkeys(TESTS, Outcome.MISSING), run_status=ending, running="t::a")
        found = read_runs({BASELINE: [ok, died, ok], Condition(order=1): [ok]}, variants())
        assert found.flaky == ["t::a"] and found.failing == [] and found.dependent == {}, ending
    # A run that died in it on every run of a condition: a failure there, the others no finding.
    died = verdict(dict.fromkeys(TESTS, Outcome.MISSING), running="t::a")
    found = read_runs({BASELINE: [ok, ok], Condition(hash_seed=3): [died, died]}, variants())
    assert found.dependent == {"t::a": Condition(hash_seed=3)} and found.flaky == [] and found.failing == []
    found = read_runs({BASELINE: [died, died]}, variants())
    assert found.failing == ["t::a"] and found.missing == ["t::b", "t::c"]


def reference_runs(tmp_path: Path, own: Sequence[Verdict], back: Sequence[Verdict] = ()) -> ReferenceRuns:
    """A pytest task's reference runs, ``own`` the verdicts of the runs in the tests' own order in turn, ``back`` those
    in reversed order (the other conditions' runs pass)."""
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
    queues = {"own": list(own), "reversed": list(back)}
    passing = verdict({"tests/test_calc.py::test_a": Outcome.PASSED})

    async def measure(items: Sequence[Item]) -> list[Measured]:
        # The tests' own order is variant 0's task, under no variables; the others pass once their queue is empty.
        return [
            Measured(queues[t].pop(0) if env is None and queues[t] else passing, 0.1)  # type: ignore[index]
            for t, _, env in items
        ]

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
    silent = Verdict(task_id="t", status=VerdictStatus.ERROR, reward=0.0, tests=(), run_status=Status.NONZERO_EXIT)
    runs = reference_runs(tmp_path, [silent, passing, passing])
    asyncio.run(runs.finish(asyncio.run(runs.measure(runs.first()))))
    assert runs.steady is None
    assert [r.code for r in runs.reasons] == [ReasonCode.FLAKY], runs.reasons
    assert "passed 2 of 3 runs in the tests' own order and got error" in runs.reasons[0].detail
    assert "exited before every test reported on 1 of" in runs.reasons[0].detail


def test_a_run_of_another_condition_that_died_in_no_test_is_no_pass(tmp_path: Path) -> None:
    # A run in reversed order was killed between tests (no test to blame): it was read as no finding, and the
    # reference admitted as steady though one of its runs died.
    passing = verdict({"tests/test_calc.py::test_a": Outcome.PASSED})
    died = verdict({"tests/test_calc.py::test_a": Outcome.MISSING}, run_status=Status.SIGNALED)
    runs = reference_runs(tmp_path, [], back=[died, passing, passing])
    asyncio.run(runs.finish(asyncio.run(runs.measure(runs.first()))))
    assert [(r.code, r.detail) for r in runs.reasons] == [
        (
            ReasonCode.FLAKY,
            "the reference passed 2 of 3 runs with reversed order (seed 1); its run was killed by a signal before "
            "every test reported on the others, in no test to blame",
        )
    ]
    # Killed on every run in that order: it holds only in the tests' own order.
    runs = reference_runs(tmp_path, [], back=[died, died, died])
    asyncio.run(runs.finish(asyncio.run(runs.measure(runs.first()))))
    assert [r.code for r in runs.reasons] == [ReasonCode.ORDER_DEPENDENT], runs.reasons
    assert "in no test to blame" in runs.reasons[0].detail


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
    cut = verdict({"t::a": Outcome.PASSED, "t::b": Outcome.MISSING}, VerdictStatus.TIMEOUT, running="t::b")
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
