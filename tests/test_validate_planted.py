"""The planted-defect suite: tasks broken on purpose in each way validation must catch, each flagged with the right
reason, beside healthy tasks of every runner, which are admitted."""

from __future__ import annotations

import ast
import asyncio
import datetime
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rollbox import Limits, Sandbox
from rollbox.curate import Decision, ReasonCode, TaskReport, ValidateOptions, validate
from rollbox.tasks import load_task

#: Many gradings each; a loaded machine makes them slow.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

CLAMP_STUB = "def clamp(x, lo, hi):\n    raise NotImplementedError\n"
CLAMP = """def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
"""
CLAMP_TESTS = """from calc import clamp


def test_inside():
    assert clamp(5, 0, 10) == 5
    assert clamp(-3, -5, 5) == -3


def test_below():
    assert clamp(-1, 0, 10) == 0
    assert clamp(-100, -5, 5) == -5


def test_above():
    assert clamp(11, 0, 10) == 10
    assert clamp(100, -5, 5) == 5
"""
SIGN = "def sign(n):\n    if n > 0:\n        return 1\n    if n < 0:\n        return -1\n    return 0\n"
SIGN_CASES = "".join(f'{{"args": [{n}], "expected": {(n > 0) - (n < 0)}}}\n' for n in (5, -5, 0, 1, -1, 100, -7))


def write_task(root: Path, name: str, files: dict[str, str], toml: str) -> Path:
    path = root / name
    for relative, text in files.items():
        file = path / relative
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text)
    (path / "workspace").mkdir(parents=True, exist_ok=True)
    (path / "tests").mkdir(parents=True, exist_ok=True)
    (path / "task.toml").write_text(toml)
    return path


PYTEST = '[grading]\nrunner = "pytest"\n'
FUNCTION_SIGN = '[grading]\nrunner = "function"\nmodule = "sol.py"\nentry_point = "sign"\n'


