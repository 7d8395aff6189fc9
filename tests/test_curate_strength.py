"""Test strength beyond a ratio: every branch and ``raise`` of the changed functions is mutated, and one whose
removal survives is a finding on its own, whatever the kill ratio."""

from __future__ import annotations

from rollbox.curate import MutantResult, Operator, ReasonCode
from rollbox.curate._reference import Reference, Target
from rollbox.curate._strength import choose_mutants, weak_reasons

SOURCE = '''def parse(text):
    """Doc."""
    text = text.strip()
    if not text:
        raise ValueError("empty")
    try:
        value = int(text)
    except ValueError:
        return None
    if value < 0:
        value = -value
    else:
        value += 1
    raise_later = value > 99
    if raise_later:
        raise OverflowError(value)
    return value


def other(x):
    if x:
        return 1
    return 2
'''


def result(operator: Operator, killed: bool, where: str = "line 3 in parse") -> MutantResult:
    return MutantResult(
        operator=operator.value, path="m.py", function="parse", location=where, description="d", killed=killed
    )


def test_every_branch_of_the_changed_functions_is_graded_beside_the_drawn_ones() -> None:
    reference = Reference(files={"m.py": SOURCE.encode()}, targets=(Target("m.py", SOURCE, ("parse",)),))
    chosen = choose_mutants(reference, 5, seed="t")
    branches = [m for _, m in chosen if m.operator is Operator.REMOVED_BRANCH]
    assert [m.description for m in branches] == [
        "the branch `if not text:` emptied",
        "the handler `except ValueError:` emptied",
        "the branch `if value < 0:` emptied",
        "the `else` of `if value < 0:` emptied",
        "the branch `if raise_later:` emptied",
    ]
    assert all(m.function == "parse" for _, m in chosen)  # never the function the reference leaves alone
    assert len(chosen) - len(branches) == 5


def test_a_surviving_branch_removal_is_weak_whatever_the_ratio() -> None:
    results = [result(Operator.COMPARISON_FLIP, True) for _ in range(18)]
    results += [result(Operator.REMOVED_BRANCH, True), result(Operator.REMOVED_BRANCH, False, "line 4 in parse")]
    (reason,) = weak_reasons(results, min_kill_ratio=0.6, kill_ratio_generated=None, fixed_file=None)
    assert reason.code is ReasonCode.WEAK_TESTS
    assert reason.detail.startswith("no test checks 1 of 2 branches") and "m.py line 4 in parse" in reason.detail
    # Killed by cases --fix wrote, it is checked now.
    fixed = [*results[:-1], MutantResult(**{**results[-1].to_json(), "killed_by_generated": True})]
    assert weak_reasons(fixed, min_kill_ratio=0.6, kill_ratio_generated=1.0, fixed_file="tests/c.jsonl") == []


def test_a_low_ratio_is_weak_as_before() -> None:
    results = [result(Operator.ARITHMETIC, i < 5) for i in range(10)]
    (reason,) = weak_reasons(results, min_kill_ratio=0.6, kill_ratio_generated=None, fixed_file=None)
    assert reason.detail.startswith("the tests kill 50% of 10 mutants")
    assert weak_reasons([], min_kill_ratio=0.6, kill_ratio_generated=None, fixed_file=None) == []
