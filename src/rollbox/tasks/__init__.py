"""rollbox.tasks: the task model as data, the loader and writer of the native task format, and importers from
other formats. Runs no candidate code.

Imports only :mod:`rollbox.sandbox` (for limit types).
"""

from ._digest import WorkspaceChangedError, workspace_sha256
from ._environment import Environment
from ._errors import TaskFormatError
from ._humaneval import humaneval_tasks
from ._import import FORMATS, import_tasks
from ._importing import ImportedTask, ImportRefused, ImportReport, ImportSourceError, Refusal
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
from ._write import Files, rehash_task, write_task

__all__ = [
    "FORMATS",
    "Comparator",
    "Environment",
    "Files",
    "FunctionGrading",
    "Grading",
    "ImportRefused",
    "ImportReport",
    "ImportSourceError",
    "ImportedTask",
    "PytestGrading",
    "Refusal",
    "RewardKind",
    "RewardSpec",
    "ScriptGrading",
    "StdioGrading",
    "Task",
    "TaskFormatError",
    "WorkspaceChangedError",
    "humaneval_tasks",
    "import_tasks",
    "load_task",
    "rehash_task",
    "workspace_sha256",
    "write_task",
]
