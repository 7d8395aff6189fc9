"""Grading script tasks for real: the reward file decides, stale or forged rewards do not, and canaries speak up."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import Outcome, Verdict, VerdictStatus, grade
from rollbox.judge.runners._report import RunnerReport
from rollbox.judge.runners._script import parse_reward, run_script
from rollbox.sandbox import Status
from rollbox.tasks import ScriptGrading, Task, load_task

LIMITS = '[limits]\ntimeout = "5s"\ncpu_time = "3s"\nmemory = "256M"\n'
STUB = "def add(a, b):\n    raise NotImplementedError\n"
CORRECT = "def add(a, b):\n    return a + b\n"
# A typical Harbor verifier: run the checks, then write 1 or 0.
TEST_SH = textwrap.dedent("""
    cd /workspace
    python3 "$ROLLBOX_TESTS/check.py"
    if [ $? -eq 0 ]; then echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"; else echo 0 > "$ROLLBOX_REWARD_DIR/reward.txt"; fi
""")
CHECK_PY = "import sys\nsys.path.insert(0, '/workspace')\nimport solution\nassert solution.add(2, 3) == 5\n"


def make_task(root: Path, script: str = TEST_SH) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text(STUB)
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text(script)
    (root / "tests" / "check.py").write_text(CHECK_PY)
    (root / "task.toml").write_text(f'[grading]\nrunner = "script"\n{LIMITS}')
    return load_task(root)


def grade_code(task: Task, tmp_path: Path, code: str) -> Verdict:
    workspace = tmp_path / "candidate"
    workspace.mkdir(parents=True)
    (workspace / "solution.py").write_text(code)
    return asyncio.run(grade(task, workspace))


def run_code(task: Task, tmp_path: Path, code: str) -> RunnerReport:
    """The runner's own report for a tree holding ``code`` as solution.py."""
    tree = tmp_path / "tree"
    tree.mkdir(parents=True)
    (tree / "solution.py").write_text(code)
    assert isinstance(task.grading, ScriptGrading)
    return asyncio.run(run_script(task, task.grading, tree))