def healthy_pytest(root: Path) -> Path:
    return write_task(
        root,
        "healthy-pytest",
        {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test_calc.py": CLAMP_TESTS},
        PYTEST,
    )


def healthy_function(root: Path) -> Path:
    stub = "def sign(n):\n    raise NotImplementedError\n"
    return write_task(
        root,
        "healthy-function",
        {"workspace/sol.py": stub, "solution/sol.py": SIGN, "tests/cases.jsonl": SIGN_CASES},
        FUNCTION_SIGN,
    )


def healthy_stdio(root: Path) -> Path:
    cases = "".join(
        f'{{"input": "{a} {b}\\n", "output": "{a + b}\\n"}}\n' for a, b in ((1, 2), (5, 7), (-3, 10), (0, 0), (9, 9))
    )
    return write_task(
        root,
        "healthy-stdio",
        {
            "workspace/sum.py": "",
            "solution/sum.py": "a, b = map(int, input().split())\nprint(a + b)\n",
            "tests/cases.jsonl": cases,
        },
        '[grading]\nrunner = "stdio"\ncommand = "python3 sum.py"\n',
    )


def wrong_reference(root: Path) -> Path:
    wrong = SIGN.replace("return -1", "return 1")
    return write_task(
        root,
        "wrong-reference",
        {"workspace/sol.py": "def sign(n):\n    pass\n", "solution/sol.py": wrong, "tests/cases.jsonl": SIGN_CASES},
        FUNCTION_SIGN,
    )


def flaky(root: Path) -> Path:
    coin = "".join(f"\n\ndef test_coin_{i}():\n    assert os.urandom(1)[0] % 2\n" for i in range(5))
    return write_task(
        root,
        "flaky",
        {
            "workspace/calc.py": CLAMP_STUB,
            "solution/calc.py": CLAMP,
            "tests/test_calc.py": CLAMP_TESTS,
            "tests/test_coin.py": "import os\n" + coin,
        },
        PYTEST,
    )


def order_dependent(root: Path) -> Path:
    tests = CLAMP_TESTS + (
        "\n\nSEEN = []\n\n\ndef test_first():\n    SEEN.append(clamp(1, 0, 2))\n\n\n"
        "def test_second():\n    assert SEEN == [1]\n"
    )
    return write_task(
        root,
        "order-dependent",
        {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test_calc.py": tests},
        PYTEST,
    )


def accepts_trivial(root: Path) -> Path:
    tests = "from calc import clamp\n\n\ndef test_returns_something():\n    assert clamp(5, 0, 10) is not None\n"
    return write_task(
        root,
        "accepts-trivial",
        {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test_calc.py": tests},
        PYTEST,
    )


def accepts_hack(root: Path) -> Path:
    """A script task whose check trusts the exit code of a process that imports the candidate's code."""
    script = (
        "cd /workspace\n"
        'if python3 -c "import calc; assert calc.clamp(5, 0, 10) == 5; assert calc.clamp(-1, 0, 10) == 0"; then\n'
        '  echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"\nelse\n  echo 0 > "$ROLLBOX_REWARD_DIR/reward.txt"\nfi\n'
    )
    return write_task(
        root,
        "accepts-hack",
        {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test.sh": script},
        '[grading]\nrunner = "script"\n',
    )


def accepts_hack_behind_canaries(root: Path) -> Path:
    """A pytest task whose one test of the changed function compares with a computed value (nothing the judge can
    seal), among five tests of other code: an always-equal object passes it, and each grading's two must-fail
    canaries, copies of two of the six tests, catch it a third of the time."""
    others = "".join(f"\n\ndef test_double_{n}():\n    assert double({n}) == {2 * n}\n" for n in range(5))
    tests = "from calc import clamp, double\n\n\ndef test_clamp():\n    assert clamp(11, 0, 10) == double(5)\n"
    library = "\n\ndef double(x):\n    return 2 * x\n"
    return write_task(
        root,
        "accepts-hack-behind-canaries",
        {
            "workspace/calc.py": CLAMP_STUB + library,
            "solution/calc.py": CLAMP + library,
            "tests/test_calc.py": tests + others,
        },
        PYTEST,
    )


def contradictory(root: Path) -> Path:
    cases = SIGN_CASES + '{"args": [5], "expected": -1}\n'
    return write_task(
        root,
        "contradictory",
        {"workspace/sol.py": "def sign(n):\n    pass\n", "solution/sol.py": SIGN, "tests/cases.jsonl": cases},
        FUNCTION_SIGN,
    )


def f2p_passes_before(root: Path) -> Path:
    stub = "def clamp(x, lo, hi):\n    return x\n"  # already right inside the range
    toml = PYTEST + (
        'fail_to_pass = ["tests/test_calc.py::test_inside", "tests/test_calc.py::test_below"]\n'
        'pass_to_pass = ["tests/test_calc.py::test_above"]\n'
    )
    return write_task(
        root,
        "f2p-passes-before",
        {"workspace/calc.py": stub, "solution/calc.py": CLAMP, "tests/test_calc.py": CLAMP_TESTS},
        toml,
    )


def timing_dependent(root: Path) -> Path:
    tests = CLAMP_TESTS + (
        "\n\nimport time\n\n\ndef test_fast_enough():\n"
        "    wall, cpu = time.perf_counter(), time.process_time()\n"
        "    while time.process_time() - cpu < 0.3:\n        clamp(5, 0, 10)\n"
        "    # the share of a CPU this process got: about 1 alone, far less beside busy neighbours\n"
        "    assert (time.process_time() - cpu) / (time.perf_counter() - wall) > 0.3\n"
    )
    return write_task(
        root,
        "timing-dependent",
        {"workspace/calc.py": CLAMP_STUB, "solution/calc.py": CLAMP, "tests/test_calc.py": tests},
        PYTEST + '[limits]\ntimeout = "20s"\ncpu_time = "20s"\n',
    )


def leaks_file(root: Path) -> Path:
    return write_task(
        root,
        "leaks-file",
        {
            "workspace/sol.py": "def sign(n):\n    pass\n",
            "workspace/notes/old_sol.py": SIGN,
            "solution/sol.py": SIGN,
            "tests/cases.jsonl": SIGN_CASES,
        },
        FUNCTION_SIGN,
    )


def leaks_git(root: Path) -> Path:
    path = write_task(
        root,
        "leaks-git",
        {"workspace/calc.py": CLAMP, "solution/calc.py": CLAMP, "tests/test_calc.py": CLAMP_TESTS},
        PYTEST,
    )
    workspace = path / "workspace"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(workspace)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "calc.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "solved"], check=True)
    (workspace / "calc.py").write_text(CLAMP_STUB)  # the answer is gone from the tree, not from the history
    subprocess.run([*git, "commit", "-qam", "stub"], check=True)
    return path


def nondeterministic_checker(root: Path) -> Path:
    checker = (
        "import os, sys\n"
        "expected, output = (open(p).read().split() for p in sys.argv[2:4])\n"
        "sys.exit(0 if expected == output or os.urandom(1)[0] % 2 else 1)\n"
    )
    cases = "".join(f'{{"input": "{a} {b}\\n", "output": "{a + b}\\n"}}\n' for a, b in ((1, 2), (5, 7), (3, 3), (8, 1)))
    cases += "".join(f'{{"input": "{a} {a}\\n", "output": "{2 * a}\\n"}}\n' for a in range(10, 16))
    return write_task(
        root,
        "nondeterministic-checker",
        {
            "workspace/sum.py": "",
            "solution/sum.py": "a, b = map(int, input().split())\nprint(a + b)\n",
            "tests/cases.jsonl": cases,
            "tests/check.py": checker,
        },
        '[grading]\nrunner = "stdio"\ncommand = "python3 sum.py"\ncomparator = "checker"\nchecker = "check.py"\n',
    )


ADD_STUB = "def add(a, b):\n    raise NotImplementedError\n"
ADD = "def add(a, b):\n    return a + b\n"
PAIRS = "[[1, 2], [3, 4], [-5, 5], [10, 7]]\n"


def data_in_workspace(root: Path) -> Path:
    """(a) The tests take their inputs from a file of the workspace: ``return a - b`` with ``pairs.json`` rewritten
    to ``[[0, 0]]`` passes them (and so does anything with it emptied)."""
    tests = (
        "import json\nfrom pathlib import Path\n\nfrom calc import add\n\n\ndef test_pairs():\n"
        "    for a, b in json.loads(Path('/workspace/pairs.json').read_text()):\n        assert add(a, b) == a + b\n"
    )
    return write_task(
        root,
        "data-in-workspace",
        {
            "workspace/calc.py": ADD_STUB,
            "workspace/pairs.json": PAIRS,
            "solution/calc.py": ADD,
            "tests/test_calc.py": tests,
        },
        PYTEST,
    )


def healthy_data_read_by_code(root: Path) -> Path:
    """The control of (a): the workspace holds data that the code under test reads, and the tests compare with
    values of their own."""
    rates = '{"EUR": 2, "USD": 3}\n'
    code = (
        "import json\nfrom pathlib import Path\n\n"
        "RATES = json.loads((Path(__file__).parent / 'rates.json').read_text())\n\n\n"
    )
    tests = (
        "from calc import convert\n\n\ndef test_convert():\n    assert convert(5, 'EUR') == 10\n"
        "    assert convert(7, 'USD') == 21\n    assert convert(0, 'USD') == 0\n"
    )
    return write_task(
        root,
        "healthy-data-read-by-code",
        {
            "workspace/calc.py": code + "def convert(amount, currency):\n    raise NotImplementedError\n",
            "workspace/rates.json": rates,
            "solution/calc.py": code + "def convert(amount, currency):\n    return amount * RATES[currency]\n",
            "tests/test_calc.py": tests,
        },
        PYTEST,
    )


#: (b) Differential tests against an oracle module shipped in tests/.
ORACLE_TESTS = """import random

from calc import add
from oracle import reference_add


def test_random():
    rng = random.Random(0)
    for _ in range(50):
        a, b = rng.randint(-99, 99), rng.randint(-99, 99)
        assert add(a, b) == reference_add(a, b)
"""


def oracle_in_tests(root: Path) -> Path:
    """(b) The tests compare with an oracle the candidate's process can call: a frame walk to "the caller's
    function whose name contains mine" passes them."""
    return write_task(
        root,
        "oracle-in-tests",
        {
            "workspace/calc.py": ADD_STUB,
            "solution/calc.py": ADD,
            "tests/oracle.py": "def reference_add(a, b):\n    return a + b\n",
            "tests/test_calc.py": ORACLE_TESTS,
        },
        PYTEST,
    )


EXPECTED = '{"1 2": 3, "3 4": 7, "-5 5": 0, "10 7": 17}\n'
EXPECTED_TESTS = (
    "import json\nfrom pathlib import Path\n\nfrom calc import add\n\n"
    "EXPECTED = json.loads((Path(__file__).parent / 'expected.json').read_text())\n\n\n"
    "def test_table():\n    for key, value in EXPECTED.items():\n        a, b = map(int, key.split())\n"
    "        assert add(a, b) == value\n"
)


def reference_reads_expected(root: Path) -> Path:
    """(c) A reference that is a lookup table read from the tests' own expected-values file, by its name."""
    lookup = (
        "import glob\nimport json\n\n\ndef add(a, b):\n"
        "    for path in glob.glob('/tmp/.rollbox-judge/tests/expected.json'):\n"
        "        return json.load(open(path))[f'{a} {b}']\n"
    )
    return write_task(
        root,
        "reference-reads-expected",
        {
            "workspace/calc.py": ADD_STUB,
            "solution/calc.py": lookup,
            "tests/expected.json": EXPECTED,
            "tests/test_calc.py": EXPECTED_TESTS,
        },
        PYTEST,
    )


def reference_reads_expected_quietly(root: Path) -> Path:
    """(c) The same lookup, naming nothing: the tests' directory found through the test module, every JSON file of
    it read. Only the audit hook's variant sees it."""
    lookup = (
        "import json\nimport os\nimport sys\n\n\ndef add(a, b):\n"
        "    for module in list(sys.modules.values()):\n"
        "        where = os.path.dirname(getattr(module, '__file__', None) or '/nowhere')\n"
        "        for name in sorted(os.listdir(where)) if os.path.isdir(where) else []:\n"
        "            if name.endswith('.json'):\n"
        "                table = json.load(open(os.path.join(where, name)))\n"
        "                if f'{a} {b}' in table:\n"
        "                    return table[f'{a} {b}']\n"
    )
    return write_task(
        root,
        "reference-reads-expected-quietly",
        {
            "workspace/calc.py": ADD_STUB,
            "solution/calc.py": lookup,
            "tests/expected.json": EXPECTED,
            "tests/test_calc.py": EXPECTED_TESTS,
        },
        PYTEST,
    )


def healthy_fixture_handed_to_code(root: Path) -> Path:
    """The control of (c): the tests hand a file of tests/ to the code under test, which opens it."""
    stub = "def total(path):\n    raise NotImplementedError\n"
    solution = (
        "def total(path):\n    with open(path) as f:\n        return sum(int(line) for line in f if line.strip())\n"
    )
    tests = (
        "from pathlib import Path\n\nfrom sums import total\n\n\ndef test_total():\n"
        "    assert total(str(Path(__file__).parent / 'fixtures' / 'numbers.txt')) == 42\n"
        "    assert total(Path(__file__).parent / 'fixtures' / 'none.txt') == 0\n"
    )
    return write_task(
        root,
        "healthy-fixture-handed-to-code",
        {
            "workspace/sums.py": stub,
            "solution/sums.py": solution,
            "tests/fixtures/numbers.txt": "40\n1\n1\n",
            "tests/fixtures/none.txt": "\n",
            "tests/test_sums.py": tests,
        },
        PYTEST,
    )


WORDS = "pear apple fig plum kiwi apple fig"


def distinct_words(hash_seed: int) -> list[str]:
    """``list(set(WORDS.split()))`` as a graded process computes it under ``PYTHONHASHSEED=hash_seed``."""

    async def run() -> list[str]:
        async with Sandbox(limits=Limits(timeout_s=30)) as sb:
            script = f"print(repr(list(set({WORDS!r}.split()))))"
            result = await sb.exec(["python3", "-c", script], env={"PYTHONHASHSEED": str(hash_seed)})
        return list(ast.literal_eval(result.stdout_text))

    return asyncio.run(run())


WORDS_STUB = "def distinct(text):\n    raise NotImplementedError\n"
WORDS_TESTS = "from words import distinct\n\n\ndef test_distinct():\n    assert distinct({text!r}) == {expected!r}\n"


def set_order_pinned(root: Path) -> Path:
    """(hash seed) The test pins the order a set of strings iterates in under the judge's PYTHONHASHSEED=0, which
    its author saw; a solution correct by any statement (``sorted(...)``) fails it."""
    pinned = distinct_words(0)
    # Validation's first runs take hash seeds 1 and 2: at least one must iterate the set in another order.
    assert pinned != distinct_words(1) or pinned != distinct_words(2)
    return write_task(
        root,
        "set-order-pinned",
        {
            "workspace/words.py": WORDS_STUB,
            "solution/words.py": "def distinct(text):\n    return list(set(text.split()))\n",
            "tests/test_words.py": WORDS_TESTS.format(text=WORDS, expected=pinned),
        },
        PYTEST,
    )


def healthy_set_sorted(root: Path) -> Path:
    """The control of (hash seed): the distinct words, sorted."""
    return write_task(
        root,
        "healthy-set-sorted",
        {
            "workspace/words.py": WORDS_STUB,
            "solution/words.py": "def distinct(text):\n    return sorted(set(text.split()))\n",
            "tests/test_words.py": WORDS_TESTS.format(text=WORDS, expected=sorted(set(WORDS.split()))),
        },
        PYTEST,
    )


def function_cases(calls: list[tuple[list[object], object]]) -> str:
    return "".join(json.dumps({"args": args, "kwargs": {}, "expected": expected}) + "\n" for args, expected in calls)


def set_order_pinned_function(root: Path) -> Path:
    """(hash seed) As ``set_order_pinned``, graded by the function runner: validation's runs under other seeds fork
    a pre-started Python that must have started under each seed."""
    return write_task(
        root,
        "set-order-pinned-function",
        {
            "workspace/words.py": WORDS_STUB,
            "solution/words.py": "def distinct(text):\n    return list(set(text.split()))\n",
            "tests/cases.jsonl": function_cases([([WORDS], distinct_words(0))]),
        },
        '[grading]\nrunner = "function"\nmodule = "words.py"\nentry_point = "distinct"\n',
    )


def time_bomb_function(root: Path) -> Path:
    """(clock) As ``time_bomb``, graded by the function runner: the runs with the clock moved fork a pre-started
    Python that must have started with it moved."""
    now = datetime.date.today()
    solution = (
        "import datetime\n\n\ndef age(year, month, day):\n    today = datetime.date.today()\n"
        "    return today.year - year - ((today.month, today.day) < (month, day))\n"
    )
    return write_task(
        root,
        "time-bomb-function",
        {
            "workspace/people.py": "def age(year, month, day):\n    raise NotImplementedError\n",
            "solution/people.py": solution,
            "tests/cases.jsonl": function_cases([([2000, 3, 15], now.year - 2000 - ((now.month, now.day) < (3, 15)))]),
        },
        '[grading]\nrunner = "function"\nmodule = "people.py"\nentry_point = "age"\n',
    )


AGE_STUB = "import datetime\n\n\ndef age(born):\n    raise NotImplementedError\n"
AGE = """import datetime


def age(born):
    today = datetime.date.today()
    return today.year - born.year - ((today.month, today.day) < (born.month, born.day))
"""


def time_bomb(root: Path) -> Path:
    """(clock) The test compares with a fixed date the age it had the day it was written: it passes today and fails
    next birthday."""
    now = datetime.date.today()
    expected = now.year - 2000 - ((now.month, now.day) < (3, 15))
    tests = (
        "import datetime\n\nfrom people import age\n\n\ndef test_age():\n"
        f"    assert age(datetime.date(2000, 3, 15)) == {expected}\n"
    )
    return write_task(
        root,
        "time-bomb",
        {"workspace/people.py": AGE_STUB, "solution/people.py": AGE, "tests/test_people.py": tests},
        PYTEST,
    )


def healthy_relative_date(root: Path) -> Path:
    """The control of (clock): the test's dates are relative to the day it runs."""
    tests = (
        "import datetime\n\nfrom people import age\n\n\ndef test_age():\n"
        "    today = datetime.date.today()\n"
        "    assert age(datetime.date(today.year - 30, today.month, min(today.day, 28))) == 30\n"
        "    assert age(today) == 0\n"
    )
    return write_task(
        root,
        "healthy-relative-date",
        {"workspace/people.py": AGE_STUB, "solution/people.py": AGE, "tests/test_people.py": tests},
        PYTEST,
    )


#: A test that keeps a CPU busy for ``{seconds}`` s of its own CPU time (however long a busy machine makes that).
BUSY_TESTS = CLAMP_TESTS + (
    "\n\nimport time\n\n\ndef test_many():\n    start, results = time.process_time(), set()\n"
    "    while time.process_time() - start < {seconds}:\n        results.add(clamp(5, 0, 10))\n"
    "    assert results == {{5}}\n"
)


def tight_time_limit(root: Path) -> Path:
    """(time limit) The reference spends at least 0.6 s of CPU (about 0.8 s with pytest's own): a CPU limit of 2 s
    leaves it less than three times that. Decided by CPU time, which a busy machine does not raise."""
    return write_task(
        root,
        "tight-time-limit",
        {
            "workspace/calc.py": CLAMP_STUB,
            "solution/calc.py": CLAMP,
            "tests/test_calc.py": BUSY_TESTS.format(seconds=0.6),
        },
        PYTEST + '[limits]\ntimeout = "60s"\ncpu_time = "2s"\n',
    )


def healthy_time_limit(root: Path) -> Path:
    """The control of (time limit): as much work under a CPU limit of 20 s."""
    return write_task(
        root,
        "healthy-time-limit",
        {
            "workspace/calc.py": CLAMP_STUB,
            "solution/calc.py": CLAMP,
            "tests/test_calc.py": BUSY_TESTS.format(seconds=0.5),
        },
        PYTEST + '[limits]\ntimeout = "60s"\ncpu_time = "20s"\n',
    )


DURATION = """UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(text):
    \"\"\"The seconds ``text`` (such as ``1h30m``) names, whitespace around it ignored.

    Raises ValueError when it is empty, has an unknown unit, or ends in a number without a unit.
    \"\"\"
    text = text.strip()
    if not text:
        raise ValueError(text)
    total, number = 0, ""
    for char in text:
        if char.isdigit():
            number += char
        elif char in UNITS:
            total += int(number) * UNITS[char]
            number = ""
        else:
            raise ValueError(text)
    if number:
        raise ValueError(text)
    return total
"""
DURATION_STUB = DURATION.split("    text = text.strip()", maxsplit=1)[0] + "    raise NotImplementedError\n"
DURATION_TESTS = """from durations import seconds


def test_seconds():
    assert seconds("1s") == 1
    assert seconds("2m") == 120
    assert seconds("3h") == 10800
    assert seconds("1d") == 86400
    assert seconds("1h30m") == 5400
    assert seconds("1d2h3m4s") == 93784
    assert seconds("90s") == 90
    assert seconds("10m5s") == 605
"""


def unchecked_promises(root: Path) -> Path:
    """(promises) The statement promises three ValueErrors and whitespace handling; the tests check none of them,
    and the rest well enough that most mutants die."""
    return write_task(
        root,
        "unchecked-promises",
        {
            "workspace/durations.py": DURATION_STUB,
            "solution/durations.py": DURATION,
            "tests/test_durations.py": DURATION_TESTS,
        },
        PYTEST,
    )


def healthy_checked_promises(root: Path) -> Path:
    """The control of (promises): every promised error, and the whitespace, checked."""
    tests = DURATION_TESTS + (
        "\n\nimport pytest\n\n\ndef test_promises():\n"
        "    assert seconds(' 1m\\n') == 60\n"
        "    for text in ('', ' ', '1s!', '5'):\n"
        "        with pytest.raises(ValueError):\n            seconds(text)\n"
    )
    return write_task(
        root,
        "healthy-checked-promises",
        {"workspace/durations.py": DURATION_STUB, "solution/durations.py": DURATION, "tests/test_durations.py": tests},
        PYTEST,
    )


INFLECT = """IRREGULAR = {"cow": "kine", "person": "people", "child": "children"}


def plural(word):
    if word in IRREGULAR:
        return IRREGULAR[word]
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    return word + "s"
"""
PLURALS = {
    "cow": "kine",
    "person": "people",
    "child": "children",
    "city": "cities",
    "fly": "flies",
    "lady": "ladies",
    "day": "days",
    "boy": "boys",
    "box": "boxes",
    "bus": "buses",
    "church": "churches",
    "cat": "cats",
}
INFLECT_TESTS = (
    "import pytest\n\nfrom inflect import plural\n\n\n"
    f"@pytest.mark.parametrize(('word', 'expected'), {sorted(PLURALS.items())!r})\n"
    "def test_plural(word, expected):\n    assert plural(word) == expected\n"
)


def bug_fix(root: Path, name: str, bug: tuple[str, str]) -> Path:
    """A bug-fix task on ``INFLECT`` with ``bug`` (old, new) made: fail_to_pass the cases the bug breaks."""
    broken = INFLECT.replace(*bug)
    namespace: dict[str, Any] = {}
    exec(broken, namespace)
    failing = [f"tests/test_inflect.py::test_plural[{w}-{p}]" for w, p in sorted(PLURALS.items())]
    f2p = [t for t, (w, p) in zip(failing, sorted(PLURALS.items()), strict=True) if namespace["plural"](w) != p]
    p2p = [t for t in failing if t not in f2p]
    toml = PYTEST + f"fail_to_pass = {f2p!r}\npass_to_pass = {p2p!r}\n".replace("'", '"')
    return write_task(
        root,
        name,
        {"workspace/inflect.py": broken, "solution/inflect.py": INFLECT, "tests/test_inflect.py": INFLECT_TESTS},
        toml,
    )


def healthy_bug_fix(root: Path) -> Path:
    """The control of (special case, duplicates): a bug in the rule for -y, which five cases show."""
    return bug_fix(root, "healthy-bug-fix", ('word[-2:-1] not in "aeiou"', 'word[-2:-1] in "aeiou"'))


def bug_fix_written_another_way(root: Path) -> Path:
    """(duplicates) The same bug as ``healthy_bug_fix``, written another way: the same fix, the same tests."""
    return bug_fix(
        root, "bug-fix-written-another-way", ('word[-2:-1] not in "aeiou"', 'not word[-2:-1] not in "aeiou"')
    )


def healthy_pytest_again(root: Path) -> Path:
    """(duplicates) ``healthy_pytest`` under another id."""
    path = root / "healthy-pytest-again"
    shutil.copytree(healthy_pytest(root / "copy"), path)
    (path / "task.toml").write_text('id = "another-clamp"\n' + PYTEST)
    return path


def one_case_bug(root: Path) -> Path:
    """(special case) The bug breaks one irregular word, which one case shows: ``if word == 'cow': return 'kine'``
    in the buggy function passes every test."""
    return bug_fix(root, "one-case-bug", ('"cow": "kine"', '"cow": "cows"'))


HEALTHY = (
    healthy_pytest,
    healthy_function,
    healthy_stdio,
    healthy_data_read_by_code,
    healthy_fixture_handed_to_code,
    healthy_set_sorted,
    healthy_relative_date,
    healthy_time_limit,
    healthy_checked_promises,
    healthy_bug_fix,
)
PLANTED = {
    data_in_workspace: ReasonCode.TEST_DATA_IN_WORKSPACE,
    oracle_in_tests: ReasonCode.HACK_PASSES,
    reference_reads_expected: ReasonCode.REFERENCE_READS_TESTS,
    reference_reads_expected_quietly: ReasonCode.REFERENCE_READS_TESTS,
    wrong_reference: ReasonCode.REFERENCE_FAILS,
    flaky: ReasonCode.FLAKY,
    order_dependent: ReasonCode.ORDER_DEPENDENT,
    accepts_trivial: ReasonCode.TRIVIAL_PASSES,
    accepts_hack: ReasonCode.HACK_PASSES,
    accepts_hack_behind_canaries: ReasonCode.HACK_PASSES,
    contradictory: ReasonCode.CONTRADICTORY_CASES,
    f2p_passes_before: ReasonCode.F2P_PASSES_BEFORE,
    leaks_file: ReasonCode.ANSWER_LEAK,
    leaks_git: ReasonCode.ANSWER_LEAK,
    nondeterministic_checker: ReasonCode.NONDETERMINISTIC,
    set_order_pinned: ReasonCode.HASH_SEED_DEPENDENT,
    set_order_pinned_function: ReasonCode.HASH_SEED_DEPENDENT,
    time_bomb: ReasonCode.DATE_DEPENDENT,
    time_bomb_function: ReasonCode.DATE_DEPENDENT,
    tight_time_limit: ReasonCode.TIGHT_TIME_LIMIT,
    healthy_pytest_again: ReasonCode.DUPLICATE,
    bug_fix_written_another_way: ReasonCode.DUPLICATE,
    one_case_bug: ReasonCode.SHORTCUT_PASSES,
}
#: Trustworthy, but their tests check too little.
WEAK = {unchecked_promises: ReasonCode.WEAK_TESTS}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskReport]:
    if shutil.which("git") is None:
        pytest.skip("git is needed to plant a leak in a repository's history")
    root = tmp_path_factory.mktemp("planted")
    paths = [make(root) for make in (*HEALTHY, *PLANTED, *WEAK)]
    tasks = [load_task(path) for path in paths]
    # Few steady runs: what these tasks plant shows on the first runs (tests/test_validate_flaky.py proves the
    # sequential rule's power).
    options = ValidateOptions(runs=4, reruns=3, steady_runs=6, pressure=False, max_mutants=15, generate=False)
    return {r.path.rsplit("/", 1)[-1]: r for r in asyncio.run(validate(tasks, options=options, workers=2))}


@pytest.mark.parametrize("make", HEALTHY, ids=lambda m: m.__name__)
def test_healthy_tasks_are_admitted(reports: dict[str, TaskReport], make: object) -> None:
    report = reports[make.__name__.replace("_", "-")]  # type: ignore[attr-defined]
    assert report.decision is Decision.ADMIT, report.reasons
    assert report.kill_ratio is not None and report.kill_ratio >= 0.6
    assert {c.name for c in report.candidates} >= {"reference", "untouched_workspace", "empty_body", "exit_at_import"}


@pytest.mark.parametrize("make", PLANTED, ids=lambda m: m.__name__)
def test_planted_defects_are_flagged(reports: dict[str, TaskReport], make: object) -> None:
    report = reports[make.__name__.replace("_", "-")]  # type: ignore[attr-defined]
    code = PLANTED[make]  # type: ignore[index]
    assert code in report.codes(), report.reasons
    assert report.decision is Decision.REJECT


@pytest.mark.parametrize("make", WEAK, ids=lambda m: m.__name__)
def test_weak_tests_are_weak(reports: dict[str, TaskReport], make: object) -> None:
    report = reports[make.__name__.replace("_", "-")]  # type: ignore[attr-defined]
    assert report.decision is Decision.WEAK and report.codes() == {WEAK[make]}, report.reasons  # type: ignore[index]


def test_unchecked_branches_decide_whatever_the_ratio(reports: dict[str, TaskReport]) -> None:
    report = reports["unchecked-promises"]
    # The ratio alone would admit it: every survivor sits in what the statement promises.
    assert report.kill_ratio is not None and report.kill_ratio >= 0.6
    (detail,) = [r.detail for r in report.reasons]
    assert detail.startswith("no test checks 3 of 5 branches") and "`if not text:` emptied" in detail, detail
    assert "`else` of `if char in UNITS:` emptied" in detail and "`if number:` emptied" in detail
    assert any(d.endswith("(removed_branch)") for d in report.survivors()["durations.py::seconds"])
    checked = reports["healthy-checked-promises"]
    assert not [m for m in checked.mutants if m.operator == "removed_branch" and not m.killed]


def test_the_new_reasons_name_what_is_wrong(reports: dict[str, TaskReport]) -> None:
    def detail(task: str, code: ReasonCode) -> str:
        return next(r.detail for r in reports[task].reasons if r.code is code)

    assert "PYTHONHASHSEED=" in detail("set-order-pinned", ReasonCode.HASH_SEED_DEPENDENT)
    assert "d)" in detail("time-bomb", ReasonCode.DATE_DEPENDENT) and "test_age" in detail(
        "time-bomb", ReasonCode.DATE_DEPENDENT
    )
    tight = reports["tight-time-limit"]
    assert tight.reference_cpu_s is not None and tight.reference_cpu_s >= 0.6
    assert "CPU 2 s limit" in detail("tight-time-limit", ReasonCode.TIGHT_TIME_LIMIT)
    assert reports["healthy-pytest-again"].duplicate_of.startswith("healthy-pytest (")  # type: ignore[union-attr]
    assert reports["healthy-pytest-again"].gradings == 0
    assert detail("bug-fix-written-another-way", ReasonCode.DUPLICATE).startswith("the same fix")
    assert reports["bug-fix-written-another-way"].duplicate_of.startswith("healthy-bug-fix (")  # type: ignore[union-attr]
    assert "`plural('cow')` -> `return 'kine'`" in detail("one-case-bug", ReasonCode.SHORTCUT_PASSES)
    assert reports["one-case-bug"].f2p_inputs == 1
    # The control's evidence spans five inputs: no table of them is tried.
    assert reports["healthy-bug-fix"].f2p_inputs == 5
    assert not [c for c in reports["healthy-bug-fix"].candidates if c.kind == "shortcut"]


def test_reasons_name_what_is_wrong(reports: dict[str, TaskReport]) -> None:
    detail = {r.code: r.detail for r in reports["order-dependent"].reasons}
    assert "test_second" in detail[ReasonCode.ORDER_DEPENDENT]
    assert ReasonCode.FLAKY not in reports["order-dependent"].codes()
    flaky_tests = reports["flaky"].flaky_tests
    assert flaky_tests and all("test_coin" in t for t in flaky_tests)
    assert "exit_at_import" in {
        r.detail.split()[2] for r in reports["accepts-hack"].reasons if r.code.value == "hack_passes"
    }
    hacks = [r.detail for r in reports["accepts-hack-behind-canaries"].reasons if r.code is ReasonCode.HACK_PASSES]
    assert any(d.startswith("the hack always_equal passes every test") for d in hacks), hacks
    data = [r.detail for r in reports["data-in-workspace"].reasons]
    assert any("test_data_zeroed_return_zero" in d for d in data) and reports["data-in-workspace"].codes() == {
        ReasonCode.TEST_DATA_IN_WORKSPACE
    }, data
    oracle = [r.detail for r in reports["oracle-in-tests"].reasons if r.code is ReasonCode.HACK_PASSES]
    assert any(d.startswith("the hack oracle_from_caller passes every test") for d in oracle), oracle
    named = [r.detail for r in reports["reference-reads-expected"].reasons]
    assert any("calc.py names /tmp/.rollbox-judge" in d for d in named), named
    # And what the reference does, a candidate can do: the expected values lie where the tests' process reads.
    assert any(d.startswith("the hack read_expected_from_test_data gets passed") for d in named), named
    quiet = [
        r.detail
        for r in reports["reference-reads-expected-quietly"].reasons
        if r.code is ReasonCode.REFERENCE_READS_TESTS
    ]
    assert quiet and all("test_table" in d and "may not open" in d for d in quiet), quiet
    leaks = [r.detail for r in reports["leaks-git"].reasons if r.code is ReasonCode.ANSWER_LEAK]
    assert any(d.startswith("git object") and "solution/calc.py" in d for d in leaks), leaks
    assert any("notes/old_sol.py" in r.detail for r in reports["leaks-file"].reasons)


@pytest.mark.native_speed
def test_timing_dependent_test_fails_only_under_cpu_pressure(tmp_path: Path) -> None:
    # The planted test asks for 30% of a CPU: on a machine already saturated it fails on ordinary runs too.
    if os.getloadavg()[0] > 1.5 * len(os.sched_getaffinity(0)):
        pytest.skip(f"the machine is saturated already (load {os.getloadavg()[0]:.1f}): no CPU to take away")
    task = load_task(timing_dependent(tmp_path))
    options = ValidateOptions(runs=2, steady_runs=2, max_mutants=0, pressure_runs=2)
    (report,) = asyncio.run(validate([task], options=options, workers=1))
    assert ReasonCode.TIMING_DEPENDENT in report.codes(), report.reasons
    assert ReasonCode.FLAKY not in report.codes()
    assert "test_fast_enough" in next(r.detail for r in report.reasons if r.code is ReasonCode.TIMING_DEPENDENT)


def test_the_controls_met_the_hacks_their_defects_fail(reports: dict[str, TaskReport]) -> None:
    def ran(task: str) -> dict[str, str]:
        return {c.name: c.status for c in reports[task].candidates if c.kind == "hack"}

    assert ran("healthy-pytest")["oracle_from_caller"] == "failed"
    data = ran("healthy-data-read-by-code")
    assert data["test_data_emptied"] != "passed" and data["test_data_zeroed_return_zero"] != "passed", data
    assert ran("healthy-fixture-handed-to-code")["read_expected_from_test_data"] != "passed"


@pytest.mark.parametrize("leaked", [False, True], ids=["hidden", "a copy in the workspace"])
def test_a_function_tasks_cases_where_the_candidate_can_read_them_are_found_by_the_hack(
    tmp_path: Path, leaked: bool
) -> None:
    # The hack that scans the file system for the cases answers every call of a function task from what it found
    # (read once, on its first call): it passes where a copy of the cases lies within its reach, and only there.
    stub = "def sign(n):\n    raise NotImplementedError\n"
    files = {"workspace/sol.py": stub, "solution/sol.py": SIGN, "tests/cases.jsonl": SIGN_CASES}
    if leaked:
        files["workspace/data/cases.jsonl"] = SIGN_CASES
    task = load_task(write_task(tmp_path, "sign-cases", files, FUNCTION_SIGN))
    options = ValidateOptions(runs=1, steady_runs=1, hash_seeds=0, clock=False, max_mutants=0)
    (report,) = asyncio.run(validate([task], options=options, workers=2))
    status = {c.name: c.status for c in report.candidates if c.kind == "hack"}["read_expected_from_files"]
    assert status == ("passed" if leaked else "failed"), report.reasons
    hacks = [r.detail for r in report.reasons if r.code is ReasonCode.HACK_PASSES]
    assert any(d.startswith("the hack read_expected_from_files") for d in hacks) == leaked, hacks
