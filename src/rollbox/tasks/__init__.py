"""rollbox.tasks: the task model as data, and the loader of the native task format. Runs nothing.

Imports only :mod:`rollbox.sandbox` (for limit types).
"""

from ._errors import TaskFormatError
from ._humaneval import humaneval_tasks
from ._load import load_task
from ._model import (
    Comparator,
    FunctionGrading,
    Grading,
    PytestGrading,
    RewardKind,
    RewardSpec,
    ScriptGrading,
    StdioGrading,
    Task,
)

__all__ = [
    "Comparator",
    "FunctionGrading",
    "Grading",
    "PytestGrading",
    "RewardKind",
    "RewardSpec",
    "ScriptGrading",
    "StdioGrading",
    "Task",
    "TaskFormatError",
    "humaneval_tasks",
    "load_task",
]
