"""The planted-defect suite: tasks broken on purpose in each way validation must catch, each flagged with the right
reason, beside healthy tasks of every runner, which are admitted."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import pytest

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


HEALTHY = (healthy_pytest, healthy_function, healthy_stdio, healthy_data_read_by_code, healthy_fixture_handed_to_code)
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
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TaskReport]:
    if shutil.which("git") is None:
        pytest.skip("git is needed to plant a leak in a repository's history")
    root = tmp_path_factory.mktemp("planted")
    paths = [make(root) for make in (*HEALTHY, *PLANTED)]
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
