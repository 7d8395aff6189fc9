"""What the adapters share: finding the task a dataset row names, and grading a single completion."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollbox.judge import Verdict, grade
from rollbox.tasks import FunctionGrading, StdioGrading, Task, load_task

__all__ = ["completion_files", "grade_completion", "task_of"]

_CODE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)
_tasks: dict[str, Task] = {}


def task_of(value: Any) -> Task:
    """The task a row names: a Task, a task directory, or a mapping with ``task`` (or ``rollbox_task``) in it.

    Raises:
        ValueError: nothing names a task; the message shows what was given.
        TaskFormatError: the directory is not a valid task.
    """
    if isinstance(value, Task):
        return value
    if isinstance(value, Mapping):
        for key in ("rollbox_task", "task", "task_path"):
            if value.get(key):
                return task_of(value[key])
        raise ValueError(f"no task named: expected a 'task' key holding a task directory, got keys {sorted(value)}")
    if isinstance(value, str | Path):
        key = str(Path(value).resolve())
        if key not in _tasks:
            _tasks[key] = load_task(key)
        return _tasks[key]
    raise ValueError(f"expected a task directory, got {value!r}")


def completion_files(task: Task, completion: str, file: str | None = None) -> dict[str, str]:
    """The workspace files a single completion stands for: its last fenced code block (or the whole text) as
    ``file``, by default the file a function task names (``solution.py`` otherwise)."""
    blocks = _CODE.findall(completion)
    code = blocks[-1] if blocks else completion
    if file is None:
        grading = task.grading
        if isinstance(grading, FunctionGrading):
            file = grading.module
        elif isinstance(grading, StdioGrading) and len(grading.command) > 1 and grading.command[-1].endswith(".py"):
            file = grading.command[-1]
        else:
            file = "solution.py"
    return {file: code}


async def grade_completion(task: Task, completion: str, *, file: str | None = None) -> Verdict:
    """The judge's verdict on one completion as a file of the task's workspace (see :func:`completion_files`)."""
    return await grade(task, completion_files(task, completion, file))