def test_a_passing_and_a_failing_solution(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task")
    passing = grade_code(task, tmp_path / "right", CORRECT)
    assert passing.status is VerdictStatus.PASSED and passing.reward == 1.0, passing
    assert [t.to_json() for t in passing.tests] == [{"id": "script", "outcome": "passed"}]
    failing = grade_code(task, tmp_path / "wrong", "def add(a, b):\n    return a - b\n")
    assert failing.status is VerdictStatus.FAILED and failing.reward == 0.0, failing


def test_a_module_that_forges_the_reward_is_tampered(tmp_path: Path) -> None:
    forge = textwrap.dedent("""
        import os
        path = os.path.join(os.environ["ROLLBOX_REWARD_DIR"], "reward.txt")
        with open(path, "w") as f:
            f.write("1")
        os.chmod(path, 0o444)  # the verifier's own "echo 0 >" now fails
        def add(a, b):
            return 0
    """)
    report = run_code(task := make_task(tmp_path / "task"), tmp_path / "raw", forge)
    assert report.tests[0].outcome is Outcome.PASSED, "the forgery works inside the sandbox; only the scan stops it"
    assert report.tampered and report.detail and "reward.txt" in report.detail
    verdict = grade_code(task, tmp_path / "graded", forge)
    assert verdict.status is VerdictStatus.TAMPERED and verdict.reward is not None and verdict.reward <= 0, verdict
    assert any(f["code"] == "tampered" for f in verdict.flags)


def test_exit_zero_without_a_reward_does_not_pass(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", 'python3 "$ROLLBOX_TESTS/check.py"\nexit 0\n')
    verdict = grade_code(task, tmp_path / "c", CORRECT)
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict


def test_the_exit_code_alone_never_decides(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", 'echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"\nexit 3\n')
    report = run_code(task, tmp_path, CORRECT)
    assert report.run_status is Status.NONZERO_EXIT and report.tests[0].outcome is Outcome.PASSED


@pytest.mark.parametrize(("reward", "outcome"), [("1.0", Outcome.PASSED), ("0.5", Outcome.FAILED)])
def test_reward_json(tmp_path: Path, reward: str, outcome: Outcome) -> None:
    script = (
        f'python3 "$ROLLBOX_TESTS/check.py" && echo \'{{"reward": {reward}}}\' > "$ROLLBOX_REWARD_DIR/reward.json"\n'
    )
    task = make_task(tmp_path / "task", script)
    verdict = grade_code(task, tmp_path / "c", CORRECT)
    assert [t.outcome for t in verdict.tests] == [outcome], verdict


@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        ('echo "one" > "$ROLLBOX_REWARD_DIR/reward.txt"', Outcome.ERROR),
        ('echo \'{"reward": true}\' > "$ROLLBOX_REWARD_DIR/reward.json"', Outcome.ERROR),
        ('ln -s /etc/hostname "$ROLLBOX_REWARD_DIR/reward.txt"', Outcome.ERROR),
        (
            'echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"; touch -d 2001-01-01 "$ROLLBOX_REWARD_DIR/reward.txt"',
            Outcome.FAILED,
        ),
        # What the candidate's code could leave there, had the script let it: never an exception in the judge.
        ('python3 -c "print(\'[\' * 100000)" > "$ROLLBOX_REWARD_DIR/reward.json"', Outcome.ERROR),
        ('printf \'{"reward": 1%0400d}\' 0 > "$ROLLBOX_REWARD_DIR/reward.json"', Outcome.ERROR),
        ('printf "1%20000s" "" > "$ROLLBOX_REWARD_DIR/reward.txt"', Outcome.ERROR),
    ],
    ids=[
        "not a number",
        "not a number in json",
        "a link",
        "modified outside the run",
        "nested too deeply",
        "too large for a float",
        "longer than any reward",
    ],
)
def test_untrustworthy_reward_files_never_pass(tmp_path: Path, line: str, outcome: Outcome) -> None:
    report = run_code(make_task(tmp_path / "task", line + "\n"), tmp_path, CORRECT)
    assert report.tests[0].outcome is outcome and not report.tampered, report


def test_a_script_that_runs_out_of_time_does_not_pass(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", 'echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"\nsleep 60\n')
    report = run_code(task, tmp_path / "raw", CORRECT)
    assert report.run_status is Status.TIMEOUT and report.tests[0].outcome is Outcome.FAILED
    assert grade_code(task, tmp_path / "graded", CORRECT).status is VerdictStatus.TIMEOUT


def test_the_must_fail_canary_reports_a_verifier_that_proves_nothing(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task", 'echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"\n')
    report = run_code(task, tmp_path, CORRECT)
    assert report.tests[0].outcome is Outcome.PASSED and not report.tampered
    assert [f["code"] for f in report.flags] == ["verifier_proves_nothing"] and "canary" in report.flags[0]["detail"]
    honest = run_code(make_task(tmp_path / "honest"), tmp_path / "honest-tree", CORRECT)
    assert honest.tests[0].outcome is Outcome.PASSED and honest.flags == ()


def test_parse_reward() -> None:
    assert parse_reward("reward.txt", b" 0.25\n") == 0.25 and parse_reward("reward.json", b'{"reward": 1}') == 1.0
    for name, data in [
        ("reward.txt", b"nan"),
        ("reward.txt", b""),
        ("reward.json", b"[1]"),
        ("reward.txt", b"\xff"),
        ("reward.json", b"[" * 100000),
        ("reward.json", b'{"reward": ' + b"9" * 400 + b"}"),
    ]:
        with pytest.raises(ValueError):
            parse_reward(name, data)


def test_a_tree_that_fills_the_disk_is_the_candidates_failure_never_infra(tmp_path: Path) -> None:
    # A 4 MiB disk has 1,024 inodes: candidates with about that many files fill it while the grading sandbox is
    # prepared. Whichever step that happens in, the candidate's tree did it.
    root = tmp_path / "task"
    make_task(root)
    (root / "task.toml").write_text(f'[grading]\nrunner = "script"\n{LIMITS}disk = "4M"\n')
    task = load_task(root)
    statuses = set()
    for count in range(1005, 1025, 3):
        files = {"solution.py": CORRECT, **{f"empty/{i}": "" for i in range(count)}}
        statuses.add(asyncio.run(grade(task, files)).status)
    assert VerdictStatus.INFRA_ERROR not in statuses, statuses
