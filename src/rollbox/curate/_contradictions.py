"""Contradictory cases: one input, two different expected outputs. No solution can pass both."""

from __future__ import annotations

import json

from rollbox.tasks import Comparator, FunctionGrading, StdioGrading, Task, TaskFormatError
from rollbox.tasks._cases import load_function_cases, load_stdio_cases
from rollbox.tasks._values import encode

from ._reasons import Reason, ReasonCode

__all__ = ["contradictions"]


def contradictions(task: Task) -> list[Reason]:
    """A ``contradictory_cases`` reason for each input that the task's cases expect different outputs for.

    ``stdio`` cases compared by a checker may have several right outputs, so they are never contradictory.
    """
    grading = task.grading
    seen: dict[str, tuple[int, str]] = {}
    found: list[Reason] = []
    try:
        if isinstance(grading, FunctionGrading) and grading.cases:
            keyed = [
                (json.dumps(case.inputs(), sort_keys=True), json.dumps([encode(case.expected), case.compare]))
                for case in load_function_cases(task.tests / grading.cases)
            ]
            name = grading.entry_point
        elif isinstance(grading, StdioGrading) and grading.comparator is not Comparator.CHECKER:
            exact = grading.comparator is Comparator.EXACT
            keyed = [
                (case.input, case.output if exact else " ".join(case.output.split()))
                for case in load_stdio_cases(task.tests / grading.cases)
            ]
            name = "case"
        else:
            return []
    except TaskFormatError as exc:
        return [Reason(ReasonCode.CONTRADICTORY_CASES, f"the cases cannot be read: {exc}")]
    for index, (inputs, expected) in enumerate(keyed):
        first = seen.setdefault(inputs, (index, expected))
        if first[1] != expected:
            found.append(
                Reason(
                    ReasonCode.CONTRADICTORY_CASES,
                    f"cases {first[0]} and {index} give {name} the same input {inputs[:120]} but expect "
                    f"different outputs",
                )
            )
    return found
