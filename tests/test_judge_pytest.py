"""Grading pytest tasks for real: hidden tests, a judge-owned configuration, canaries, and the known hacks."""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import Outcome, Verdict, VerdictStatus, grade
from rollbox.tasks import Task, load_task

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef div(a, b):\n    return a * b\n"
CORRECT = "def add(a, b):\n    return a + b\n\n\ndef div(a, b):\n    return a // b\n"
HIDDEN = textwrap.dedent("""
    import pytest
    from calc import add, div


    def test_add():
        assert add(2, 3) == 5


    def test_add_negative():
        assert add(-1, -1) == -2


    @pytest.mark.parametrize("a", [6, 9])
    def test_div(a):
        assert div(a, 3) == a // 3


    class TestMore:
        def test_zero(self):
            assert add(0, 0) == 0
""")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("calc")
    (root / "workspace" / "tests").mkdir(parents=True)
    (root / "workspace" / "calc.py").write_text(BUGGY)
    (root / "workspace" / "tests" / "test_calc.py").write_text(
        "from calc import add\n\ndef test_visible():\n    assert add(1, 1) == 2\n"
    )
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(HIDDEN)
    (root / "tests" / "test_more.py").write_text(
        "from calc import add\n\n\ndef test_big():\n    assert add(10**6, 1) == 10**6 + 1\n"
    )
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[limits]\ntimeout = "20s"\ncpu_time = "15s"\n')
    return load_task(root)


def grade_files(task: Task, tmp_path: Path, files: dict[str, str | None]) -> Verdict:
    """Grade the pristine workspace with ``files`` changed (None deletes)."""
    workspace = tmp_path / "candidate"
    for source in task.workspace.rglob("*"):
        target = workspace / source.relative_to(task.workspace)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    for name, text in files.items():
        path = workspace / name
        if text is None:
            path.unlink()
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return asyncio.run(grade(task, workspace))


def test_correct_solution_passes_every_hidden_test(task: Task, tmp_path: Path) -> None:
    verdict = grade_files(task, tmp_path, {"calc.py": CORRECT})
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert [t.id for t in verdict.tests] == [
        "tests/test_calc.py::test_add",
        "tests/test_calc.py::test_add_negative",
        "tests/test_calc.py::test_div[6]",
        "tests/test_calc.py::test_div[9]",
        "tests/test_calc.py::TestMore::test_zero",
        "tests/test_more.py::test_big",
    ]
    json.dumps(verdict.to_json())


def test_the_buggy_workspace_fails(task: Task, tmp_path: Path) -> None:
    verdict = grade_files(task, tmp_path, {})
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0
    assert {t.outcome for t in verdict.tests} == {Outcome.FAILED, Outcome.PASSED}  # add(0, 0) == 0 holds


LEGITIMATE: dict[str, dict[str, str | None]] = {
    "prints": {"calc.py": CORRECT.replace("return a + b", "print('adding', a, b)\n    return a + b")},
    "helper module": {"calc.py": "from _impl import add, div\n", "_impl.py": CORRECT},
    "threads and subprocesses": {
        "calc.py": CORRECT + "import subprocess, threading\nthreading.Thread(target=print).start()\n"
        "subprocess.run(['true'], check=True)\n"
    },
    "its own failing test file": {"calc.py": CORRECT, "test_mine.py": "def test_x():\n    assert False\n"},
    # A bug, not tampering: the child returns into pytest too (its reports once broke the parent's order).
    "a fork that returns twice": {"calc.py": CORRECT.replace("return a + b", "import os; os.fork()\n    return a + b")},
    "editing the visible tests": {"calc.py": CORRECT, "tests/test_calc.py": "def test_visible():\n    assert True\n"},
}


@pytest.mark.parametrize("name", LEGITIMATE)
def test_legitimate_solutions_pass(task: Task, tmp_path: Path, name: str) -> None:
    verdict = grade_files(task, tmp_path, LEGITIMATE[name])
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    if name == "its own failing test file":
        assert [f["code"] for f in verdict.flags if f["path"] == "test_mine.py"] == ["agent_test_dropped"]


