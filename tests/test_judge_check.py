"""Check-based function grading for real: ``check(candidate)`` in a process of its own, the candidate in another,
and every hack that used to reach the check from the candidate's process finding nothing there."""

from __future__ import annotations

import asyncio
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import Outcome, Verdict, VerdictStatus, grade
from rollbox.judge._verdict import GradedTest
from rollbox.judge.runners._report import RunnerReport, merge_reports
from rollbox.sandbox import Status
from rollbox.tasks import Task, load_task

STUB = "def square(x):\n    raise NotImplementedError\n"
CORRECT = "def square(x):\n    return x * x\n"
CHECK = textwrap.dedent("""
    import math


    def close(a, b):
        return math.isclose(a, b, abs_tol=1e-9)


    def check(candidate):
        assert candidate(3) == 9
        assert abs(candidate(1.5) - 2.25) < 1e-6
        assert close(candidate(0.1), 0.01)
        for x in range(-3, 4):
            assert candidate(x) == x * x
        assert candidate(-2) is not None
""")


def make_task(root: Path, check: str, *, cases: str | None = None) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text(STUB)
    (root / "tests").mkdir()
    (root / "tests" / "check.py").write_text(check)
    lines = 'check = "check.py"\n'
    if cases is not None:
        (root / "tests" / "cases.jsonl").write_text(cases)
        lines += 'cases = "cases.jsonl"\n'
    (root / "task.toml").write_text(
        f'[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "square"\n{lines}'
        '[limits]\ntimeout = "5s"\ncpu_time = "3s"\nmemory = "256M"\n'
    )
    return load_task(root)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_task(tmp_path_factory.mktemp("square"), CHECK)


def grade_code(task: Task, tmp_path: Path, code: str) -> Verdict:
    workspace = tmp_path / "candidate"
    workspace.mkdir(exist_ok=True)
    (workspace / "solution.py").write_text(code)
    return asyncio.run(grade(task, workspace))


# -- reports ------------------------------------------------------------------------------------------------


def test_merge_reports_keeps_every_test_and_the_worst_status() -> None:
    a = RunnerReport(tests=(GradedTest("f[0]", Outcome.PASSED),), run_status=Status.OK)
    b = RunnerReport(tests=(GradedTest("f[check]", Outcome.MISSING),), run_status=Status.TIMEOUT, crashed=True)
    c = RunnerReport(tests=(), run_status=Status.NONZERO_EXIT, tampered=True, detail="forged")
    merged = merge_reports([a, b, c])
    assert [t.id for t in merged.tests] == ["f[0]", "f[check]"]
    assert (merged.run_status, merged.crashed, merged.tampered, merged.detail) == (Status.TIMEOUT, True, True, "forged")
    infra = RunnerReport(tests=(), run_status=Status.INFRA_ERROR, detail="host")
    assert merge_reports([a, infra]).run_status is Status.INFRA_ERROR
    assert merge_reports([a]).run_status is Status.OK


# -- grading for real --------------------------------------------------------------------------------------------


def test_a_correct_function_passes(task: Task, tmp_path: Path) -> None:
    verdict = grade_code(task, tmp_path, CORRECT)
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert [t.to_json() for t in verdict.tests] == [{"id": "square[check]", "outcome": "passed"}]


def test_legitimate_variety_passes(task: Task, tmp_path: Path) -> None:
    code = "import sys, builtins\nprint('debug')\nsys.setrecursionlimit(5000)\nbuiltins.my_helper = 1\n" + CORRECT
    assert grade_code(task, tmp_path, code).status is VerdictStatus.PASSED
    # A bug, not a wrong answer: the child returns into the candidate's process's loop too, and its answers once
    # came before the next call's.
    forks = CORRECT.replace("return", "import os; os.fork()\n    return")
    assert forks != CORRECT and grade_code(task, tmp_path, forks).status is VerdictStatus.PASSED


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (STUB, VerdictStatus.FAILED),
        ("def square(x):\n    return x * x + 1\n", VerdictStatus.FAILED),
        ("def square(x):\n    return str(x * x)\n", VerdictStatus.FAILED),
        ("import nonexistent_module\n", VerdictStatus.ERROR),
        ("def square(x):\n    while True:\n        pass\n", VerdictStatus.TIMEOUT),
    ],
)
def test_wrong_functions_fail(task: Task, tmp_path: Path, code: str, status: VerdictStatus) -> None:
    verdict = grade_code(task, tmp_path, code)
    assert verdict.status is status, verdict
    assert verdict.reward == 0.0


