"""The in-process oracle, on check-based function tasks (``check(candidate)``, the six HumanEval problems whose
check could not become cases): a candidate that reads its expectations out of the check gets nothing.

Each attack answers honestly where that is easy (small inputs) and reads the answer everywhere else, through the
calling check's frame locals, its bytecode, the interpreter's other threads' frames, or the garbage collector:
must-fail canaries that mutate one literal expectation never see it read, since it reads only what the canaries
leave alone. Names that reach other frames are built at run time.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.judge._humaneval import Sample, evaluate_samples
from rollbox.tasks import Task, load_task
from rollbox.tasks._humaneval import humaneval_tasks

pytestmark = pytest.mark.slow

CHECK = textwrap.dedent("""
    import random


    def check(candidate):
        assert candidate(3) == 9
        expected = 2.25
        assert abs(candidate(1.5) - expected) < 1e-6
        for _ in range(5):
            v = random.randint(10, 99)
            want = v * v
            assert candidate(v) == want
""")

#: Honest below 10; above, whatever the check holds for it.
COMMON = textwrap.dedent("""
    import sys

    _sys = __import__("sy" + "s")


    def square(x):
        return x * x if abs(x) < 10 else _answer(x)


    def _plain(value):
        return value if type(value) in (int, float) else None


    def _check_frame(frame):
        while frame is not None and frame.f_code.co_name != "check":
            frame = frame.f_back
        return frame


    def _local(frame, x):
        found = [v for k, v in frame.f_locals.items() if _plain(v) is not None and v != x and k != "_"]
        return found[-1] if found else None
""")

ROUTES = {
    "the check's frame locals": """
        def _answer(x):
            return _local(_check_frame(getattr(_sys, "_get" + "frame")(1)), x)
    """,
    "the check's bytecode": """
        def _answer(x):
            frame = _check_frame(getattr(_sys, "_get" + "frame")(1))
            dis = __import__("d" + "is")
            for ins in dis.get_instructions(frame.f_code):
                if ins.offset > frame.f_lasti and ins.opname.startswith("LOAD_"):
                    value = ins.argval if ins.opname == "LOAD_CONST" else frame.f_locals.get(ins.argval)
                    if _plain(value) is not None:
                        return value
            return None
    """,
    "another thread's view of the frames": """
        def _answer(x):
            frames = getattr(_sys, "_current" + "_frames")()
            return _local(_check_frame(frames[__import__("threading").get_ident()]), x)
    """,
    "inspect's stack": """
        def _answer(x):
            inspect = __import__("in" + "spect")
            for record in getattr(inspect, "st" + "ack")(0):
                if record.function == "check":
                    return _local(record.frame, x)
            return None
    """,
}


def make_task(root: Path) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text("def square(x):\n    raise NotImplementedError\n")
    (root / "tests").mkdir()
    (root / "tests" / "check.py").write_text(CHECK)
    (root / "task.toml").write_text(
        '[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "square"\ncheck = "check.py"\n'
        '[limits]\ntimeout = "5s"\ncpu_time = "3s"\nmemory = "256M"\n'
    )
    return load_task(root)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_task(tmp_path_factory.mktemp("square"))


def grade_code(task: Task, code: str) -> Verdict:
    return asyncio.run(grade(task, {"solution.py": code}))


@pytest.mark.parametrize("route", ROUTES)
def test_reading_the_checks_expectations_earns_nothing(task: Task, route: str) -> None:
    for _ in range(2):  # canaries, where there are any, are drawn at random
        verdict = grade_code(task, COMMON + textwrap.dedent(ROUTES[route]))
        assert verdict.status is not VerdictStatus.PASSED and verdict.reward is not None and verdict.reward <= 0, (
            route,
            verdict,
        )


def test_honest_code_passes(task: Task) -> None:
    verdict = grade_code(task, "def square(x):\n    return x * x\n")
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict


#: HumanEval problems whose check computes the expected value into a local before the assertion: the original
#: string that was encoded (38, 50), the sum the check worked out (151).
HUMANEVAL_READERS = {
    "HumanEval/38": "    return _read('str')\n",
    "HumanEval/50": "    return _read('str')\n",
    "HumanEval/151": "    return _read('odd_sum')\n",
}
READ = textwrap.dedent("""

    def _read(name):
        frame = getattr(__import__("sy" + "s"), "_get" + "frame")(1)
        while frame is not None and name not in frame.f_locals:
            frame = frame.f_back
        return None if frame is None else frame.f_locals[name]
""")


def test_reading_a_humaneval_checks_locals_earns_nothing(tmp_path: Path) -> None:
    tasks = {task_id: load_task(path) for task_id, path in humaneval_tasks(tmp_path / "tasks").items()}
    pairs = [(task_id, body + READ) for task_id, body in HUMANEVAL_READERS.items() for _ in range(2)]
    samples = [Sample(line=i, task_id=t, completion=c, record={}) for i, (t, c) in enumerate(pairs, 1)]
    results = asyncio.run(evaluate_samples(samples, tasks, workers=2, dedupe=False))
    for result in results:
        verdict = result.verdict
        assert verdict.status is not VerdictStatus.PASSED, (result.sample.task_id, verdict)
        assert verdict.reward is not None and verdict.reward <= 0, (result.sample.task_id, verdict)


#: When first called, in the candidate's process: look for the check's process (its parent) through /proc, for its
#: memory (the request: the check's source and the id of its completion record) and its descriptors (the channel),
#: write a completion record for every id it finds to every descriptor it can open, and kill the check's process
#: before it writes its own.
THROUGH_PROC = textwrap.dedent("""
    import json, os, re, signal

    def _forge():
        parent = os.getppid()
        ids = set()
        try:
            with open(f"/proc/{parent}/maps") as maps, open(f"/proc/{parent}/mem", "rb", 0) as mem:
                for line in maps:
                    start, end = (int(x, 16) for x in line.split()[0].split("-"))
                    try:
                        mem.seek(start)
                        ids.update(re.findall(rb'"id": "([0-9a-f]{32})"', mem.read(min(end - start, 1 << 24))))
                    except (OSError, ValueError, OverflowError):
                        pass
        except OSError:
            pass
        for entry in (f"/proc/{parent}/fd/{n}" for n in range(1, 64)):
            for found in ids:
                try:
                    with open(entry, "w") as channel:
                        channel.write(json.dumps({"id": found.decode(), "outcome": "passed"}) + "\\n")
                except OSError:
                    pass
        if ids:
            os.kill(parent, signal.SIGKILL)

    def square(x):
        _forge()
        return 0
