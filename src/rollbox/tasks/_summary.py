"""What a task is, at a glance: its runner, limits, runtime, sizes, reference and workspace state, as plain data for
``rollbox tasks list`` and ``rollbox tasks show``."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ._digest import WorkspaceChangedError, verify_workspace
from ._model import FunctionGrading, PytestGrading, ScriptGrading, StdioGrading, Task

__all__ = ["TaskSummary", "WorkspaceState", "summarize_task"]

#: ``ok``: the workspace matches its recorded hash; ``changed``: it does not (the task will not load);
#: ``unrecorded``: task.toml records no hash.
WorkspaceState = Literal["ok", "changed", "unrecorded"]


@dataclass(frozen=True)
class Tree:
    """A directory's size: regular files, and their bytes (links are not followed)."""

    files: int
    bytes: int

    @classmethod
    def of(cls, root: Path | None) -> Tree:
        files = size = 0
        stack = [os.fspath(root)] if root is not None and root.is_dir() else []
        while stack:
            with os.scandir(stack.pop()) as listing:
                for entry in listing:
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
                    elif stat.S_ISREG(st.st_mode):
                        files, size = files + 1, size + st.st_size
        return cls(files, size)


@dataclass(frozen=True)
class TaskSummary:
    """One task, summarized."""

    task: Task
    workspace: Tree
    tests: Tree
    solution: Tree | None
    workspace_state: WorkspaceState
    #: What grading checks, in a few words: "3 cases", "tests/test.sh", "2 fail_to_pass + 5 pass_to_pass".
    checks: str

    def to_json(self) -> dict[str, Any]:
        task, limits = self.task, self.task.limits
        grading: dict[str, Any] = {"runner": _runner(task)}
        for name, value in vars(task.grading).items():
            grading[name] = list(value) if isinstance(value, tuple) else getattr(value, "value", value)
        return {
            "id": task.id,
            "path": str(task.path),
            "grading": grading,
            "checks": self.checks,
            "reward": {name: getattr(value, "value", value) for name, value in vars(task.reward).items()},
            "limits": {**vars(limits), "network": task.network.value},
            "environment": {
                "python": task.environment.python,
                "requirements": list(task.environment.requirements),
                "env": dict(task.environment.env),
                "layer_key": task.environment.layer_key,
            },
            "workspace": {
                "files": self.workspace.files,
                "bytes": self.workspace.bytes,
                "sha256": task.workspace_sha256,
                "state": self.workspace_state,
            },
            "tests": {"files": self.tests.files, "bytes": self.tests.bytes},
            "solution": None if self.solution is None else {"files": self.solution.files, "bytes": self.solution.bytes},
            "metadata": dict(task.metadata),
        }


def _runner(task: Task) -> str:
    return {PytestGrading: "pytest", FunctionGrading: "function", StdioGrading: "stdio", ScriptGrading: "script"}[
        type(task.grading)
    ]


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as f:
            return sum(1 for line in f if line.strip())
    except OSError:
        return 0


def _checks(task: Task) -> str:
    grading = task.grading
    if isinstance(grading, FunctionGrading | StdioGrading):
        parts = [f"{_lines(task.tests / grading.cases)} cases"] if grading.cases else []
        if isinstance(grading, FunctionGrading) and grading.check:
            parts.append(f"tests/{grading.check}")
        return " + ".join(parts)
    if isinstance(grading, PytestGrading):
        if grading.fail_to_pass is None:
            return f"every test of {len(task.test_modules)} modules"
        return f"{len(grading.fail_to_pass)} fail_to_pass + {len(grading.pass_to_pass)} pass_to_pass"
    return f"tests/{grading.script}"


def summarize_task(task: Task) -> TaskSummary:
    """Summarize a loaded task (with or without its workspace verified): sizes, checks and the workspace's state,
    hashed now (cheaply: see :mod:`rollbox.tasks._digest`)."""
    state: WorkspaceState = "unrecorded"
    if task.workspace_sha256 is not None:
        try:
            verify_workspace(task.id, task.path, task.workspace_sha256)
            state = "ok"
        except WorkspaceChangedError:
            state = "changed"
    return TaskSummary(
        task=task,
        workspace=Tree.of(task.workspace),
        tests=Tree.of(task.tests),
        solution=None if task.solution is None else Tree.of(task.solution),
        workspace_state=state,
        checks=_checks(task),
    )
