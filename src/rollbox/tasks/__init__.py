"""rollbox.tasks: the task model as data, the loader and writer of the native task format, importers from other
formats, and the workspace's integrity (its hash, scrubbed repositories, the audit for answers).

Runs no candidate's code: the Harbor importer runs a task's own reference (solve.sh) in a sandbox, and the
repository tools run git. Imports only :mod:`rollbox.sandbox`.
"""

from ._audit import AuditFinding, AuditReport, audit_task
from ._digest import WorkspaceChangedError, workspace_sha256
from ._environment import Environment
from ._errors import TaskFormatError
from ._find import find_tasks, load_tasks
from ._git import GitError
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
from ._scrub import ScrubError, ScrubReport, scrub_repository
from ._summary import TaskSummary, summarize_task
from ._write import Files, rehash_task, write_task

__all__ = [
    "FORMATS",
    "AuditFinding",
    "AuditReport",
    "Comparator",
    "Environment",
    "Files",
    "FunctionGrading",
    "GitError",
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
    "ScrubError",
    "ScrubReport",
    "StdioGrading",
    "Task",
    "TaskFormatError",
    "TaskSummary",
    "WorkspaceChangedError",
    "audit_task",
    "find_tasks",
    "humaneval_tasks",
    "import_tasks",
    "load_task",
    "load_tasks",
    "rehash_task",
    "scrub_repository",
    "summarize_task",
    "workspace_sha256",
    "write_task",
]
