"""rollbox.judge: grading whose rewards cannot be gamed.

Grades in a fresh sandbox from the pristine task plus only the candidate's allowed changes, with a runner
configuration the candidate cannot influence and a result channel it cannot write, and never mistakes its own
failures for the candidate's. Imports :mod:`rollbox.tasks` and :mod:`rollbox.sandbox`.
"""

from ._batch import grade_batch
from ._grade import Solution, grade
from ._runtime import runtime_spec, sandboxes_image, task_image, task_sandboxes
from ._verdict import GradedTest, Outcome, Verdict, VerdictStatus, compute_reward
from .integrity._workspace import check_solution_path

__all__ = [
    "GradedTest",
    "Outcome",
    "Solution",
    "Verdict",
    "VerdictStatus",
    "check_solution_path",
    "compute_reward",
    "grade",
    "grade_batch",
    "runtime_spec",
    "sandboxes_image",
    "task_image",
    "task_sandboxes",
]
