"""Grading stdio tasks for real: every comparator, a checker in its own sandbox, and candidates that misbehave."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollbox.judge import Outcome, Verdict, VerdictStatus, grade
from rollbox.judge.runners._stdio import outputs_match, run_stdio
from rollbox.judge.runners._tree import GradingTree
from rollbox.sandbox import Status
from rollbox.tasks import Comparator, StdioGrading, Task, TaskFormatError, load_task
from rollbox.tasks._cases import load_stdio_cases

LIMITS = '[limits]\ntimeout = "2s"\ncpu_time = "1s"\nmemory = "128M"\noutput = "64K"\n'
SUM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
SUM_CASES = [("1 2\n", "3\n"), ("10 -4 5\n", "11\n"), ("7\n", "7\n")]


def make_task(
    root: Path, cases: Sequence[tuple[str, str]], grading: str = "", tests: dict[str, str] | None = None
) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text("print('todo')\n")
    (root / "tests").mkdir()
    lines = "".join(json.dumps({"input": i, "output": o}) + "\n" for i, o in cases)
    (root / "tests" / "cases.jsonl").write_text(lines)
    for name, text in (tests or {}).items():
        (root / "tests" / name).write_text(text)
    toml = f'[grading]\nrunner = "stdio"\ncommand = "python3 solution.py"\n{textwrap.dedent(grading)}\n{LIMITS}'
    (root / "task.toml").write_text(toml)
    return load_task(root)


def grade_code(task: Task, tmp_path: Path, code: str, extra: dict[str, str] | None = None) -> Verdict:
    workspace = tmp_path / "candidate"
    workspace.mkdir(parents=True)
    for name, text in {"solution.py": code, **(extra or {})}.items():
        (workspace / name).write_text(text)
    return asyncio.run(grade(task, workspace))


@pytest.mark.parametrize("comparator", ["exact", "whitespace", "float"])
def test_each_comparator_passes_a_correct_solution_and_fails_a_wrong_one(tmp_path: Path, comparator: str) -> None:
    task = make_task(tmp_path / "task", SUM_CASES, f'comparator = "{comparator}"')
    verdict = grade_code(task, tmp_path / "right", SUM)
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert [t.id for t in verdict.tests] == ["case-0", "case-1", "case-2"]
    wrong = grade_code(task, tmp_path / "wrong", SUM.replace("sum(", "max("))
    assert wrong.status is VerdictStatus.FAILED and wrong.reward == 0.0, wrong
    assert [t.outcome for t in wrong.tests] == [Outcome.FAILED, Outcome.FAILED, Outcome.PASSED]


def test_extra_whitespace_passes_whitespace_but_fails_exact(tmp_path: Path) -> None:
    spacey = SUM.replace("print(", "print('  ', ").replace("))\n", "), end='  \\n\\n')\n")
    for comparator, expected in (("whitespace", VerdictStatus.PASSED), ("exact", VerdictStatus.FAILED)):
        task = make_task(tmp_path / comparator, SUM_CASES, f'comparator = "{comparator}"')
        assert grade_code(task, tmp_path / f"c-{comparator}", spacey).status is expected


def test_float_tolerance_is_absolute_or_relative_and_inclusive() -> None:
    def close(actual: str, expected: str) -> bool:
        return outputs_match(Comparator.FLOAT, actual.encode(), expected, float_tolerance=1e-3)

    assert close("0.0009", "0") and not close("0.0011", "0")  # absolute: |0.0011 - 0| > 1e-3
    assert close("1000999.0", "1000000") and not close("1002000.0", "1000000")  # relative: 1e-3 of the larger
    assert close("x 1.0005 y", "x 1 y") and not close("X 1 y", "x 1 y")  # other tokens must be equal
    assert close("nan", "NaN") and not close("nan", "1") and not close("1 2", "1")
    assert not close("inf", "1e308") and close("inf", "inf")


def test_float_comparator_compares_integers_exactly_and_reads_only_numbers_as_printed() -> None:
    # A relative tolerance of 1e-6 accepted 1000000008 for the count 1000000007; Python's float() read "1_0" and
    # Arabic-Indic or fullwidth digits as 10.
    def close(actual: str, expected: str) -> bool:
        return outputs_match(Comparator.FLOAT, actual.encode(), expected)

    assert not close("1000000008", "1000000007") and close("+1000000007", "1000000007") and close("-0", "0")
    assert close("7.0", "7") and close("7", "7.0000000001") and close("10", "1e1")  # a real side: the tolerance
    for spelled in ("1_0", "\u0661\u0660", "\uff11\uff10", "0x0a", "10.0.0"):
        assert not close(spelled, "10"), spelled
    assert close("Infinity", "inf") and close("1E-3", "0.001") and close(".5", "0.5") and close("5.", "5.0")


@given(st.integers(-(10**30), 10**30), st.integers(-(10**30), 10**30))
def test_two_integers_match_under_the_float_comparator_only_when_equal(a: int, b: int) -> None:
    assert outputs_match(Comparator.FLOAT, str(a).encode(), str(b)) is (a == b)


def test_float_tolerance_boundary_through_the_judge(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", [("", "0.5\n")], 'comparator = "float"\nfloat_tolerance = 0.01')
    assert grade_code(task, tmp_path / "in", "print(0.505)\n").status is VerdictStatus.PASSED
    assert grade_code(task, tmp_path / "out", "print(0.52)\n").status is VerdictStatus.FAILED


PERMUTATION_CHECKER = textwrap.dedent("""
    import sys
    _, expected, output = (open(p).read() for p in sys.argv[1:4])
    sys.exit(0 if sorted(expected.split()) == sorted(output.split()) else 1)
