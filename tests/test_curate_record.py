"""A recording run that dies leaves no record, and no record is never evidence: the recorder tells it apart from too
many calls, synthesis sets such a bug aside (never sorts it first as infinitely broad), and the special-case check
names it a check that could not be made (never a pass). Real recording runs in real sandboxes, each of them short."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from rollbox.curate import ReasonCode
from rollbox.curate import _recorder as recorder
from rollbox.curate._evidence import Evidence, measure_evidence, prefer_broad
from rollbox.curate._grader import Grader
from rollbox.curate._reference import Reference
from rollbox.curate._special_cases import check_special_cases
from rollbox.tasks import PytestGrading, Task, load_task

#: Passes its tests, but dies under the recorder's trace on 0 (an exit) and -1 (SIGKILL), as a run cut short would.
DYING = """import os
import signal
import sys


def step(n):
    if sys.gettrace() is not None and n == 0:
        os._exit(3)
    if sys.gettrace() is not None and n == -1:
        os.kill(os.getpid(), signal.SIGKILL)
    return n + 1
"""
BUGGY = DYING.replace("return n + 1", "return n + 2")
TESTS = """from steps import step


def test_one():
    assert step(1) == 2


def test_many():
    assert [step(n) for n in range(1, 5002)] == list(range(2, 5003))


def test_zero():
    assert step(0) == 1


def test_minus():
    assert step(-1) == 0
"""
FILE = "tests/test_steps.py"


def write_task(root: Path, workspace: str) -> Task:
    """A pytest task: ``workspace`` as ``steps.py``, the dying module as the reference."""
    for relative, text in {"workspace/steps.py": workspace, "solution/steps.py": DYING, FILE: TESTS}.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    (root / "task.toml").write_text(f'[grading]\nrunner = "pytest"\nfail_to_pass = ["{FILE}::test_zero"]\n')
    return load_task(root)


def failing(task: Task, test: str) -> Task:
    return dataclasses.replace(task, grading=PytestGrading(fail_to_pass=(f"{FILE}::{test}",), pass_to_pass=()))


def test_the_recorder_tells_a_record_from_too_many_calls_and_from_a_run_that_died(tmp_path: Path) -> None:
    task = write_task(tmp_path / "task", BUGGY)
    reference = Reference.of(task)
    assert reference is not None

    async def record() -> list[recorder.Recording]:
        grader = Grader(workers=2)
        try:
            tests = ("test_one", "test_many", "test_zero", "test_minus")
            return list(
                await asyncio.gather(
                    *(recorder.record_calls(failing(task, t), reference, grader.sandboxes) for t in tests)
                )
            )
        finally:
            await grader.close()

    one, many, exited, killed = asyncio.run(record())
    assert one.status is recorder.RecordStatus.RECORDED and [c.key for c in one.calls] == ['{"n": "1"}']
    assert many.status is recorder.RecordStatus.OVERFLOW and many.calls == ()
    assert exited.status is recorder.RecordStatus.NO_RECORD and exited.calls == ()
    assert "exit code 3" in exited.detail, exited.detail
    assert killed.status is recorder.RecordStatus.NO_RECORD and "SIGKILL" in killed.detail, killed.detail


@dataclasses.dataclass(frozen=True)
class _Bug:
    evidence: Evidence


def test_a_bug_whose_recording_died_is_set_aside_not_taken_for_broad(tmp_path: Path) -> None:
    """The original module is killed on the failing test's input while it is recorded: the inputs are unknown, and
    a bug whose one test gives one input is what a special-case patch passes. The old reading (too many calls to
    record: infinitely broad) kept it, first of all."""
    probe = write_task(tmp_path / "probe", DYING)

    async def measure() -> Evidence:
        grader = Grader(workers=1)
        try:
            return await measure_evidence(probe, "steps.py", [f"{FILE}::test_minus"], grader.sandboxes)
        finally:
            await grader.close()

    evidence = asyncio.run(measure())
    dead, broad = _Bug(evidence), _Bug(Evidence(tests=1, inputs=3))
    assert prefer_broad([dead, broad], 1) == [broad]
    assert prefer_broad([dead], 0) == []
    assert evidence == Evidence(tests=1, inputs=None, recorded=False) and evidence.breadth == 0


def test_a_special_case_check_whose_recording_died_could_not_be_made(tmp_path: Path) -> None:
    """The reference exits on the fail_to_pass test's input under the recorder: no input is known, no patch can be
    written, and that is no pass (it was: no reason at all, the task admitted unchecked)."""
    task = write_task(tmp_path / "task", BUGGY)
    reference = Reference.of(task)
    assert reference is not None

    async def grade(items: object) -> list[object]:
        raise AssertionError(f"no patch can be graded without a record: {items}")

    async def check() -> tuple[list[tuple[ReasonCode, str]], int, int | None]:
        grader = Grader(workers=1)
        try:
            found = await check_special_cases(
                task,
                reference,
                grader=grader,
                grade=grade,  # type: ignore[arg-type]
                scratch=tmp_path / "scratch",
                max_inputs=3,
                fix=True,
            )
        finally:
            await grader.close()
        return [(r.code, r.detail) for r in found.reasons], len(found.candidates), found.inputs

    reasons, candidates, inputs = asyncio.run(check())
    assert [code for code, _ in reasons] == [ReasonCode.VALIDATION_ERROR], reasons
    assert "left no record" in reasons[0][1] and "exit code 3" in reasons[0][1], reasons
    assert candidates == 0 and inputs is None
