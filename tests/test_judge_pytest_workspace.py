"""Repository tests (``[grading] tests_in_workspace = true``), for real: a small package with its own conftest and
pytest configuration, a bug, the fix as solution/, and hidden tests that replace a test file of the workspace;
graded by the ids the repository's pytest gives (as SWE-bench lists them), with the oracle out of reach."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.tasks import Task, load_task

pytestmark = pytest.mark.slow

BUGGY = textwrap.dedent("""
    def total(items, catalog):
        return sum(catalog[item] for item in items) - 1


    def discount(amount, percent):
        return amount * (100 - percent) // 100
""")
FIXED = BUGGY.replace(" - 1\n", "\n")
WORKSPACE = {
    # Only this configuration collects check_* functions: grading must use it, not the judge's own.
    "pyproject.toml": '[project]\nname = "shop"\n\n[tool.pytest.ini_options]\npython_functions = "test_* check_*"\n',
    "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef catalog():\n    return {'apple': 3, 'pear': 5}\n",
    "shop/__init__.py": "",
    "shop/prices.py": BUGGY,
    "tests/test_prices.py": (
        "from shop.prices import discount\n\n\ndef test_discount():\n    assert discount(100, 10) == 90\n"
    ),
    "tests/test_other.py": "def test_other(catalog):\n    assert catalog['apple'] == 3\n",
}
HIDDEN = textwrap.dedent("""
    import pytest

    from shop.prices import discount, total


    def check_total(catalog):
        assert total(["apple", "pear"], catalog) == 8


    @pytest.mark.parametrize("items, expected", [(["apple"], 3), (["pear", "pear"], 10)])
    def test_total_cases(catalog, items, expected):
        assert total(items, catalog) == expected


    def test_discount():
        assert discount(100, 10) == 90
""")
F2P = [
    "tests/test_prices.py::check_total",
    "tests/test_prices.py::test_total_cases[items0-3]",
    "tests/test_prices.py::test_total_cases[items1-10]",
]
P2P = ["tests/test_prices.py::test_discount", "tests/test_other.py::test_other"]


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("shop")
    write(root / "workspace", WORKSPACE)
    write(root / "tests", {"tests/test_prices.py": HIDDEN})
    write(root / "solution", {"shop/prices.py": FIXED})
    quoted = ", ".join(f'"{i}"' for i in F2P), ", ".join(f'"{i}"' for i in P2P)
    (root / "task.toml").write_text(
        f'[grading]\nrunner = "pytest"\ntests_in_workspace = true\nfail_to_pass = [{quoted[0]}]\n'
        f'pass_to_pass = [{quoted[1]}]\n[limits]\ntimeout = "30s"\ncpu_time = "20s"\n'
    )
    return load_task(root)


def grade_files(task: Task, files: dict[str, str]) -> Verdict:
    return asyncio.run(grade(task, files))


def test_the_fix_passes_every_test_by_the_repositorys_own_ids(task: Task) -> None:
    verdict = grade_files(task, {"shop/prices.py": FIXED})
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert [t.id for t in verdict.tests] == [*F2P, *P2P]


def test_the_bug_fails_its_tests_and_keeps_the_others(task: Task) -> None:
    verdict = grade_files(task, {})
    outcomes = {t.id: t.outcome.value for t in verdict.tests}
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
    assert [i for i, o in outcomes.items() if o == "passed"] == P2P, outcomes


def test_the_candidates_configuration_and_tests_are_dropped(task: Task) -> None:
    # Its own pyproject would stop check_* from being collected, its conftest would change the catalog, and its
    # edit of the test file the hidden tests replace would pass anything: none of them is applied.
    verdict = grade_files(
        task,
        {
            "shop/prices.py": FIXED,
            "pyproject.toml": '[project]\nname = "shop"\n\n[tool.pytest.ini_options]\naddopts = "-k discount"\n',
            "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef catalog():\n    return {}\n",
            "tests/test_prices.py": "def check_total():\n    pass\n",
        },
    )
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    dropped = {f["path"] for f in verdict.flags if f["code"].endswith("_dropped")}
    assert dropped == {"pyproject.toml", "conftest.py", "tests/test_prices.py"}, verdict.flags


#: The bug left in, and every answer read from the calling test instead: its locals (the parametrize column), the
#: constant its bytecode loads after the call, or its source line through linecache.
READER = textwrap.dedent("""
    import ast, dis, linecache, sys


    def _read(frame):
        for key, value in frame.f_locals.items():
            if key == "expected" and type(value) is int:
                return value
        after = [i for i in dis.get_instructions(frame.f_code) if i.offset > frame.f_lasti]
        for ins in after[:3]:
            if ins.opname == "LOAD_CONST" and type(ins.argval) is int:
                return ins.argval
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        try:
            return ast.literal_eval(line.split("==")[1].strip())
        except (IndexError, ValueError, SyntaxError):
            return None


    def total(items, catalog):
        found = _read(sys._getframe(1))
        return found if found is not None else sum(catalog[item] for item in items) - 1


    def discount(amount, percent):
        return amount * (100 - percent) // 100
""")


def test_reading_the_hidden_tests_from_the_repository_earns_nothing(task: Task) -> None:
    verdict = grade_files(task, {"shop/prices.py": READER})
    assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, verdict
    won = {t.id for t in verdict.tests if t.outcome.value == "passed"}
    assert won == set(P2P), won
