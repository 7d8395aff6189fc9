"""The special-case check of a bug-fix task: record the fail_to_pass tests' calls, grade the special-case patches
(``_shortcut``), and, when one passes, reject the task or, with ``fix``, strengthen it with differential tests
(``_differential``) that the reference passes twice and every passing patch fails.

Only ``pytest`` tasks that list ``fail_to_pass`` are checked: a bug-fix task names its failing tests (as
synthesis's instructions do), so its agent knows their inputs; a task whose hidden tests are all it has to go by
gives no input away, and neither do the differential tests, which no instruction names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rollbox.judge import Verdict
from rollbox.tasks import PytestGrading, Task

from ._differential import MODULE, differential_cases, hidden_module
from ._grader import Grader
from ._reasons import Reason, ReasonCode
from ._recorder import Call, RecordStatus, record_calls
from ._reference import Reference
from ._report import CandidateResult
from ._shortcut import Shortcut, distinct_inputs, shortcuts
from ._toml import set_key, toml_list
from ._variants import copy_task
from ._verdicts import passed

__all__ = ["SpecialCases", "check_special_cases"]

Grade = Callable[[Sequence[tuple[Task, Mapping[str, bytes]]]], Awaitable[list[Verdict]]]


@dataclass
class SpecialCases:
    """What the check found."""

    reasons: list[Reason] = field(default_factory=list)
    candidates: list[CandidateResult] = field(default_factory=list)
    #: Distinct inputs the fail_to_pass tests gave the code they call (``None``: not recorded).
    inputs: int | None = None
    #: The differential tests written into the task (``fix``), and how many.
    fixed_file: str | None = None
    cases: int = 0


async def check_special_cases(
    task: Task, reference: Reference, *, grader: Grader, grade: Grade, scratch: Path, max_inputs: int, fix: bool
) -> SpecialCases:
    """Run the check (see the module's docstring)."""
    found = SpecialCases()
    grading = task.grading
    if not (isinstance(grading, PytestGrading) and grading.fail_to_pass):
        return found
    try:
        async with grader.slot():
            recording = await record_calls(task, reference, grader.sandboxes)
    except RuntimeError as exc:
        found.reasons.append(Reason(ReasonCode.VALIDATION_ERROR, str(exc)))
        return found
    if recording.status is RecordStatus.NO_RECORD:  # no inputs, so no patch to try: the check could not be made
        found.reasons.append(Reason(ReasonCode.VALIDATION_ERROR, recording.detail))
        return found
    if recording.status is RecordStatus.OVERFLOW:  # many inputs: no table of a few of them passes
        return found
    # The differential tests are hidden and named nowhere: the agent knows their inputs no more than any other's.
    calls = [c for c in recording.calls if not c.test.startswith(f"tests/{MODULE}::")]
    found.inputs = distinct_inputs(calls)
    patches = shortcuts(task, reference, calls, max_inputs)
    passing: list[tuple[Shortcut, Verdict]] = []
    for patch, verdict in zip(patches, await grade([(task, p.files) for p in patches]), strict=True):
        found.candidates.append(
            CandidateResult(name=patch.name, kind="shortcut", status=verdict.status.value, reward=verdict.reward)
        )
        if passed(verdict):
            passing.append((patch, verdict))
    if not passing:
        return found
    if fix and not grading.tests_in_workspace:
        try:
            patched = [p for p, _ in passing]
            if await _strengthen(
                task, reference, calls, patched, grader=grader, grade=grade, scratch=scratch, found=found
            ):
                return found
        except RuntimeError as exc:
            found.reasons.append(Reason(ReasonCode.VALIDATION_ERROR, str(exc)))
    for patch, verdict in passing:
        found.reasons.append(
            Reason(
                ReasonCode.SHORTCUT_PASSES,
                f"the special-case patch {patch.name} passes every test ({verdict.total}): the starting workspace, "
                f"its bug left in place, with {patch.inputs} input(s) the fail_to_pass tests give answered from a "
                f"table (e.g. {patch.example})" + ("" if fix else "; --fix tries differential tests"),
            )
        )
    return found


async def _strengthen(
    task: Task,
    reference: Reference,
    calls: Sequence[Call],
    patches: list[Shortcut],
    *,
    grader: Grader,
    grade: Grade,
    scratch: Path,
    found: SpecialCases,
) -> bool:
    """Write differential tests into the task when the reference passes them twice and every patch fails them."""
    grading = task.grading
    assert isinstance(grading, PytestGrading) and grading.fail_to_pass is not None
    async with grader.slot():
        cases = await differential_cases(task, reference.files, calls, grader.sandboxes)
    if not cases:
        return False
    ids = [f"tests/{MODULE}::test_differential[case{i}]" for i in range(len(cases))]
    source = hidden_module(cases)
    path = copy_task(task, scratch, "differential")
    (path / "tests" / MODULE).write_text(source, encoding="utf-8")
    fail_to_pass = [*grading.fail_to_pass, *ids]
    variant = dataclasses.replace(
        task, path=path, grading=dataclasses.replace(grading, fail_to_pass=tuple(fail_to_pass))
    )
    verdicts = await grade([(variant, reference.files)] * 2 + [(variant, p.files) for p in patches])
    if not all(passed(v) for v in verdicts[:2]) or any(passed(v) for v in verdicts[2:]):
        return False
    (task.tests / MODULE).write_text(source, encoding="utf-8")
    set_key(task.path / "task.toml", "grading", "fail_to_pass", toml_list(fail_to_pass))
    found.fixed_file, found.cases = f"tests/{MODULE}", len(cases)
    return True
