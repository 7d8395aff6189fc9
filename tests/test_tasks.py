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


def make_task(root: Path, toml: str | bytes, tests: dict[str, str | bytes] | None = None) -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    write(root / "task.toml", toml)
    (root / "instruction.md").write_text("Do the thing.\n")
    for name, content in (tests or {}).items():
        write(root / "tests" / name, content)
    return root


def write(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)


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
    pytest_task = load_task(
        make_task(
            tmp_path / "p",
            '[grading]\nrunner = "pytest"\nfail_to_pass = ["t.py::a"]\n',
            {"unit/calc_test.py": "def test_a(): pass\n", "helper.py": ""},
        )
    )
    assert pytest_task.grading == PytestGrading(fail_to_pass=("t.py::a",), pass_to_pass=())
    assert pytest_task.id == "p" and pytest_task.test_modules == [pytest_task.tests / "unit" / "calc_test.py"]
    stdio = load_task(
        make_task(
            tmp_path / "s",
            '[grading]\nrunner = "stdio"\ncommand = "python3 main.py --fast"\ncomparator = "float"\n',
            CASES,
        )
    )
    assert isinstance(stdio.grading, StdioGrading)
    assert stdio.grading.command == ("python3", "main.py", "--fast") and stdio.grading.comparator is Comparator.FLOAT
    script = load_task(make_task(tmp_path / "h", '[grading]\nrunner = "script"\n', {"test.sh": "exit 0\n"}))
    assert script.grading == ScriptGrading(script="test.sh")


def test_files_the_judge_runs_but_never_reads_may_be_binary(tmp_path: Path) -> None:
    checker = load_task(
        make_task(
            tmp_path / "s",
            '[grading]\nrunner = "stdio"\ncommand = "./a.out"\ncomparator = "checker"\nchecker = "bin/check"\n',
            {**CASES, "bin/check": b"\x7fELF\xff"},
        )
    )
    assert isinstance(checker.grading, StdioGrading) and checker.grading.checker == "bin/check"
    script = make_task(tmp_path / "h", '[grading]\nrunner = "script"\nscript = "t.sh"\n', {"t.sh": b"exit 0 # \xff\n"})
    assert load_task(script).grading == ScriptGrading(script="t.sh")


