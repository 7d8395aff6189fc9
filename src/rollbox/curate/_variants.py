"""Variants of a task that validation grades against: its tests in another order, other limits, more cases.

A variant is a copy of the task directory (tests/ copied through links, so that nothing written reaches the
original) with one thing changed, and the same id. Its test ids map back to the original's, so outcomes of
different orders can be compared test by test.

Orders are seeded: seed 0 is the tests' own order, seed 1 the reverse (which puts every test before those it
followed), and seed ``k >= 2`` a shuffle drawn from ``k``. ``pytest`` tasks get a hook that reorders the
collected items appended to tests/conftest.py (made when there is none); ``function`` and ``stdio`` tasks get their
cases file permuted.
"""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
from pathlib import Path

from rollbox.sandbox import Limits
from rollbox.tasks import FunctionGrading, PytestGrading, StdioGrading, Task

__all__ = ["Variant", "copy_task", "limited", "ordered", "with_cases"]

#: Appended to tests/conftest.py: the judge runs the test files it names, so a conftest.py is loaded only from their
#: directories and those above them. A name of its own (pytest takes hooks only from names starting ``pytest_``)
#: with ``specname`` leaves the task's own hooks alone, and ``trylast`` reorders what they collected.
_ORDER_HOOK = """

# rollbox validate: run the collected tests in a seeded order.
import pytest as _rollbox_validate_pytest
import random as _rollbox_validate_random


@_rollbox_validate_pytest.hookimpl(trylast=True, specname="pytest_collection_modifyitems")
def pytest_collection_modifyitems_in_rollbox_validate_order(session, config, items):
    if {seed} == 1:
        items.reverse()
    else:
        _rollbox_validate_random.Random({seed}).shuffle(items)
"""


@dataclasses.dataclass(frozen=True)
class Variant:
    """A task to grade in place of the original, and how its test ids map to the original's."""

    task: Task
    #: The variant's test id -> the original's; ids not in it are the same in both.
    ids: dict[str, str] = dataclasses.field(default_factory=dict)

    def original(self, test_id: str) -> str:
        """The original task's id for the variant's ``test_id``."""
        return self.ids.get(test_id, test_id)


def copy_task(task: Task, root: Path, name: str) -> Path:
    """A copy of the task directory at ``root/name``: links in tests/ followed, the workspace copied as it is."""
    path = root / name
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    for entry in task.path.iterdir():
        target = path / entry.name
        if entry.name == "tests":
            shutil.copytree(entry, target, symlinks=False)
        elif entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, target, symlinks=True)
        else:
            shutil.copy2(entry, target, follow_symlinks=False)
    return path


def _order(count: int, seed: int) -> list[int]:
    indices = list(range(count))
    if seed == 1:
        indices.reverse()
    elif seed >= 2:
        random.Random(seed).shuffle(indices)
    return indices


def ordered(task: Task, seed: int, root: Path) -> Variant:
    """The task with its tests in the order ``seed`` draws (seed 0: the task itself)."""
    grading = task.grading
    if seed == 0 or not isinstance(grading, PytestGrading | FunctionGrading | StdioGrading):
        return Variant(task)
    if isinstance(grading, FunctionGrading) and not grading.cases:
        return Variant(task)
    path = copy_task(task, root, f"order-{seed}")
    variant = dataclasses.replace(task, path=path)
    if isinstance(grading, PytestGrading):
        conftest = path / "tests" / "conftest.py"
        existing = conftest.read_text(encoding="utf-8") if conftest.is_file() else ""
        conftest.write_text(existing + _ORDER_HOOK.format(seed=seed), encoding="utf-8")
        return Variant(variant)
    cases_name = grading.cases
    assert cases_name is not None
    cases = path / "tests" / cases_name
    lines = [line for line in cases.read_text(encoding="utf-8").splitlines() if line.strip()]
    order = _order(len(lines), seed)
    cases.write_text("".join(lines[i] + "\n" for i in order), encoding="utf-8")
    return Variant(variant, {_case_id(grading, new): _case_id(grading, old) for new, old in enumerate(order)})


def _case_id(grading: FunctionGrading | StdioGrading, index: int) -> str:
    return f"{grading.entry_point}[{index}]" if isinstance(grading, FunctionGrading) else f"case-{index}"


def limited(task: Task, limits: Limits) -> Task:
    """The task graded under other limits (same directory)."""
    return dataclasses.replace(task, limits=limits)


def with_cases(task: Task, cases: list[dict[str, object]], root: Path, name: str) -> Task:
    """The task with ``cases`` (JSON-ready records) appended to its cases file (a check-only function task gets
    ``cases.jsonl``)."""
    grading = task.grading
    assert isinstance(grading, FunctionGrading | StdioGrading)
    path = copy_task(task, root, name)
    file = path / "tests" / (grading.cases or "cases.jsonl")
    existing = file.read_text(encoding="utf-8") if file.is_file() else ""
    if existing and not existing.endswith("\n"):
        existing += "\n"
    file.write_text(existing + "".join(json.dumps(case) + "\n" for case in cases), encoding="utf-8")
    if isinstance(grading, FunctionGrading) and not grading.cases:  # a check-only task gets a cases file
        return dataclasses.replace(task, path=path, grading=dataclasses.replace(grading, cases=file.name))
    return dataclasses.replace(task, path=path)
