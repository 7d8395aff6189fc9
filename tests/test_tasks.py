"""Loading native task directories: every runner, and an error that names file, key and fix for each mistake."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollbox.sandbox import Network
from rollbox.tasks import (
    Comparator,
    FunctionGrading,
    PytestGrading,
    RewardKind,
    ScriptGrading,
    StdioGrading,
    TaskFormatError,
    load_task,
)


def make_task(root: Path, toml: str, tests: dict[str, str] | None = None) -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("Do the thing.\n")
    for name, text in (tests or {}).items():
        (root / "tests" / name).write_text(text)
    return root


def test_function_task_with_limits(tmp_path: Path) -> None:
    root = make_task(
        tmp_path / "add",
        """
        id = "add-two"
        [grading]
        runner = "function"
        module = "solution.py"
        entry_point = "add"
        reward = "pass_rate"
        [limits]
        timeout = "3s"
        memory = "128M"
        network = "loopback"
        """,
        {"cases.jsonl": '{"args": [1, 2], "kwargs": {}, "expected": 3}\n'},
    )
    task = load_task(root)
    assert task.id == "add-two" and task.instruction == "Do the thing.\n"
    assert task.grading == FunctionGrading(module="solution.py", entry_point="add", cases="cases.jsonl")
    assert task.reward.kind is RewardKind.PASS_RATE and task.reward.tamper_penalty == -1.0
    assert (task.limits.timeout_s, task.limits.memory_bytes, task.network) == (3.0, 128 * 2**20, Network.LOOPBACK)
    assert task.workspace == root.resolve() / "workspace" and task.solution is None


def test_other_runners(tmp_path: Path) -> None:
    pytest_task = load_task(make_task(tmp_path / "p", '[grading]\nrunner = "pytest"\nfail_to_pass = ["t.py::a"]\n'))
    assert pytest_task.grading == PytestGrading(fail_to_pass=("t.py::a",), pass_to_pass=())
    assert pytest_task.id == "p"
    stdio = load_task(
        make_task(
            tmp_path / "s",
            '[grading]\nrunner = "stdio"\ncommand = "python3 main.py --fast"\ncomparator = "float"\n',
            {"cases.jsonl": "{}\n"},
        )
    )
    assert isinstance(stdio.grading, StdioGrading)
    assert stdio.grading.command == ("python3", "main.py", "--fast") and stdio.grading.comparator is Comparator.FLOAT
    script = load_task(make_task(tmp_path / "h", '[grading]\nrunner = "script"\n', {"test.sh": "exit 0\n"}))
    assert script.grading == ScriptGrading(script="test.sh")


@pytest.mark.parametrize(
    ("toml", "tests", "message"),
    [
        ("[grading\n", {}, "not valid TOML"),
        ("[limits]\ntimeout = 3\n", {}, "missing [grading] table"),
        ('[grading]\nrunner = "jest"\n', {}, "runner: expected one of pytest, function, stdio, script, got 'jest'"),
        (
            '[grading]\nrunner = "pytest"\nfail_to_pas = []\n',
            {},
            "unknown key 'fail_to_pas' in [grading]; did you mean 'fail_to_pass'?",
        ),
        ('[grading]\nrunner = "function"\nmodule = "s.py"\n', {}, "needs module and entry_point"),
        (
            '[grading]\nrunner = "function"\nmodule = "s.py"\nentry_point = "f"\n',
            {},
            "names tests/cases.jsonl, which does not exist",
        ),
        ('[grading]\nrunner = "pytest"\nreward = "vibes"\n', {}, "reward: 'vibes' is not a valid RewardKind"),
        ('[grading]\nrunner = "pytest"\ntamper_penalty = 2\n', {}, "tamper_penalty: expected a number <= 0, got 2.0"),
        ('[grading]\nrunner = "pytest"\n[limits]\nmemory = "lots"\n', {}, "[limits] memory: invalid size 'lots'"),
        ('[grading]\nrunner = "pytest"\n[limits]\npids = 0\n', {}, "Limits.pids must be positive"),
        ('[grading]\nrunner = "pytest"\n[limits]\ntimeot = "1s"\n', {}, "did you mean 'timeout'?"),
        ('[grading]\nrunner = "stdio"\ncomparator = "checker"\ncommand = "x"\n', {}, "needs checker"),
        ('[grading]\nrunner = "pytest"\nfail_to_pass = "t.py::a"\n', {}, "expected a list of test ids"),
    ],
)
def test_malformed_tasks_say_file_key_and_fix(tmp_path: Path, toml: str, tests: dict[str, str], message: str) -> None:
    root = make_task(tmp_path / "t", toml, tests)
    with pytest.raises(TaskFormatError) as caught:
        load_task(root)
    assert message in str(caught.value)
    assert str(root.resolve()) in str(caught.value)


def test_missing_pieces(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="not a directory"):
        load_task(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskFormatError, match=r"task.toml: missing"):
        load_task(tmp_path / "empty")
    root = make_task(tmp_path / "t", '[grading]\nrunner = "pytest"\n')
    (root / "tests").rmdir()
    with pytest.raises(TaskFormatError, match=r"missing tests/ directory"):
        load_task(root)
