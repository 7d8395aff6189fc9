"""Validate jobs: curate's validation of one task each, through the scheduler. A healthy task is admitted, a task
whose reference is wrong rejected with curate's reason code; validation that the host cannot carry out is retried,
then completes as infra_error; invalid options are refused at submission; ``rollbox run --validate``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollbox.curate import ValidateOptions
from rollbox.scheduler import (
    Capacity,
    JobSpec,
    JobState,
    JobStore,
    LocalWorker,
    PayloadError,
    RetryPolicy,
    Scheduler,
    validate_payload,
)
from scheduler_helpers import sync
from test_scheduler_cli import lines, rollbox
from test_validate_planted import FUNCTION_SIGN, healthy_function, write_task, wrong_reference

#: Enough to decide both tasks, little enough for a loaded machine: no pressure phase, few mutants.
LEAN = ValidateOptions(runs=2, reruns=1, max_mutants=6, pressure=False, generate=False)


@pytest.mark.slow
@sync
async def test_a_healthy_task_is_admitted_a_broken_one_rejected_and_a_host_failure_retried(tmp_path: Path) -> None:
    healthy, broken = healthy_function(tmp_path), wrong_reference(tmp_path)
    # A Python this machine does not have: every grading is the host's failure (infra_error), never the task's.
    absent = write_task(
        tmp_path,
        "absent-python",
        {"workspace/sol.py": "def sign(n):\n    pass\n", "solution/sol.py": "def sign(n):\n    return 0\n"},
        FUNCTION_SIGN + '\n[environment]\npython = "3.2"\n',
    )
    (absent / "tests" / "cases.jsonl").write_text('{"args": [0], "expected": 0}\n')
    worker = LocalWorker(capacity=Capacity(cpus=2, memory_bytes=8 * 2**30), grace_s=1)
    store = JobStore(tmp_path / "jobs.db")
    async with Scheduler(store, workers=[worker], home=tmp_path, retry=RetryPolicy(base_s=0.1, max_s=0.2)) as s:
        with pytest.raises(PayloadError, match=r"invalid options in a validate job.*runs"):
            s.submit(JobSpec(kind="validate", payload={**validate_payload(healthy), "options": {"runs": 0}}))
        with pytest.raises(PayloadError, match="'workers' must be"):
            s.submit(JobSpec(kind="validate", payload={**validate_payload(healthy), "workers": 0}))
        jobs = s.submit(
            [
                JobSpec(kind="validate", payload=validate_payload(task, LEAN, cache=False), max_attempts=2)
                for task in (healthy, broken, absent)
            ]
        )
        await s.run()
    results = [store.result(job.id) for job in jobs]
    assert all(r is not None and r.state is JobState.COMPLETED for r in results)
    admitted, rejected, failed = results
    assert admitted is not None and rejected is not None and failed is not None
    assert (admitted.status, admitted.reward, admitted.output["decision"], admitted.output["reasons"]) == (
        "admit", None, "admit", [],
    )  # fmt: skip
    assert (
        admitted.output["task_id"] == "healthy-function" and 0 < len(admitted.output["mutants"]) <= 2 * 6
    )  # branch removals and the others, 6 of each at most
    assert (rejected.status, rejected.output["decision"]) == ("reject", "reject")
    assert "reference_fails" in {reason["code"] for reason in rejected.output["reasons"]}
    # Validation graded: every job passed through grading.
    for job in jobs[:2]:
        assert [t.target for t in store.transitions(job.id)][-2:] == [JobState.GRADING, JobState.COMPLETED]
        assert [a.outcome for a in store.attempts(job.id)] == ["ok"]
    assert (failed.status, failed.reward) == ("infra_error", None)
    assert "validation of task absent-python failed" in str(failed.error)
    assert [a.outcome for a in store.attempts(jobs[2].id)] == ["infra_error", "infra_error"]
    store.close()


@pytest.mark.slow
def test_rollbox_run_validate_writes_each_decision_with_its_reasons_and_resumes(tmp_path: Path) -> None:
    # A task whose reference is wrong: rejected before any mutant or pressure run, so this stays quick.
    wrong_reference(tmp_path / "tasks")
    home = tmp_path / "home"
    done = rollbox(home, "run", str(tmp_path / "tasks"), "--validate", "--run-id", "v")
    assert done.returncode == 0, done.stderr  # a rejected task is a result, not a failed run
    assert "1/1" in done.stderr and "failed 1" in done.stderr and "infra 0" in done.stderr
    (line,) = lines(home, "v")
    assert (line["task_id"], line["kind"], line["state"], line["status"], line["reward"]) == (
        "wrong-reference", "validate", "completed", "reject", None,
    )  # fmt: skip
    assert "reference_fails" in line["reasons"]  # type: ignore[operator]
    again = rollbox(home, "run", str(tmp_path / "tasks"), "--validate", "--run-id", "v")
    assert again.returncode == 0 and lines(home, "v") == [line]  # not validated again
    refused = rollbox(home, "run", str(tmp_path / "tasks"), "--validate", "--samples", "2")
    assert refused.returncode == 2 and "leave out --samples" in refused.stderr