FUNCTION = '[grading]\nrunner = "function"\nmodule = "s.py"\nentry_point = "f"\n'
STDIO = '[grading]\nrunner = "stdio"\ncommand = "python3 main.py"\n'
CASES: dict[str, str | bytes] = {"cases.jsonl": '{"input": "", "output": ""}\n'}
REPO = '[grading]\nrunner = "pytest"\ntests_in_workspace = true\nfail_to_pass = ["t.py::a"]\n'


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
        (
            '[grading]\nrunner = "pytest"\ntamper_penalty = 2\n',
            {},
            "tamper_penalty: expected a finite number <= 0, got 2",
        ),
        ('[grading]\nrunner = "pytest"\ntamper_penalty = nan\n', {}, "tamper_penalty: expected a finite number <= 0"),
        ('[grading]\nrunner = "pytest"\ntamper_penalty = -inf\n', {}, "tamper_penalty: expected a finite number <= 0"),
        (f'[grading]\nrunner = "pytest"\ntamper_penalty = -{"9" * 400}\n', {}, "tamper_penalty: expected a finite"),
        (STDIO + "float_tolerance = inf\n", CASES, "float_tolerance: expected a finite number from 0 to 0.5, got inf"),
        (
            STDIO + "float_tolerance = -0.1\n",
            CASES,
            "float_tolerance: expected a finite number from 0 to 0.5, got -0.1",
        ),
        (STDIO + "float_tolerance = 1\n", CASES, "float_tolerance: expected a finite number from 0 to 0.5, got 1"),
        ('[grading]\nrunner = "pytest"\nf2p_weight = nan\n', {}, "f2p_weight: expected a finite number from 0 to 1"),
        (b'id = "caf\xe9"\n[grading]\nrunner = "pytest"\n', {}, "task.toml: cannot read it as UTF-8 text"),
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", {}, "task.toml: not valid TOML: nested too deeply"),
        (
            '[grading]\nrunner = ["script"]\n',
            {},
            "runner: expected one of pytest, function, stdio, script, got ['script']",
        ),
        ('[grading]\nrunner = "stdio"\ncommand = "python3 \'a"\n', CASES, 'command: cannot split "python3 \'a"'),
        (
            '[grading]\nrunner = "pytest"\n[limits]\npids = inf\n',
            {},
            "Limits.pids must be a finite number, got inf",
        ),
        (
            '[grading]\nrunner = "pytest"\n[limits]\npids = 2.9\n',
            {},
            "Limits.pids must be a whole number, got 2.9",
        ),
        ('[grading]\nrunner = "pytest"\n[limits]\nopen_files = true\n', {}, "open_files: expected a whole number"),
        ('[grading]\nrunner = "pytest"\n[limits]\nmemory = 1.5\n', {}, "[limits] memory: invalid size 1.5"),
        ('[grading]\nrunner = "pytest"\n[limits]\ntimeout = true\n', {}, "[limits] timeout: invalid duration True"),
        ('[grading]\nrunner = "pytest"\n[limits]\ncpu_time = inf\n', {}, "Limits.cpu_time_s must be a finite"),
        (f'[grading]\nrunner = "pytest"\n[limits]\nmemory = "{"9" * 400}"\n', {}, "invalid size '999999999"),
        (FUNCTION + 'cases = ""\n', {}, "runner 'function' needs cases (a file in tests/), check, or both"),
        (STDIO + 'cases = ""\n', {}, "[grading] cases: expected a file name in tests/"),
        (FUNCTION + 'cases = "/etc/passwd"\n', {}, "cases: expected a path relative to tests/ without '..', such as"),
        (FUNCTION + 'check = "../workspace/check.py"\n', {}, "check: expected a path relative to tests/"),
        (FUNCTION + 'check = "sub/../../task.toml"\n', {}, "check: expected a path relative to tests/"),
        (STDIO + 'comparator = "checker"\nchecker = "/bin/true"\n', CASES, "checker: expected a path relative"),
        ('[grading]\nrunner = "script"\nscript = "../workspace/t.sh"\n', {}, "script: expected a path relative"),
        ('[grading]\nrunner = "script"\nscript = "."\n', {}, "script names tests/., which is not a regular file"),
        (FUNCTION, {"cases.jsonl": b'{"args": ["\xff"]}\n'}, "cases.jsonl: cannot read the cases"),
        (FUNCTION, {"cases.jsonl": '{"args": [1]}\n'}, "cases.jsonl: line 1: expected an object with args (a list)"),
        (FUNCTION, {"cases.jsonl": "\n"}, "cases.jsonl: no cases: a function task needs at least one"),
        (STDIO, {"cases.jsonl": '{"input": 1, "output": ""}\n'}, "line 1: expected an object with input and output"),
        (FUNCTION + 'check = "c.py"\n', {"c.py": b"# \xff\n"}, "c.py: cannot read it as UTF-8 text"),
        (STDIO, {"cases.jsonl": b"\xfe\xff"}, "cases.jsonl: cannot read the cases"),
        ('[grading]\nrunner = "pytest"\n', {"test_a.py": b"# \xff\n"}, "test_a.py: cannot read it as UTF-8 text"),
        ('[grading]\nrunner = "pytest"\n', {"helper.py": "", "testing.py": ""}, "tests/ has no test module"),
        ('[grading]\nrunner = "pytest"\n[limits]\nmemory = "lots"\n', {}, "[limits] memory: invalid size 'lots'"),
        ('[grading]\nrunner = "pytest"\n[limits]\npids = 0\n', {}, "Limits.pids must be positive"),
        ('[grading]\nrunner = "pytest"\n[limits]\ntimeot = "1s"\n', {}, "did you mean 'timeout'?"),
        ('[grading]\nrunner = "stdio"\ncomparator = "checker"\ncommand = "x"\n', {}, "needs checker"),
        ('[grading]\nrunner = "pytest"\nfail_to_pass = "t.py::a"\n', {}, "expected a list of test ids"),
        (REPO + 'removed_by_tests = "old.py"\n', {}, "removed_by_tests: expected a list of workspace paths"),
        (REPO + 'removed_by_tests = ["../task.toml"]\n', {}, "removed_by_tests: expected paths relative to workspace/"),
        (REPO + 'removed_by_tests = ["/etc/passwd"]\n', {}, "removed_by_tests: expected paths relative to workspace/"),
        (REPO + 'removed_by_tests = ["a/./b.py"]\n', {}, "removed_by_tests: expected paths relative to workspace/"),
        (REPO + 'removed_by_tests = ["old.py"]\n', {}, "removed_by_tests names workspace/old.py, which does not exist"),
        (
            '[grading]\nrunner = "pytest"\nremoved_by_tests = ["old.py"]\n',
            {"test_a.py": ""},
            "removed_by_tests: only repository tests (tests_in_workspace = true)",
        ),
    ],
)
def test_malformed_tasks_say_file_key_and_fix(
    tmp_path: Path, toml: str | bytes, tests: dict[str, str | bytes], message: str
) -> None:
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


