"""Validation reports only what it observed (a reference cut short by its limit is no order dependence), fixes what
``--fix`` can fix (a tight time limit widened; a task a special-case patch passes strengthened with differential
tests), remembers what it admitted to find duplicates later, and says what to do when it cannot move the clock."""

from __future__ import annotations

import asyncio
import shutil
import tomllib
from pathlib import Path

import pytest

from rollbox.curate import (
    ClockUnavailable,
    Decision,
    ReasonCode,
    TaskReport,
    ValidateOptions,
    ValidationCache,
    _clock,
    validate,
)
from rollbox.tasks import load_task

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

PYTEST = '[grading]\nrunner = "pytest"\n'
#: Cheap: a few runs, no pressure, no mutants (what is checked here shows on the first runs).
QUICK = ValidateOptions(
    runs=2, reruns=1, steady_runs=2, hash_seeds=1, pressure=False, max_mutants=0, generate=False, clock=False
)


def write_task(root: Path, name: str, files: dict[str, str], toml: str) -> Path:
    path = root / name
    for relative, text in files.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    (path / "task.toml").write_text(toml)
    return path


def run(paths: list[Path], options: ValidateOptions = QUICK, cache: ValidationCache | None = None) -> list[TaskReport]:
    return asyncio.run(validate([load_task(p) for p in paths], options=options, workers=2, cache=cache))


STEP_TESTS = (
    "from steps import step\n\n\ndef test_a():\n    assert step(1) == 2\n\n\n"
    "def test_b():\n    assert step(2) == 3\n\n\ndef test_c():\n    assert step(3) == 4\n"
)


def test_a_reference_cut_short_by_its_limit_is_not_order_dependent(tmp_path: Path) -> None:
    """The reference loops on test_b: in the tests' own order test_a passes and test_c never runs; reversed, test_c
    passes and test_a never runs. A test that never ran failed nothing."""
    hangs = "def step(n):\n    while n == 2:\n        pass\n    return n + 1\n"
    path = write_task(
        tmp_path,
        "reference-times-out",
        {
            "workspace/steps.py": "def step(n):\n    raise NotImplementedError\n",
            "solution/steps.py": hangs,
            "tests/test_steps.py": STEP_TESTS,
        },
        PYTEST + '[limits]\ntimeout = "20s"\ncpu_time = "2s"\n',
    )
    (report,) = run([path])
    assert ReasonCode.REFERENCE_FAILS in report.codes(), report.reasons
    assert not report.codes() & {ReasonCode.ORDER_DEPENDENT, ReasonCode.FLAKY, ReasonCode.HASH_SEED_DEPENDENT}
    detail = next(r.detail for r in report.reasons if r.code is ReasonCode.REFERENCE_FAILS)
    assert "timeout" in detail and "test_c never ran" in detail, detail


def test_a_reference_using_a_tool_the_agent_cannot_know_fails_and_nothing_more(tmp_path: Path) -> None:
    tool = "import subprocess\n\n\ndef step(n):\n    return int(subprocess.check_output(['rollbox-incr', str(n)]))\n"
    path = write_task(
        tmp_path,
        "reference-uses-a-tool",
        {
            "workspace/steps.py": "def step(n):\n    raise NotImplementedError\n",
            "solution/steps.py": tool,
            "tests/test_steps.py": STEP_TESTS,
        },
        PYTEST,
    )
    (report,) = run([path])
    assert ReasonCode.REFERENCE_FAILS in report.codes(), report.reasons
    assert not report.codes() & {ReasonCode.ORDER_DEPENDENT, ReasonCode.FLAKY, ReasonCode.HASH_SEED_DEPENDENT}


CLAMP_STUB = "def clamp(x, lo, hi):\n    raise NotImplementedError\n"
CLAMP = "def clamp(x, lo, hi):\n    return max(lo, min(x, hi))\n"
BUSY = (
    "import time\n\nfrom calc import clamp\n\n\ndef test_clamp():\n    assert clamp(11, 0, 10) == 10\n\n\n"
    "def test_many():\n    start, seen = time.process_time(), set()\n"
    "    while time.process_time() - start < 0.6:\n        seen.add(clamp(5, 0, 10))\n    assert seen == {5}\n"
)