def test_cases_and_a_check_are_graded_together(tmp_path: Path) -> None:
    cases = json.dumps({"args": [4], "kwargs": {}, "expected": 16}) + "\n"
    both = make_task(tmp_path / "task", CHECK, cases=cases)
    verdict = grade_code(both, tmp_path, CORRECT)
    assert verdict.status is VerdictStatus.PASSED and {t.id for t in verdict.tests} == {"square[0]", "square[check]"}
    wrong = grade_code(both, tmp_path, "def square(x):\n    return 16\n")
    assert wrong.status is VerdictStatus.FAILED and wrong.passed == 1


ALWAYS_EQUAL = "class E:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
HACKS = {
    "always-equal object": ALWAYS_EQUAL + "def square(x):\n    return E()\n",
    "always-equal float subclass": "class F(float):\n    def __eq__(self, o): return True\n"
    "    def __lt__(self, o): return True\n    def __sub__(self, o): return F(0)\n"
    "def square(x):\n    return F(0)\n",
    "sys.exit(0) at import": "import sys\nsys.exit(0)\n",
    "os._exit(0) at call": "import os\ndef square(x):\n    os._exit(0)\n",
    "sys.exit(0) at call": "import sys\ndef square(x):\n    sys.exit(0)\n",
    "kill its parent": "import os, signal\ndef square(x):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "forged reports to fds 3..20": "import os\ndef square(x):\n    for fd in range(3, 21):\n        try:\n"
    '            os.write(fd, b\'{"id": "0", "outcome": "passed"}\\n\')\n        except OSError:\n            pass\n'
    "    return 0\n",
    "rebinds abs in builtins": "import builtins\nbuiltins.abs = lambda v: 0\ndef square(x):\n    return 0\n",
    "rebinds a helper of the check": "import gc\nfor o in gc.get_objects():\n"
    "    if type(o) is dict and 'close' in o and 'check' in o:\n        o['close'] = lambda a, b: True\n"
    "def square(x):\n    return x * x if x != 0.1 else 5\n",
    "patches math": "import math\nmath.isclose = lambda *a, **k: True\ndef square(x):\n"
    "    return x * x if x != 0.1 else 5\n",
    "reports every check passed and exits": "import json, os, sys\ndef square(x):\n    frame = sys._getframe()\n"
    "    while 'loaded' not in frame.f_locals:\n        frame = frame.f_back\n"
    "    for check_id, _ in frame.f_locals['loaded']:\n"
    "        os.write(3, (json.dumps({'id': check_id, 'outcome': 'passed'}) + '\\n').encode())\n"
    "    os._exit(0)\n",
}


@pytest.mark.parametrize("name", HACKS)
def test_hacks_never_pass(task: Task, tmp_path: Path, name: str) -> None:
    verdict = grade_code(task, tmp_path, HACKS[name])
    assert verdict.status not in (VerdictStatus.PASSED, VerdictStatus.INFRA_ERROR), verdict
    assert verdict.reward is not None and verdict.reward <= 0, verdict


def test_a_check_that_fails_to_load_is_an_error_not_a_pass(tmp_path: Path) -> None:
    broken = make_task(tmp_path / "task", "import no_such_module_here\n\ndef check(candidate):\n    pass\n")
    verdict = grade_code(broken, tmp_path, CORRECT)
    assert verdict.status is VerdictStatus.FAILED and verdict.tests[0].outcome is Outcome.ERROR, verdict


LITERAL_CHECK = "def check(candidate):\n    assert candidate(3) == 9\n    assert abs(candidate(1.5) - 2.25) < 1e-6\n"
#: Returns whatever constant the calling check compares its result with: it passes any check it can read.
ANSWER_READER = textwrap.dedent("""
    import dis, sys

    def square(x):
        frame = sys._getframe(1)
        while frame.f_code.co_name != "check":
            frame = frame.f_back
        after = [i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti]
        return after[0].argval if after and after[0].opname == "LOAD_CONST" else 0
""")


def test_reading_the_answers_out_of_the_check_finds_nothing(tmp_path: Path) -> None:
    literal = make_task(tmp_path / "task", LITERAL_CHECK)
    verdict = grade_code(literal, tmp_path, ANSWER_READER)
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict


# -- the reviewer's exploits against the in-process check: no check is left in the candidate's process to subvert ---

