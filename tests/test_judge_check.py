"""Check-based function grading for real: ``check(candidate)`` in the candidate's process, canaries, hacks caught."""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shutil
import textwrap
from decimal import Decimal
from pathlib import Path

import pytest

from rollbox.judge import Outcome, Verdict, VerdictStatus, grade
from rollbox.judge._verdict import GradedTest
from rollbox.judge.runners._check_variants import check_variants
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


# -- canaries, derived and run on the host (they are plain Python) ------------------------------------------------


def run_variant(source: str, function: object) -> str:
    namespace: dict[str, object] = {}
    exec(compile(source, "<check>", "exec"), namespace)
    try:
        namespace["check"](function)  # type: ignore[operator]
    except AssertionError:
        return "failed"
    except Exception:
        return "error"
    return "passed"


def test_variants_are_one_real_check_and_canaries_with_fresh_ids_all_formatted_alike() -> None:
    variants = check_variants(CHECK)
    assert sum(not v.canary for v in variants) == 1 and 2 <= len(variants) <= 3
    assert len({v.id for v in variants}) == len(variants)
    assert all(v.source == ast.unparse(ast.parse(v.source)) for v in variants)
    real = next(v for v in variants if not v.canary)
    changed = [{line for line in v.source.splitlines()} - set(real.source.splitlines()) for v in variants if v.canary]
    assert all(len(lines) == 1 for lines in changed), changed  # one expectation changed, nothing else
    assert check_variants(CHECK)[0].id not in {v.id for v in variants}


@pytest.mark.parametrize("attempt", range(20))
def test_honest_code_passes_the_real_check_and_fails_every_canary(attempt: int) -> None:
    for variant in check_variants(CHECK):
        outcome = run_variant(variant.source, lambda x: x * x)
        assert outcome == ("failed" if variant.canary else "passed"), variant.source


@pytest.mark.parametrize(
    ("check", "canary_line"),
    [
        ("def check(c):\n    assert c(1) is True\n", "assert c(1) is False"),
        ("def check(c):\n    assert not c(0)\n", "assert c(0)"),
        ("def check(c):\n    assert c(2) != 5\n", "assert c(2) == 5"),
        ("def check(c):\n    for i in range(3):\n        assert c(i) == i\n", "assert c(i) != i"),
    ],
)
def test_without_a_literal_the_one_opposite_assertion_is_the_canary(check: str, canary_line: str) -> None:
    canaries = [v.source for v in check_variants(check) if v.canary]
    assert len(canaries) == 1 and canary_line in canaries[0]


@pytest.mark.parametrize(
    "check",
    [
        "def check(c):\n    for i in range(0):\n        assert c(i) == i\n",
        "def check(c):\n    if c(1):\n        assert c(1) == 1\n",
        "def check(c):\n    return\n    assert c(1) == 1\n",
        "def check(c):\n    for i in range(9):\n        if i > 3:\n            break\n        assert c(i) == i\n",
        "def check(c):\n    assert True\n",
        "def check(c):\n    x = 4\n    assert x == 4\n",
    ],
)
def test_without_an_assertion_that_surely_runs_and_uses_the_candidate_there_is_no_canary(check: str) -> None:
    (variant,) = check_variants(check)  # never a recognisable stand-in (the old sentinel wrapper)
    assert not variant.canary and variant.source == ast.unparse(ast.parse(check))


def significant_digits(value: object) -> int:
    return len(Decimal(repr(value)).normalize().as_tuple().digits)


@pytest.mark.parametrize(
    ("expected", "tolerance"),
    [
        ("0.33", None),
        ("123.456", None),
        ("2.25", None),
        ("1e-06", None),
        ("900", None),
        ("-7", None),
        ("31415", None),
        ("'Hello world'", None),
        ("[1.5, 'ab', 7]", None),
        ("(2, 6, 3)", None),
        ("0.456", "1e-06"),
        ("2.0", "0.5"),
        ("7", "1e-09"),
    ],
)
def test_mutated_literals_keep_the_originals_type_and_precision(expected: str, tolerance: str | None) -> None:
    test = f"abs(candidate(1) - {expected}) < {tolerance}" if tolerance else f"candidate(1) == {expected}"
    original = ast.literal_eval(expected)
    seen = set()
    for _ in range(30):
        canaries = [v.source for v in check_variants(f"def check(candidate):\n    assert {test}\n") if v.canary]
        assert 1 <= len(canaries) <= 2
        compare = ast.parse(canaries[0]).body[0].body[0].test  # type: ignore[attr-defined]
        value = ast.literal_eval(compare.left.args[0].right if tolerance else compare.comparators[0])
        assert type(value) is type(original) and value != original, canaries[0]
        if isinstance(original, int | float):
            assert significant_digits(value) == significant_digits(original), canaries[0]
            assert (value < 0) == (original < 0), canaries[0]
            if tolerance:
                assert abs(value - original) > 2 * float(tolerance), canaries[0]
        elif isinstance(original, str):
            assert len(value) == len(original) and sum(a != b for a, b in zip(value, original, strict=True)) == 1
        else:
            assert len(value) == len(original), canaries[0]
        seen.add(repr(value))
    assert len(seen) > 1  # drawn at random, not a fixed stand-in