def test_unreadable_task_files(tmp_path: Path) -> None:
    root = make_task(tmp_path / "t", '[grading]\nrunner = "pytest"\n', {"test_a.py": ""})
    (root / "instruction.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(TaskFormatError, match=r"instruction.md: cannot read it as UTF-8 text"):
        load_task(root)
    (root / "task.toml").unlink()
    (root / "task.toml").mkdir()
    with pytest.raises(TaskFormatError, match=r"task.toml: not a regular file"):
        load_task(root)


def test_tests_may_be_a_link_and_an_empty_name_is_none(tmp_path: Path) -> None:
    shared = make_task(tmp_path / "shared", FUNCTION, {"cases.jsonl": '{"args": [], "kwargs": {}, "expected": 1}\n'})
    root = make_task(tmp_path / "t", FUNCTION + 'cases = ""\ncheck = "c.py"\n', {})
    (root / "tests").rmdir()
    (root / "tests").symlink_to(shared / "tests")  # tests shared between task directories
    (shared / "tests" / "c.py").write_text("def check(candidate):\n    assert candidate() == 1\n")
    assert load_task(root).grading == FunctionGrading(module="s.py", entry_point="f", cases="", check="c.py")


def test_grading_files_must_resolve_inside_tests(tmp_path: Path) -> None:
    case = '{"args": [], "kwargs": {}, "expected": 1}\n'
    root = make_task(tmp_path / "t", FUNCTION + 'cases = "inner.jsonl"\n', {"real.jsonl": case})
    (root / "workspace" / "cases.jsonl").write_text(case)
    (root / "tests" / "inner.jsonl").symlink_to("real.jsonl")
    assert isinstance(load_task(root).grading, FunctionGrading)  # a link that stays in tests/ is fine
    (root / "tests" / "inner.jsonl").unlink()
    (root / "tests" / "inner.jsonl").symlink_to("../workspace/cases.jsonl")
    with pytest.raises(TaskFormatError, match=r"cases: tests/inner.jsonl leads to .*/workspace/cases.jsonl, outside"):
        load_task(root)
    module = make_task(tmp_path / "p", '[grading]\nrunner = "pytest"\n')
    (module / "tests" / "test_host.py").symlink_to("/etc/hostname")
    with pytest.raises(TaskFormatError, match=r"runner 'pytest': tests/test_host.py leads to /etc/hostname, outside"):
        load_task(module)
