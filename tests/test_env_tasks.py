"""Tasks the episode tests share (no tests of its own): a pytest repository task written here, and a HumanEval task."""

from __future__ import annotations

from pathlib import Path

from rollbox.tasks import Task, humaneval_tasks, load_task

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = BUGGY.replace("a - b", "a + b")
VISIBLE = (
    "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n\n\n"
    "def test_zero():\n    assert add(0, 0) == 0\n"
)
HIDDEN = (
    "from calc import add, mul\n\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n\n\n"
    "def test_mul():\n    assert mul(3, 4) == 12\n"
)


def write_calc_task(root: Path, *, toml_extra: str = "") -> Task:
    """A pytest repository task: fix ``add`` in calc.py; visible tests in the workspace, hidden ones in tests/."""
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "workspace" / "calc.py").write_text(BUGGY)
    (root / "workspace" / "test_calc.py").write_text(VISIBLE)
    (root / "tests" / "test_hidden.py").write_text(HIDDEN)
    (root / "solution" / "calc.py").write_text(FIXED)
    (root / "instruction.md").write_text("add() in calc.py subtracts. Make it add.\n")
    (root / "task.toml").write_text(
        'id = "calc"\n\n[grading]\nrunner = "pytest"\n\n'
        '[limits]\ntimeout = "20s"\ncpu_time = "15s"\ndisk = "16M"\npids = 32\n' + toml_extra
    )
    return load_task(root)


def humaneval_task(cache: Path, task_id: str = "HumanEval/0") -> Task:
    """One HumanEval problem as a native function task."""
    return load_task(humaneval_tasks(cache)[task_id])