REPORT_REWRITE = textwrap.dedent("""
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        report.outcome = "passed"
""")
ALWAYS_EQUAL = (
    "class E:\n    def __eq__(self, o):\n        return True\n\n\ndef add(a, b):\n    return E()\n\n\ndiv = add\n"
)
#: Writes a line to every fd that might be the plugin's result channel (``str.format`` it with the line's bytes).
TO_CHANNEL = (
    "import os\nfor fd in range(3, 20):\n    try:\n        os.write(fd, {!r} + b'\\n')\n"
    "    except OSError:\n        pass\n"
)
HACKS: dict[str, dict[str, str | None]] = {
    "always-equal object": {"calc.py": ALWAYS_EQUAL},
    "always-equal int subclass": {
        "calc.py": "class E(int):\n    def __eq__(self, o):\n        return True\n\n\n"
        "def add(a, b):\n    return E(0)\n\n\ndiv = add\n"
    },
    "sys.exit(0) at import": {"calc.py": "import sys\nsys.exit(0)\n"},
    "os._exit(0) at import": {"calc.py": "import os\nos._exit(0)\n"},
    "pytest.exit at import": {"calc.py": "import pytest\npytest.exit('done', returncode=0)\n"},
    "pytest.exit at call": {
        "calc.py": "import pytest\n\ndef add(a, b):\n    pytest.exit('done', returncode=0)\n\ndiv = add\n"
    },
    "sys.exit(0) at call": {"calc.py": "import sys\n\ndef add(a, b):\n    sys.exit(0)\n\ndiv = add\n"},
    "kill itself": {
        "calc.py": "import os, signal\n\ndef add(a, b):\n    os.kill(os.getpid(), signal.SIGKILL)\n\ndiv = add\n"
    },
    "kill its parent": {
        "calc.py": "import os, signal\n\ndef add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n\ndiv = add\n"
    },
    "conftest report rewriting at the root": {"conftest.py": REPORT_REWRITE},
    "conftest report rewriting in tests/": {"tests/conftest.py": REPORT_REWRITE},
    "xfail marking hook": {
        "conftest.py": "def pytest_collection_modifyitems(items):\n    import pytest\n"
        "    for i in items:\n        i.add_marker(pytest.mark.xfail)\n"
    },
    "pytest.ini deselection": {"pytest.ini": "[pytest]\naddopts = -k nothing_matches\n"},
    "pyproject deselection": {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-k nothing_matches'\n"},
    "setup.cfg deselection": {"setup.cfg": "[tool:pytest]\naddopts = -k nothing_matches\n"},
    "tox.ini deselection": {"tox.ini": "[pytest]\naddopts = -k nothing_matches\n"},
    "pytest.py shadow module": {"pytest.py": "def main(*a, **k):\n    return 0\n"},
    "sitecustomize": {"sitecustomize.py": "import sys\nsys.exit(0)\n"},
    ".pth injection": {"evil.pth": "import os; os._exit(0)\n"},
    # A div wrong for test_calc.py only: a judge that honoured the deletion would run test_more.py alone, and pass.
    "deleting the visible tests": {"tests/test_calc.py": None, "calc.py": CORRECT.replace("a // b", "a * b")},
    "report rewriting from the imported module": {
        "calc.py": BUGGY + "import _pytest.reports\n_init = _pytest.reports.TestReport.__init__\n\n\n"
        "def _passed(self, *a, **k):\n    _init(self, *a, **k)\n    self.outcome = 'passed'\n\n\n"
        "_pytest.reports.TestReport.__init__ = _passed\n"
    },
    "atexit forging reports": {
        "calc.py": BUGGY + "import atexit, json, os\n\n\ndef _forge():\n"
        "    for name in ('test_add', 'test_add_negative', 'test_div[6]', 'test_div[9]', 'TestMore::test_zero'):\n"
        "        line = json.dumps({'id': 'tests/test_calc.py::' + name, 'outcome': 'passed'}) + '\\n'\n"
        "        for fd in range(1, 20):\n            try:\n                os.write(fd, line.encode())\n"
        "            except OSError:\n                pass\n\n\natexit.register(_forge)\n"
    },
    "rewriting the hidden tests still to be collected": {
        # Right for small numbers only: test_more.py, collected after test_calc.py imports this, would catch it.
        "calc.py": CORRECT.replace("return a + b", "return a + b if a < 1000 else 0")
        + "import os\nfor root, _, names in os.walk('/tmp'):\n    for name in names:\n"
        "        try:\n            if name.startswith('test_'):\n"
        "                os.chmod(os.path.join(root, name), 0o666)\n"
        "                open(os.path.join(root, name), 'w').write('def test_big():\\n    pass\\n')\n"
        "        except OSError:\n            pass\n"
    },
    "printing fake results": {
        "calc.py": BUGGY + 'print(\'5 passed, 0 failed\')\nprint(\'{"id": "x", "outcome": "passed"}\')\n'
    },
    # Right code, but a report on the plugin's channel that no parser takes, or whose outcome cannot be looked up.
    "writing a report nested too deeply to parse": {"calc.py": CORRECT + TO_CHANNEL.format(b"[" * 5000 + b"]" * 5000)},
    "writing a report with an unhashable outcome": {
        "calc.py": CORRECT + TO_CHANNEL.format(b'{"id": "tests/test_calc.py::test_add", "outcome": []}')
    },
}


@pytest.mark.parametrize("name", HACKS)
def test_hacks_never_pass(task: Task, tmp_path: Path, name: str) -> None:
    verdict = grade_files(task, tmp_path, HACKS[name])
    assert verdict.status not in (VerdictStatus.PASSED, VerdictStatus.INFRA_ERROR), verdict
    assert verdict.reward is not None and verdict.reward <= 0, verdict


@pytest.mark.parametrize("name", ["always-equal object", "report rewriting from the imported module"])
def test_subverted_reporting_is_tampered(task: Task, tmp_path: Path, name: str) -> None:
    verdict = grade_files(task, tmp_path, HACKS[name])
    assert verdict.status is VerdictStatus.TAMPERED and verdict.reward == -1.0, verdict
    assert any(f["code"] == "tampered" and "canary" in f["detail"] for f in verdict.flags)


def test_protected_files_are_flagged(task: Task, tmp_path: Path) -> None:
    verdict = grade_files(task, tmp_path, {**HACKS["conftest report rewriting at the root"], "calc.py": CORRECT})
    assert verdict.status is VerdictStatus.PASSED
    assert any(f["code"] == "protected_path_dropped" and f["path"] == "conftest.py" for f in verdict.flags)


def test_a_pyproject_nested_too_deeply_to_parse_is_dropped_not_an_infra_error(task: Task, tmp_path: Path) -> None:
    deep = "x = " + "[" * 5000 + "]" * 5000 + "\n"
    verdict = grade_files(task, tmp_path, {"calc.py": CORRECT, "pyproject.toml": deep})
    assert verdict.status is VerdictStatus.PASSED, verdict
    assert [(f["code"], f["path"]) for f in verdict.flags] == [("protected_path_dropped", "pyproject.toml")]


#: Hidden tests in the styles a canary must also be made from: the value under test on the right of ``==``,
#: unittest's assertions, and tests that live only in a class (with a setup method the canary needs too).
STYLES = {
    "expected value first": "from calc import add\n\n\ndef test_add():\n    assert 5 == add(2, 3)\n\n\n"
    "def test_add_negative():\n    assert -2 == add(-1, -1)\n",
    "unittest": "import unittest\n\nfrom calc import add\n\n\nclass AddTests(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_add_negative(self):\n        self.assertEqual(-2, add(-1, -1))\n",
    # The test's own data may equal anything (mock.ANY): only the side the candidate computes is checked.
    "a wildcard expected value": "from unittest.mock import ANY\n\nfrom calc import add\n\n\n"
    "def test_add():\n    assert add(2, 3) == 5\n\n\ndef test_returns_something():\n    assert add(1, 2) == ANY\n",
    # pytest 9 reports a unittest test whose failures are all in subtests as passed (each subtest as failed).
    "unittest subtests": "import unittest\n\nfrom calc import add\n\n\nclass AddTests(unittest.TestCase):\n"
    "    def test_add(self):\n        for a, b in ((2, 3), (-1, -1)):\n            with self.subTest(a=a, b=b):\n"
    "                self.assertEqual(add(a, b), a + b)\n\n"
    "    def test_add_zero(self):\n        with self.subTest():\n            self.assertEqual(add(0, 4), 4)\n",
    "test class": "from calc import add\n\n\nclass TestAdd:\n"
    "    def setup_method(self):\n        self.pair = (2, 3)\n\n"
    "    def test_add(self):\n        assert add(*self.pair) == 5\n",
}


@pytest.fixture(scope="module", params=STYLES)
def styled(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("styled")
    (root / "workspace").mkdir()
    (root / "workspace" / "calc.py").write_text(BUGGY)
    (root / "tests").mkdir()
    (root / "tests" / "test_add.py").write_text(STYLES[request.param])
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[limits]\ntimeout = "20s"\ncpu_time = "15s"\n')
    return load_task(root)


def test_canaries_of_every_style_of_test_fail_on_honest_code_and_catch_an_always_equal_value(
    styled: Task, tmp_path: Path
) -> None:
    honest = grade_files(styled, tmp_path / "honest", {"calc.py": CORRECT})
    assert honest.status is VerdictStatus.PASSED and honest.reward == 1.0, honest
    hacked = grade_files(styled, tmp_path / "hacked", {"calc.py": ALWAYS_EQUAL})
    assert hacked.status is VerdictStatus.TAMPERED and hacked.reward == -1.0, hacked


def test_the_buggy_workspace_fails_every_test_in_every_style(styled: Task, tmp_path: Path) -> None:
    verdict = grade_files(styled, tmp_path, {})
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict


def test_a_parametrized_case_the_candidate_drops_from_collection_is_missing(task: Task, tmp_path: Path) -> None:
    # Wrong only for 9, and it removes 9 from the parameters as pytest collects them, inside its own process: the
    # judge counts the parameters the test module lists, so the dropped one is missing, not forgotten.
    wrong_for_nine = CORRECT.replace("return a // b", "return 0 if a == 9 else a // b")
    dropping = wrong_for_nine + textwrap.dedent("""
        import _pytest.python
        _parametrize = _pytest.python.Metafunc.parametrize
        def parametrize(self, names, values, *args, **kwargs):
            return _parametrize(self, names, [v for v in values if v != 9], *args, **kwargs)
        _pytest.python.Metafunc.parametrize = parametrize
    """)
    verdict = grade_files(task, tmp_path, {"calc.py": dropping})
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
    missing = [t.id for t in verdict.tests if t.outcome is Outcome.MISSING]
    assert missing == ["tests/test_calc.py::test_div[2 of 2]"], verdict.tests


def test_the_cases_a_module_lists_are_counted_where_the_lists_are_literal() -> None:
    from rollbox.judge.runners._pytest import _expected, _static_ids

    source = textwrap.dedent("""
        import pytest
        VALUES = [1, 2, 3]

        @pytest.mark.parametrize("a", [1, 2])
        @pytest.mark.parametrize("b", argvalues=(3, 4, 5))
        def test_grid(a, b): ...

        @pytest.mark.parametrize("v", VALUES)
        def test_computed(v): ...

        @pytest.mark.parametrize("w", [*VALUES, 4])
        def test_starred(w): ...

        class TestPlain:
            def test_one(self): ...
    """)
    static = _static_ids("t.py", source)
    assert static == {
        "t.py::test_grid": 6,
        "t.py::test_computed": 1,
        "t.py::test_starred": 1,
        "t.py::TestPlain::test_one": 1,
    }
    collected = ["t.py::test_grid[1-3]", "t.py::test_grid[2-3]", "t.py::test_computed[1]"]
    assert _expected(collected, static) == [
        *collected,
        *(f"t.py::test_grid[{k} of 6]" for k in range(3, 7)),
        "t.py::test_starred",
        "t.py::TestPlain::test_one",
    ]


def test_a_canary_class_adds_no_test_of_its_own_to_the_verdict(tmp_path: Path) -> None:
    # The canary copies its class with the class's bases: what the class inherits runs under the canary's random
    # name too, and is the judge's, never one of the task's tests.
    root = tmp_path / "task"
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "calc.py").write_text(BUGGY)
    (root / "tests").mkdir()
    (root / "tests" / "test_add.py").write_text(
        "from calc import add\n\n\nclass Base:\n    def test_inherited(self):\n        assert add(1, 1) == 2\n\n\n"
        "class TestAdd(Base):\n    def test_add(self):\n        assert add(2, 3) == 5\n"
    )
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[limits]\ntimeout = "20s"\ncpu_time = "15s"\n')
    verdict = grade_files(load_task(root), tmp_path, {"calc.py": CORRECT})
    assert verdict.status is VerdictStatus.PASSED, verdict
    assert [t.id for t in verdict.tests] == [  # in pytest's order: what a class inherits first
        "tests/test_add.py::TestAdd::test_inherited",
        "tests/test_add.py::TestAdd::test_add",
    ]