def test_fix_widens_a_tight_time_limit(tmp_path: Path) -> None:
    path = write_task(
        tmp_path,
        "tight",
        {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test_calc.py": BUSY},
        PYTEST + '[limits]\ntimeout = "60s"\ncpu_time = "2s"\n',
    )
    (before,) = run([path])
    assert ReasonCode.TIGHT_TIME_LIMIT in before.codes(), before.reasons
    assert before.reference_cpu_s is not None and before.reference_cpu_s >= 0.6
    (fixed,) = run([path], ValidateOptions(**{**QUICK.__dict__, "fix": True}))
    assert ReasonCode.TIGHT_TIME_LIMIT not in fixed.codes() and fixed.widened_limits.startswith("cpu_time = "), fixed
    limits = tomllib.loads((path / "task.toml").read_text())["limits"]
    assert float(limits["cpu_time"].removesuffix("s")) >= 3 * 0.6 and limits["timeout"] == "60s"
    (after,) = run([path])
    assert ReasonCode.TIGHT_TIME_LIMIT not in after.codes(), after.reasons


INFLECT = """def plural(word):
    if word == "person":
        return "people"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"
"""
INFLECT_TESTS = """import pytest

from inflect import plural


CASES = [("person", "people"), ("city", "cities"), ("day", "days"), ("cat", "cats")]


@pytest.mark.parametrize(("word", "expected"), CASES)
def test_plural(word, expected):
    assert plural(word) == expected
"""


def one_input_bug(root: Path) -> Path:
    """A bug in the rule for -y that the tests show on one word only: ``if word == 'city'`` passes them."""
    toml = PYTEST + (
        'fail_to_pass = ["tests/test_inflect.py::test_plural[city-cities]"]\n'
        'pass_to_pass = ["tests/test_inflect.py::test_plural[person-people]", '
        '"tests/test_inflect.py::test_plural[day-days]", "tests/test_inflect.py::test_plural[cat-cats]"]\n'
    )
    return write_task(
        root,
        "one-input-bug",
        {
            "workspace/inflect.py": INFLECT.replace('+ "ies"', '+ "es"'),
            "solution/inflect.py": INFLECT,
            "tests/test_inflect.py": INFLECT_TESTS,
        },
        toml,
    )


def test_fix_strengthens_a_task_a_special_case_passes_with_differential_tests(tmp_path: Path) -> None:
    path = one_input_bug(tmp_path)
    (before,) = run([path])
    assert ReasonCode.SHORTCUT_PASSES in before.codes() and before.f2p_inputs == 1, before.reasons
    (fixed,) = run([path], ValidateOptions(**{**QUICK.__dict__, "fix": True}))
    assert fixed.decision is Decision.ADMIT, fixed.reasons
    assert fixed.fixed_file == "tests/test_rollbox_differential.py" and fixed.generated_cases > 0
    fail_to_pass = tomllib.loads((path / "task.toml").read_text())["grading"]["fail_to_pass"]
    assert len(fail_to_pass) == 1 + fixed.generated_cases
    # The task as written now: the special case fails the hidden differential tests.
    (after,) = run([path])
    assert after.decision is Decision.ADMIT, after.reasons
    patches = {c.name: c.status for c in after.candidates if c.kind == "shortcut"}
    assert patches and set(patches.values()) == {"failed"}, patches


def test_a_duplicate_of_a_task_admitted_before_is_named(tmp_path: Path) -> None:
    cache = ValidationCache(tmp_path / "cache")
    tests = "from calc import clamp\n\n\ndef test_clamp():\n    assert clamp(11, 0, 10) == 10\n"
    tests += "    assert clamp(-1, 0, 9) == 0\n"
    files = {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test_calc.py": tests}
    original = write_task(tmp_path, "original", files, PYTEST)
    (first,) = run([original], cache=cache)
    assert first.decision is Decision.ADMIT, first.reasons
    copy = tmp_path / "elsewhere" / "copy"
    shutil.copytree(original, copy)
    (copy / "task.toml").write_text('id = "a-new-id"\n' + PYTEST)
    (duplicate,) = run([copy], cache=cache)
    assert duplicate.codes() == {ReasonCode.DUPLICATE} and duplicate.gradings == 0
    assert duplicate.duplicate_of == f"original ({original})" and "validated before" in duplicate.reasons[0].detail
    # The task itself, validated again, is no duplicate of itself.
    (again,) = run([original], cache=cache)
    assert again.decision is Decision.ADMIT and again.cached


def test_the_same_problem_with_another_reference_is_a_duplicate_once_both_are_admitted(tmp_path: Path) -> None:
    tests = "from calc import clamp\n\n\ndef test_clamp():\n    assert clamp(11, 0, 10) == 10\n"
    tests += "    assert clamp(-1, 0, 9) == 0\n    assert clamp(4, 0, 9) == 4\n"
    other = "def clamp(x, lo, hi):\n    return lo if x < lo else hi if x > hi else x\n"
    wrong = "def clamp(x, lo, hi):\n    return hi\n"
    paths = [
        write_task(
            tmp_path,
            name,
            {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": s, "tests/test_calc.py": tests},
            PYTEST,
        )
        for name, s in (("wrong", wrong), ("first", CLAMP), ("second", other))
    ]
    wrong_report, first, second = run(paths)
    # A wrong reference is no original: the task beside it with a right one is admitted.
    assert ReasonCode.REFERENCE_FAILS in wrong_report.codes() and ReasonCode.DUPLICATE not in wrong_report.codes()
    assert first.decision is Decision.ADMIT, first.reasons
    assert second.codes() == {ReasonCode.DUPLICATE} and second.duplicate_of == f"first ({paths[1]})", second.reasons
    assert second.gradings > 0  # validated first: only then could it be told from a wrong one


def test_without_libfaketime_validation_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_clock, "_PLACES", (str(tmp_path / "nowhere" / "libfaketime.so.1"),))
    files = {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test_calc.py": BUSY}
    path = write_task(tmp_path, "t", files, PYTEST)
    with pytest.raises(ClockUnavailable, match=r"apt-get install libfaketime.*--no-clock"):
        run([path], ValidateOptions(clock=True))