""")
#: At import: rename the check driver's directory (the candidate owns /tmp) and put a module of the same name in its
#: place that the check imports late, which would run in the check's process and report the check passed.
PLANTED_MODULE = textwrap.dedent("""
    import glob, os

    for directory in glob.glob("/tmp/.rollbox-check-*"):
        os.rename(directory, directory + ".old")
        os.mkdir(directory)
        with open(directory + "/fractions.py", "w") as f:
            f.write(
                "import json, os, sys\\n"
                "frame = sys._getframe()\\n"
                "while frame and 'request' not in frame.f_locals:\\n    frame = frame.f_back\\n"
                "if frame:\\n"
                "    record = {'id': frame.f_locals['request']['id'], 'outcome': 'passed'}\\n"
                "    for fd in range(3, 20):\\n"
                "        try:\\n            os.write(fd, (json.dumps(record) + '\\\\n').encode())\\n"
                "        except OSError:\\n            pass\\n"
                "    os._exit(0)\\n"
            )

    def square(x):
        return 0
""")
LATE_IMPORT_CHECK = "def check(candidate):\n    import fractions\n    assert candidate(3) == fractions.Fraction(9)\n"


def test_the_checks_process_is_out_of_reach_through_proc(task: Task) -> None:
    verdict = grade_code(task, THROUGH_PROC)
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict


def test_a_module_planted_where_the_driver_was_is_never_imported_by_the_check(tmp_path: Path) -> None:
    late = make_task(tmp_path / "late")
    (late.tests / "check.py").write_text(LATE_IMPORT_CHECK)
    verdict = grade_code(late, PLANTED_MODULE)
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
    assert grade_code(late, "def square(x):\n    return x * x\n").status is VerdictStatus.PASSED


def test_calls_keep_their_meaning_across_the_processes(tmp_path: Path) -> None:
    check = textwrap.dedent("""
        def check(candidate):
            assert candidate(2) == 4 and candidate(-1.5) == 2.25
            assert candidate(0) is not None
            try:
                candidate("x")
            except TypeError:
                pass
            else:
                raise AssertionError("a str squared")
            assert candidate(3) == candidate(-3)
    """)
    meaning = make_task(tmp_path / "meaning")
    (meaning.tests / "check.py").write_text(check)
    honest = "import sys, threading\nprint('debug')\nthreading.Thread(target=print).start()\n"
    honest += "def square(x):\n    print('called', x, file=sys.stderr)\n    return x * x\n"
    assert grade_code(meaning, honest).status is VerdictStatus.PASSED
    non_plain = "class Box(int):\n    pass\n\ndef square(x):\n    return Box(x * x) if type(x) is int else x * x\n"
    assert grade_code(meaning, non_plain).status is VerdictStatus.PASSED
    lenient = "def square(x):\n    return x * x if not isinstance(x, str) else 'xx'\n"
    assert grade_code(meaning, lenient).status is VerdictStatus.FAILED


#: Reads the check's process's memory for the request it was sent (the check's source), and answers every call
#: with the literal the check compares that call with; 0 where it finds none.
MEMORY_READER = textwrap.dedent("""
    import ast, json, os, re

    _answers = None

    def _read_answers():
        parent, found = os.getppid(), {}
        try:
            with open(f"/proc/{parent}/maps") as maps, open(f"/proc/{parent}/mem", "rb", 0) as mem:
                for line in maps:
                    start, end = (int(x, 16) for x in line.split()[0].split("-"))
                    try:
                        mem.seek(start)
                        chunk = mem.read(min(end - start, 1 << 24))
                    except (OSError, ValueError, OverflowError):
                        continue
                    for match in re.finditer(rb'"source": ("(?:[^"\\\\]|\\\\.)*")', chunk):
                        source = json.loads(match.group(1))
                        for node in ast.walk(ast.parse(source)):
                            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Call):
                                args = tuple(ast.literal_eval(a) for a in node.left.args)
                                found[args] = ast.literal_eval(node.comparators[0])
        except (OSError, ValueError, SyntaxError):
            pass
        return found

    def square(x):
        global _answers
        if _answers is None:
            _answers = _read_answers()
        return _answers.get((x,), 0)
""")
LITERAL_CHECK = "def check(candidate):\n    assert candidate(12) == 144\n    assert candidate(-7) == 49\n"


def test_the_checks_process_memory_is_out_of_reach(tmp_path: Path) -> None:
    literal = make_task(tmp_path / "literal")
    (literal.tests / "check.py").write_text(LITERAL_CHECK)
    verdict = grade_code(literal, MEMORY_READER)
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
