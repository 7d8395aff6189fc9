"""Grading script tasks for real: the reward file decides, stale or forged rewards do not, and canaries speak up."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import Outcome, Verdict, VerdictStatus, grade
from rollbox.judge.runners._report import RunnerReport
from rollbox.judge.runners._script import parse_reward, run_script
from rollbox.judge.runners._tree import GradingTree
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
    return asyncio.run(run_script(task, task.grading, GradingTree(tree)))


def test_a_passing_and_a_failing_solution(tmp_path: Path) -> None:
    task = make_task(tmp_path / "task")
    passing = grade_code(task, tmp_path / "right", CORRECT)
    assert passing.status is VerdictStatus.PASSED and passing.reward == 1.0, passing
    assert [t.to_json() for t in passing.tests] == [{"id": "script", "outcome": "passed"}]
    failing = grade_code(task, tmp_path / "wrong", "def add(a, b):\n    return a - b\n")
    assert failing.status is VerdictStatus.FAILED and failing.reward == 0.0, failing


def test_a_module_that_writes_the_reward_file_gets_nothing_from_it(tmp_path: Path) -> None:
    forge = textwrap.dedent("""
        import os
        path = os.path.join(os.environ["ROLLBOX_REWARD_DIR"], "reward.txt")
        try:
            with open(path, "w") as f:
                f.write("1")
            os.chmod(path, 0o444)  # the verifier's own "echo 0 >" would fail
        except OSError:
            pass
        def add(a, b):
            return 0
    """)
    verdict = grade_code(make_task(tmp_path / "task"), tmp_path / "graded", forge)
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
    assert "reward_channel_probe" in [f["code"] for f in verdict.flags], verdict.flags


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
        # A program (ln, here) can make nothing at the reward path: only test.sh's bash writes a reward.
        ('ln -s /etc/hostname "$ROLLBOX_REWARD_DIR/reward.txt"', Outcome.FAILED),
        # What the candidate's code could leave there, had the script let it: never an exception in the judge.
        ('python3 -c "print(\'[\' * 100000)" > "$ROLLBOX_REWARD_DIR/reward.json"', Outcome.ERROR),
        ('printf \'{"reward": 1%0400d}\' 0 > "$ROLLBOX_REWARD_DIR/reward.json"', Outcome.ERROR),
        ('printf "1%20000s" "" > "$ROLLBOX_REWARD_DIR/reward.txt"', Outcome.ERROR),
    ],
    ids=[
        "not a number",
        "not a number in json",
        "a link made by a program",
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


#: Ways a program that test.sh starts (here: the candidate's module, imported by check.py) could try to write the
#: reward: each leaves ``add`` wrong, so that test.sh itself writes 0.
FORGERIES = {
    "open the path, several ways": """
        import os
        directory = os.environ.get("ROLLBOX_REWARD_DIR", "/tmp/rollbox-logs/verifier")
        for name, data in (("reward.txt", "1"), ("reward.json", '{"reward": 1}')):
            path = os.path.join(directory, name)
            for opener in (lambda: open(path, "w"), lambda: os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT), "w")):
                try:
                    with opener() as f:
                        f.write(data)
                except OSError:
                    pass
    """,
    "replace the reward directory": """
        import os
        try:
            os.rename("/tmp/rollbox-logs", "/tmp/rollbox-logs.judge")
        except OSError:
            pass
        os.makedirs("/tmp/rollbox-logs/verifier", exist_ok=True)
        with open("/tmp/rollbox-logs/verifier/reward.txt", "w") as f:
            f.write("1")
        os.chmod("/tmp/rollbox-logs/verifier/reward.txt", 0o444)
    """,
    "the descriptors of every ancestor through /proc": """
        import os
        pid = os.getppid()
        while pid > 1:
            for what in ("fd", "map_files"):
                try:
                    entries = os.listdir(f"/proc/{pid}/{what}")
                except OSError:
                    entries = []
                for entry in entries:
                    try:
                        with open(f"/proc/{pid}/{what}/{entry}", "w") as f:
                            f.write("1\\n")
                    except OSError:
                        pass
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
    """,
    "every descriptor it inherited": """
        import os
        for fd in range(0, 1024):
            for data in (b"1\\n", b'{"file": "reward.txt", "hex": "31"}\\n'):
                try:
                    os.write(fd, data)
                except OSError:
                    pass
            try:
                with open(f"/proc/self/fd/{fd}", "w") as f:
                    f.write("1\\n")
            except OSError:
                pass
    """,
    "the memory of the bash that runs test.sh": """
        import os, re
        pid = os.getppid()
        with open(f"/proc/{pid}/stat") as f:
            bash = int(f.read().rsplit(")", 1)[1].split()[1])
        for target in (pid, bash):
            try:
                with open(f"/proc/{target}/mem", "r+b", 0) as mem:
                    mem.seek(0)
            except OSError:
                pass
    """,
    "a daemon that writes after the verifier does": """
        import os, time
        if os.fork() == 0:
            os.setsid()
            for _ in range(200):
                for fd_dir in ("/proc/self/fd",):
                    try:
                        with open("/tmp/rollbox-logs/verifier/reward.txt", "w") as f:
                            f.write("1")
                    except OSError:
                        pass
                time.sleep(0.01)
            os._exit(0)
    """,
    "rewrite test.sh and the checks": """
        import glob, os
        for path in glob.glob("/tmp/rollbox-tests/*"):
            try:
                os.chmod(path, 0o666)
                with open(path, "w") as f:
                    f.write("echo 1 > $ROLLBOX_REWARD_DIR/reward.txt\\n" if path.endswith(".sh") else "pass\\n")
            except OSError:
                pass
    """,
}


#: Writes a reward only when the checks pass: whatever a forger wrote before stands, unless it was never the reward.
ON_SUCCESS = 'cd /workspace\npython3 "$ROLLBOX_TESTS/check.py" && echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"\nexit 0\n'


@pytest.mark.parametrize("script", [TEST_SH, ON_SUCCESS], ids=["writes 0 or 1", "writes 1 on success"])
@pytest.mark.parametrize("name", FORGERIES)
def test_a_program_test_sh_starts_cannot_write_the_reward(tmp_path: Path, name: str, script: str) -> None:
    code = textwrap.dedent(FORGERIES[name]) + "\n\ndef add(a, b):\n    return 0\n"
    verdict = grade_code(make_task(tmp_path / "task", script), tmp_path / "graded", code)
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, (name, verdict)


def test_swapping_the_tests_directory_is_tampering(tmp_path: Path) -> None:
    # The candidate owns /tmp: it can rename the judge's read-only tests directory and put checks of its own where
    # test.sh will look for them (and put the original back before the end).
    swap = textwrap.dedent("""
        import os
        os.rename("/tmp/rollbox-tests", "/tmp/rollbox-tests.judge")
        os.makedirs("/tmp/rollbox-tests")
        with open("/tmp/rollbox-tests/check.py", "w") as f:
            f.write("pass\\n")

        def add(a, b):
            return 0
    """)
    script = 'cd /workspace\npython3 -c "import solution"\npython3 "$ROLLBOX_TESTS/check.py" && ' + (
        'echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"\n'
    )
    verdict = grade_code(make_task(tmp_path / "task", script), tmp_path / "graded", swap)
    assert verdict.status is VerdictStatus.TAMPERED and verdict.reward is not None and verdict.reward < 0, verdict


@pytest.mark.parametrize(
    "line",
    [
        'echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"',
        'printf "%s" 1.0 > "$ROLLBOX_REWARD_DIR/reward.txt"',
        'echo 0 > "$ROLLBOX_REWARD_DIR/reward.txt"; echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"',
        '( echo 1 > "$ROLLBOX_REWARD_DIR//reward.txt" )',
        'cd "$ROLLBOX_REWARD_DIR" && echo 1 > reward.txt',
        'echo 1 | cat > "$ROLLBOX_REWARD_DIR/reward.txt"',
        'python3 -c "print(1)" > "$ROLLBOX_REWARD_DIR/reward.txt"',
        'cat > "$ROLLBOX_REWARD_DIR/reward.json" <<EOF\n{"reward": 1}\nEOF',
        'echo 0 > "$ROLLBOX_REWARD_DIR/reward.json"; echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"',
        'mkdir -p "$ROLLBOX_REWARD_DIR"; echo 1 >> "$ROLLBOX_REWARD_DIR/reward.txt"',
    ],
)
def test_every_way_test_sh_itself_writes_its_reward_works(tmp_path: Path, line: str) -> None:
    task = make_task(tmp_path / "task", f'python3 "$ROLLBOX_TESTS/check.py" && {{\n{line}\n}}\n')
    assert grade_code(task, tmp_path / "right", CORRECT).status is VerdictStatus.PASSED
    assert grade_code(task, tmp_path / "wrong", "def add(a, b):\n    return 0\n").status is VerdictStatus.FAILED


def test_tests_too_big_for_the_disk_are_the_tasks_failure_never_the_candidates(tmp_path: Path) -> None:
    """The task's tests/ does not fit its disk limit: rollbox's infra_error (the task must change), not the
    candidate's tree refused as too large (the reference solution scored 0)."""
    root = tmp_path / "task"
    make_task(root)
    (root / "tests" / "data.bin").write_bytes(b"x" * 3_000_000)
    (root / "task.toml").write_text(f'[grading]\nrunner = "script"\n{LIMITS}disk = "1M"\n')
    verdict = grade_code(load_task(root), tmp_path, CORRECT)
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert "tests/ directory does not fit the grading sandbox" in (verdict.error or ""), verdict