def test_a_float_target_is_not_rounded_to_three_decimals() -> None:
    check = "def check(candidate):\n    assert abs(candidate(1) - 0.123456) < 1e-09\n"
    canaries = [v.source for _ in range(20) for v in check_variants(check) if v.canary]
    targets = [re.search(r"- (\S+)\) <", c).group(1) for c in canaries]  # type: ignore[union-attr]
    assert all(len(t.split(".")[1]) == 6 for t in targets), targets


def test_an_assertion_on_a_value_derived_from_the_candidate_is_a_spot() -> None:
    check = (
        "import math\n\ndef poly(x):\n    return 1 - 2 * x\n\ndef check(candidate):\n    for _ in range(3):\n"
        "        root = candidate([1, -2])\n        assert math.fabs(poly(root)) < 0.0001\n"
    )
    canaries = [v.source for v in check_variants(check) if v.canary]
    assert len(canaries) == 1 and "assert math.fabs(poly(root)) >= 0.0001" in canaries[0]


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


def test_reading_the_answers_out_of_the_check_is_caught_by_the_canaries(tmp_path: Path) -> None:
    literal = make_task(tmp_path / "task", LITERAL_CHECK)
    for _ in range(3):
        verdict = grade_code(literal, tmp_path, ANSWER_READER)
        assert verdict.status is VerdictStatus.TAMPERED and verdict.reward == -1.0, verdict


# -- the reviewer's exploits, against one process per variant ----------------------------------------------------

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
def test_subverting_the_process_passes_the_canaries_too(task: Task, tmp_path: Path, name: str) -> None:
    for _ in range(2):  # random variant orders
        verdict = grade_code(task, tmp_path, EXPLOITS[name])
        assert verdict.status is VerdictStatus.TAMPERED and verdict.reward == -1.0, verdict
        assert verdict.status is not VerdictStatus.PASSED and verdict.reward <= 0


#: One certain assertion and no literal expectation: its only canary is the flipped assertion.
FLIP_ONLY_CHECK = "def check(candidate):\n    for x in range(-3, 4):\n        assert candidate(x) == x * x\n"


def test_honest_wrong_code_that_satisfies_a_flipped_canary_fails_and_is_not_tampered(tmp_path: Path) -> None:
    flip = make_task(tmp_path / "task", FLIP_ONLY_CHECK)
    (canary,) = [v for v in check_variants(FLIP_ONLY_CHECK) if v.canary]
    assert "candidate(x) != x * x" in canary.source
    for _ in range(3):
        verdict = grade_code(flip, tmp_path, "def square(x):\n    return x * x + 1\n")  # passes the canary
        assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
    assert grade_code(flip, tmp_path, CORRECT).status is VerdictStatus.PASSED


def test_without_a_canary_a_pass_still_needs_the_drivers_completion_record(tmp_path: Path) -> None:
    no_canary = make_task(
        tmp_path / "task", "def check(candidate):\n    if candidate(2) != 4:\n        raise AssertionError\n"
    )
    assert [v.canary for v in check_variants((no_canary.tests / "check.py").read_text())] == [False]
    assert grade_code(no_canary, tmp_path, CORRECT).status is VerdictStatus.PASSED
    verdict = grade_code(no_canary, tmp_path, "import os\ndef square(x):\n    os._exit(0)\n")
    assert verdict.status is not VerdictStatus.PASSED and verdict.reward == 0.0, verdict
    assert verdict.tests[0].outcome is Outcome.MISSING


def test_every_variant_runs_on_the_whole_tree_links_included(tmp_path: Path) -> None:
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


def test_the_candidates_cost_is_the_real_checks_run_alone() -> None:
    # Canaries stop at a randomly chosen assertion: counted, their CPU and memory would give the same code a
    # different efficiency reward from one grading to the next.
    from rollbox.judge.runners._check import _report, _Run
    from rollbox.judge.runners._check_variants import CheckVariant
    from rollbox.sandbox import ExecResult

    def run(canary: bool, cpu_s: float, peak: int) -> _Run:
        result = ExecResult(status=Status.OK, exit_code=0, cpu_s=cpu_s, peak_memory_bytes=peak)
        return _Run(CheckVariant("id", "", canary), result, "failed" if canary else "passed", {})

    report = _report("f[check]", [run(True, 2.0, 300), run(False, 0.5, 100), run(True, 0.1, 900)])
    assert (report.cpu_s, report.peak_memory_bytes) == (0.5, 100)
