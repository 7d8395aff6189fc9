"""Answer leaks: which copies of the hidden tests in a workspace give something away."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rollbox.curate import ReasonCode
from rollbox.curate._leaks import find_leaks
from rollbox.curate._reference import Reference
from rollbox.tasks import load_task

STUB = "def double(x):\n    raise NotImplementedError\n"
SOLUTION = "def double(x):\n    return 2 * x\n"
HELPER = "def pairs():\n    return [(1, 2), (3, 6)]\n"  # imported by the tests, shipped in the workspace's docs too
TESTS = """from calc import double
from helper import pairs


def test_double():
    for x, y in pairs():
        assert double(x) == y
"""
CHECKS = "def check(f):\n    assert f(4) == 8\n"


def leaks(root: Path, workspace: dict[str, str]) -> list[str]:
    files = {
        "workspace/calc.py": STUB,
        "solution/calc.py": SOLUTION,
        "tests/test_calc.py": TESTS,
        "tests/helper.py": HELPER,
        "tests/checks.py": CHECKS,
        "tests/expected.json": '{"4": 8}\n',
        "tests/table.py": "CASES = [(4, 8), (5, 10)]\n",
        **{f"workspace/{path}": text for path, text in workspace.items()},
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n')
    task = load_task(root)
    reasons = asyncio.run(find_leaks(task, Reference.of(task)))
    assert all(r.code is ReasonCode.ANSWER_LEAK for r in reasons), reasons
    return [r.detail for r in reasons]


def test_a_support_module_the_workspace_holds_too_is_no_leak(tmp_path: Path) -> None:
    assert leaks(tmp_path, {"docs/helper.py": HELPER}) == []


def test_a_copy_of_anything_that_checks_is_a_leak(tmp_path: Path) -> None:
    copies = {"a.py": TESTS, "b.py": CHECKS, "c.json": '{"4": 8}\n', "d.py": "CASES = [(4, 8), (5, 10)]\n"}
    found = leaks(tmp_path, {f"notes/{name}": text for name, text in copies.items()})
    originals = {"a.py": "test_calc.py", "b.py": "checks.py", "c.json": "expected.json", "d.py": "table.py"}
    for copy, original in originals.items():
        assert any(f"notes/{copy}" in d and f"tests/{original}" in d for d in found), found
