"""Test generation: a weak task's surviving mutants killed by generated cases, which --fix writes as a new file."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rollbox.curate import Decision, ReasonCode, ValidateOptions, validate
from rollbox.curate._generate import Generated, generate_cases
from rollbox.curate._reference import Reference
from rollbox.sandbox import WarmSandboxes
from rollbox.tasks import Task, load_task

#: Many gradings each; a loaded machine makes them slow.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CLAMP = (
    "def clamp(x: int, lo: int, hi: int) -> int:\n"
    "    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"
)
#: Only values inside the range: every mutant of the two bounds' handling survives.
WEAK_CASES = '{"args": [5, 0, 10], "expected": 5}\n{"args": [3, 0, 10], "expected": 3}\n'


def weak_task(root: Path) -> Path:
    path = root / "weak-clamp"
    for relative, text in {
        "workspace/sol.py": "def clamp(x, lo, hi):\n    raise NotImplementedError\n",
        "solution/sol.py": CLAMP,
        "tests/cases.jsonl": WEAK_CASES,
        "task.toml": '[grading]\nrunner = "function"\nmodule = "sol.py"\nentry_point = "clamp"\n',
    }.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    return path


def test_generated_cases_kill_the_weak_tasks_surviving_mutants_and_fix_writes_them(tmp_path: Path) -> None:
    path = weak_task(tmp_path)
    options = ValidateOptions(runs=1, pressure=False, fix=True)
    (report,) = asyncio.run(validate([load_task(path)], options=options, workers=2))
    # Weak as it was; admitted as --fix left it (the decision is about the task on disk).
    assert report.kill_ratio is not None and report.kill_ratio < 0.6
    assert report.kill_ratio_generated is not None and report.kill_ratio_generated >= 0.6
    assert report.decision is Decision.ADMIT, report.reasons
    survivors_killed = [m for m in report.mutants if m.killed_by_generated]
    assert survivors_killed
    # The old cases file stays; the stronger one holds it and the generated cases, and task.toml points at it.
    assert (path / "tests" / "cases.jsonl").read_text() == WEAK_CASES
    assert report.fixed_file == "tests/cases_strong.jsonl"
    strong = (path / report.fixed_file).read_text().splitlines()
    assert strong[:2] == WEAK_CASES.splitlines() and len(strong) == 2 + report.generated_cases
    for line in strong[2:]:
        case = json.loads(line)
        x, lo, hi = case["args"]
        assert case["expected"] == max(lo, min(x, hi)) if lo <= hi else True  # the reference's own answer
    fixed = load_task(path)
    assert fixed.grading.cases == "cases_strong.jsonl"  # type: ignore[union-attr]
    (again,) = asyncio.run(validate([fixed], options=ValidateOptions(runs=1, pressure=False), workers=2))
    assert again.kill_ratio is not None and again.kill_ratio >= report.kill_ratio_generated - 1e-9
    assert ReasonCode.REFERENCE_FAILS not in again.codes()


def test_without_fix_the_task_is_left_as_it_was(tmp_path: Path) -> None:
    path = weak_task(tmp_path)
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    options = ValidateOptions(runs=1, pressure=False, max_mutants=12)
    (report,) = asyncio.run(validate([load_task(path)], options=options, workers=2))
    assert report.decision is Decision.WEAK and report.fixed_file is None and report.generated_cases > 0
    assert "--fix writes them" in next(r.detail for r in report.reasons if r.code is ReasonCode.WEAK_TESTS)
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before


def function_task(root: Path, name: str, source: str, cases: str, toml: str = "") -> Task:
    path = root / name
    for relative, text in {
        "workspace/sol.py": "def f(x):\n    raise NotImplementedError\n",
        "solution/sol.py": source,
        "tests/cases.jsonl": cases,
        "task.toml": '[grading]\nrunner = "function"\nmodule = "sol.py"\nentry_point = "f"\n' + toml,
    }.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    return load_task(path)


async def generated(task: Task) -> Generated:
    async with WarmSandboxes(size=2) as sandboxes:
        return await generate_cases(task, Reference.of(task), sandboxes=sandboxes)  # type: ignore[arg-type]


def test_an_input_the_reference_hangs_on_is_dropped_alone(tmp_path: Path) -> None:
    """The reference answers every input but one, on which it loops: that input is dropped, and no other (each
    reference answers every input in one run; after a run cut short, another goes on from the input after)."""
    hangs = "def f(x: int) -> int:\n    while x == 3:\n        pass\n    return 2 * x\n"
    limits = '[limits]\ntimeout = "1s"\ncpu_time = "1s"\n'
    task = function_task(tmp_path, "hangs-on-3", hangs, '{"args": [2], "expected": 4}\n', limits)
    found = asyncio.run(generated(task))
    assert found.invalid == 1 and found.contradictory == 0, found
    assert [3] not in [case["args"] for case in found.cases]
    assert len(found.cases) > 20 and all(case["expected"] == 2 * case["args"][0] for case in found.cases)


def test_the_reference_runs_with_the_tasks_variables(tmp_path: Path) -> None:
    """Generation runs the reference in the task's sandboxes, as the judge does: with its [environment]."""
    reads = "import os\n\n\ndef f(x: int) -> int:\n    return x + int(os.environ['OFFSET'])\n"
    env = '[environment]\nenv = { OFFSET = "5" }\n'
    task = function_task(tmp_path, "reads-env", reads, '{"args": [2], "expected": 7}\n', env)
    found = asyncio.run(generated(task))
    assert found.invalid == 0 and found.cases, found
    assert all(case["expected"] == case["args"][0] + 5 for case in found.cases)