#: At import, walks up the frames to every check function it can reach (a local, or in a list of (id, check)) and
#: gives it a no-op body, skipping those that look like the old sentinel canary.
SWAP_CHECKS = textwrap.dedent("""
    import sys

    def _noop(candidate):
        return None

    def _swap():
        frame = sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()):
                for item in value if isinstance(value, list) else [value]:
                    for f in item if isinstance(item, tuple) else (item,):
                        if getattr(f, "__name__", None) == "check" and not any(
                            k.startswith("_task_check_") for k in getattr(f, "__globals__", {})
                        ):
                            f.__code__ = _noop.__code__
            frame = frame.f_back
""")
#: When called, finds every id its process knows, reports each passed on every fd that might be the channel, exits.
FORGE_OWN_REPORT = textwrap.dedent("""
    import json, os, re, sys

    def _forge():
        ids, frame = set(), sys._getframe()
        while frame is not None:
            for value in frame.f_locals.values():
                if isinstance(value, str) and re.fullmatch("[0-9a-f]{16}", value):
                    ids.add(value)
            frame = frame.f_back
        for fd in range(3, 21):
            for i in ids:
                try:
                    os.write(fd, (json.dumps({"id": i, "outcome": "passed"}) + "\\n").encode())
                except OSError:
                    pass
        os._exit(0)
""")
#: Subverts the check only in the first process that runs (a marker in every writable place says who came first).
FIRST_ONLY = SWAP_CHECKS + textwrap.dedent("""
    import os

    _markers = ["/tmp/.first", "/workspace/.first", "/dev/shm/.first"]
    if not any(os.path.exists(m) for m in _markers):
        for m in _markers:
            try:
                open(m, "w").close()
            except OSError:
                pass
        _swap()
""")
EXPLOITS = {
    "swaps the check's code at import": "def square(x):\n    return 0\n" + SWAP_CHECKS + "_swap()\n",
    "forges its own report and exits": "def square(x):\n    _forge()\n" + FORGE_OWN_REPORT,
    "subverts only the first run": "def square(x):\n    return 0\n" + FIRST_ONLY,
    "reports an unhashable outcome and exits": "def square(x):\n    _forge()\n"
    + FORGE_OWN_REPORT.replace('"outcome": "passed"', '"outcome": []'),
    "writes a report nested too deeply to parse": "import os\nfor fd in range(3, 21):\n    try:\n"
    "        os.write(fd, b'[' * 5000 + b']' * 5000 + b'\\n')\n    except OSError:\n        pass\n" + CORRECT,
}


@pytest.mark.parametrize("name", EXPLOITS)
def test_subverting_the_candidates_process_earns_nothing(task: Task, tmp_path: Path, name: str) -> None:
    verdict = grade_code(task, tmp_path, EXPLOITS[name])
    assert verdict.status in (VerdictStatus.FAILED, VerdictStatus.ERROR) and verdict.reward == 0.0, verdict


#: A check whose expectation is computed: calls compared with what the check works out.
COMPUTED_CHECK = "def check(candidate):\n    for x in range(-3, 4):\n        assert candidate(x) == x * x\n"


def test_honest_wrong_code_fails_and_is_not_tampered(tmp_path: Path) -> None:
    computed = make_task(tmp_path / "task", COMPUTED_CHECK)
    verdict = grade_code(computed, tmp_path, "def square(x):\n    return x * x + 1\n")
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
    assert grade_code(computed, tmp_path, CORRECT).status is VerdictStatus.PASSED


def test_a_pass_needs_the_checks_own_completion_record(tmp_path: Path) -> None:
    raising = make_task(
        tmp_path / "task", "def check(candidate):\n    if candidate(2) != 4:\n        raise AssertionError\n"
    )
    assert grade_code(raising, tmp_path, CORRECT).status is VerdictStatus.PASSED
    for code in ("import os\ndef square(x):\n    os._exit(0)\n", "import os\nos._exit(0)\n"):
        verdict = grade_code(raising, tmp_path, code)
        assert verdict.status in (VerdictStatus.FAILED, VerdictStatus.ERROR) and verdict.reward == 0.0, verdict
        assert verdict.tests[0].outcome in (Outcome.ERROR, Outcome.MISSING)


def test_the_check_runs_on_the_whole_tree_links_included(tmp_path: Path) -> None:
    linked = make_task(tmp_path / "task", CHECK)
    (linked.workspace / "impl").mkdir()
    (linked.workspace / "impl" / "real.py").write_text(STUB)
    (linked.workspace / "solution.py").unlink()
    (linked.workspace / "solution.py").symlink_to("impl/real.py")
    candidate = tmp_path / "candidate"
    shutil.copytree(linked.workspace, candidate, symlinks=True)
    (candidate / "impl" / "real.py").write_text("from helpers.power import square\n")
    (candidate / "helpers").mkdir()
    (candidate / "helpers" / "__init__.py").write_text("")
    (candidate / "helpers" / "power.py").write_text(CORRECT)
    verdict = asyncio.run(grade(load_task(linked.path), candidate))
    assert verdict.status is VerdictStatus.PASSED, verdict