""")
CHECKER_TASK = 'comparator = "checker"\nchecker = "check.py"'
SORT_CASES = [("3 1 2\n", "1 2 3\n"), ("b a\n", "a b\n")]


def test_a_checker_accepts_any_permutation_and_rejects_a_wrong_answer(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", SORT_CASES, CHECKER_TASK, {"check.py": PERMUTATION_CHECKER})
    reverse = "import sys\nprint(*sorted(sys.stdin.read().split(), reverse=True))\n"
    assert grade_code(task, tmp_path / "reverse", reverse).status is VerdictStatus.PASSED
    assert grade_code(task, tmp_path / "echo", "import sys\nprint(sys.stdin.read())\n").status is VerdictStatus.PASSED
    drop = grade_code(task, tmp_path / "drop", "import sys\nprint(*sys.stdin.read().split()[1:])\n")
    assert drop.status is VerdictStatus.FAILED and {t.outcome for t in drop.tests} == {Outcome.FAILED}


def test_an_executable_checker_runs_directly(tmp_path: Path) -> None:
    script = (
        "#!/bin/sh\n[ \"$(tr -s ' \\n' '\\n\\n' < \"$2\" | sort)\" = \"$(tr -s ' \\n' '\\n\\n' < \"$3\" | sort)\" ]\n"
    )
    task = make_task(tmp_path / "task", SORT_CASES, 'comparator = "checker"\nchecker = "check"', {"check": script})
    (task.tests / "check").chmod(0o755)
    assert grade_code(task, tmp_path / "ok", "import sys\nprint(sys.stdin.read())\n").status is VerdictStatus.PASSED
    assert grade_code(task, tmp_path / "no", "print('z')\n").status is VerdictStatus.FAILED


def test_a_candidate_cannot_tamper_with_the_checker(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", SORT_CASES, CHECKER_TASK, {"check.py": PERMUTATION_CHECKER})
    attack = textwrap.dedent("""
        import os
        accept = "import sys\\nsys.exit(0)\\n"
        for path in ("check.py", "tests/check.py", "/tmp/rollbox-check/check.py"):
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            open(path, "w").write(accept)
        os.makedirs("/tmp/rollbox-check", exist_ok=True)
        for name in ("expected", "output"):
            open(f"/tmp/rollbox-check/{name}", "w").write("OK")
        print("OK")
    """)
    verdict = grade_code(task, tmp_path / "attack", attack, {"check.py": "import sys\nsys.exit(0)\n"})
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict


def test_a_timeout_ends_the_run_and_leaves_later_cases_missing(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", SUM_CASES, 'comparator = "whitespace"')
    assert isinstance(task.grading, StdioGrading)
    report = asyncio.run(run_stdio(task, task.grading, _tree(tmp_path, "import time\ntime.sleep(60)\n")))
    assert report.run_status is Status.TIMEOUT
    assert [t.outcome for t in report.tests] == [Outcome.FAILED, Outcome.MISSING, Outcome.MISSING]
    verdict = grade_code(task, tmp_path / "spin", "while True:\n    pass\n")
    assert verdict.status is VerdictStatus.TIMEOUT and verdict.reward == 0.0


def test_infinite_output_does_not_pass(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", SUM_CASES, 'comparator = "whitespace"')
    verdict = grade_code(task, tmp_path / "flood", "while True:\n    print(3)\n")
    assert verdict.status not in (VerdictStatus.PASSED, VerdictStatus.INFRA_ERROR), verdict
    assert verdict.reward == 0.0 and verdict.passed == 0


def test_a_crash_fails_and_a_signal_is_an_error(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", SUM_CASES[:1], 'comparator = "whitespace"')
    crash = grade_code(task, tmp_path / "crash", "raise SystemExit(3)\n")
    assert crash.status is VerdictStatus.ERROR and [t.outcome for t in crash.tests] == [Outcome.FAILED]
    killed = grade_code(task, tmp_path / "kill", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert [t.outcome for t in killed.tests] == [Outcome.ERROR] and killed.reward == 0.0


def test_malformed_cases_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    path.write_text('{"input": "1", "output": "1"}\n\n{"input": 2, "output": "2"}\n')
    with pytest.raises(TaskFormatError, match="line 3"):
        load_stdio_cases(path)
    path.write_text('{"input": "1", "output": "1"}\nnot json\n')
    with pytest.raises(TaskFormatError, match="line 2"):
        load_stdio_cases(path)


def _tree(tmp_path: Path, code: str) -> GradingTree:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "solution.py").write_text(code)
    return GradingTree(tree)


def test_a_checker_that_cannot_run_is_the_tasks_failure_never_the_candidates(tmp_path: Path) -> None:
    """A checker whose interpreter the sandbox lacks exits 127 on every output: every case was failed, and the
    reference solution scored 0."""
    script = "#!/usr/bin/env rollbox-no-such-interpreter\n"
    task = make_task(tmp_path / "task", SORT_CASES, 'comparator = "checker"\nchecker = "check"', {"check": script})
    (task.tests / "check").chmod(0o755)
    verdict = grade_code(task, tmp_path / "ok", "import sys\nprint(sys.stdin.read())\n")
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert "checker 'check' cannot run (exit status 127" in (verdict.error or ""), verdict


def test_tests_too_big_for_the_checkers_disk_are_the_tasks_failure(tmp_path: Path) -> None:
    """The task's tests/ (copied into the checker's sandbox) does not fit its disk limit: rollbox's infra_error,
    not the candidate's tree refused as too large."""
    big = {"check.py": PERMUTATION_CHECKER, "data.txt": "x" * 3_000_000}
    root = tmp_path / "task"
    make_task(root, SORT_CASES, CHECKER_TASK, big)
    (root / "task.toml").write_text((root / "task.toml").read_text() + 'disk = "1M"\n')
    verdict = grade_code(load_task(root), tmp_path / "ok", "import sys\nprint(sys.stdin.read())\n")
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert "tests/ directory does not fit the grading sandbox" in (verdict.error or ""), verdict
