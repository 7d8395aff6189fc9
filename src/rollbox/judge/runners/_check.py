"""Check-based function grading: the task's own ``check(candidate)``, run in the candidate's process, with canaries.

Some assertions cannot be written as cases (tolerances, truthiness, properties, randomized inputs), so a
function task may name ``check = "check.py"``: a file in tests/ defining ``check(candidate)``. It has to run in
the candidate's process, where the candidate can reach everything (its frames, its code, the result channel), so
no single run is trusted. The check is graded by comparing runs:

- variants: the real check, and up to two must-fail canaries: copies with one expectation changed (a literal
  replaced by another of its type, sign and count of significant digits; a tolerance's target moved the same way;
  else the one opposite assertion: ``is True``/``is False``, ``==``/``!=``, ``<``/``>=``, ``X``/``not X``). All
  are printed by :func:`ast.unparse` alike and carry fresh random ids;
- each variant runs alone, in random order, in a sandbox of its own, all borrowed together so that no two
  variants of one grading ever share a sandbox, and each holding the same files (the tree as it was before any
  of the candidate's code ran), through a driver process (a fork of the sandbox's pre-started Python where one
  runs) that knows only that variant and its id. No run sees another variant, nor anything left by another run
  (files, processes, IPC, pids, counters). Warm sandboxes are emptied in place between users, which leaves a few bits
  in the kernel's counters (pid numbers, IPC ids, inode numbers); as the real check's text is the same in every
  grading of a task, a sandbox that has run a variant of this check since its namespaces were made is restarted
  (``reset(fresh=True)``) before it runs another;
- ``tampered``: a canary passed while the real check passed, or a run's channel carried a forged or repeated
  record, or a builtin or a name the check relies on was rebound. A canary passed while the real check did not
  pass is not counted: honest code that is wrong exactly where a canary was flipped passes that canary;
- every value the candidate returns is round-tripped through the strict value codec before the check sees it.

Guaranteed: a candidate that subverts whatever check runs in its process (rewriting the check's code, forging
its completion record and exiting) passes the canaries too, and is ``tampered`` whenever the check has one.
Honest code that passes the real check fails every canary: only assertions that certainly run when the check
completes (top-level ones, and those directly in ``for`` loops over a non-empty constant range) are mutated, and
a mutated expectation excludes the original. Missing records are never passes.

Not guaranteed: a check with no such assertion that involves the candidate gets no canary, and its pass is the
driver's completion record alone, which a candidate can forge. A canary differs from the real check only in one
expectation, so a candidate that knows it (a public benchmark's check) or guesses it (a flipped comparison
reads less natural) can pass the real check alone. A candidate that subverts each run at random, independently,
keeps a small positive expected reward under a -1 penalty: p(2(1-p)^n - 1), at most 1/8 with one canary and
about 1/15 with two. Covert channels between runs through the host (timing, page cache) are not closed.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.sandbox import ExecResult, Sandbox, SandboxSource, Status
from rollbox.tasks import FunctionGrading, Task, TaskFormatError

from ._channel import GRADING_ENV, ForgedChannel, read_records
from ._check_variants import CheckVariant, check_variants, imported_modules
from ._drivers import driver_command, install_driver
from ._report import RunnerReport

__all__ = ["run_check"]

_OUTCOMES = {"passed": Outcome.PASSED, "failed": Outcome.FAILED, "error": Outcome.ERROR}
_LIMITS = (Status.TIMEOUT, Status.CPU_TIME_LIMIT, Status.MEMORY_LIMIT)


@dataclass(frozen=True)
class _Run:
    """One variant's run: its result, the outcome its completion record gave, and what else its channel said."""

    variant: CheckVariant
    result: ExecResult
    outcome: str | None
    notes: dict[str, Any]


def _read_channel(stdout: str, variant_id: str, *, truncated: bool) -> tuple[str | None, dict[str, Any]]:
    """The outcome one run reported for its variant, and what else it said (ready, import_error, forged)."""
    outcome: str | None = None
    notes: dict[str, Any] = {}
    try:
        records = read_records(stdout, truncated=truncated)
    except ForgedChannel as exc:
        notes["forged"] = str(exc)
        records = []
    for record in records:
        if record.get("ready") is True and "ready" not in notes:
            notes["ready"] = True
        elif "import_error" in record and "import_error" not in notes:
            notes["import_error"] = record["import_error"]
        elif "integrity" in record:
            notes["forged"] = f"the check's environment was changed: {record['integrity']}"[:500]
            break
        elif (
            record.get("id") == variant_id
            and outcome is None
            and isinstance(record.get("outcome"), str)  # a forged one may be unhashable
            and record["outcome"] in _OUTCOMES
        ):
            outcome = record["outcome"]
        else:
            notes["forged"] = f"the result channel carried a forged or repeated report: {json.dumps(record)[:200]}"
            break
    return outcome, notes


async def _run_variant(box: Sandbox, tree: Path, variant: CheckVariant, watch: list[str], args: list[str]) -> _Run:
    """Run one variant in ``box``, given to this variant alone, after writing ``tree`` and the driver (``args[0]``,
    the driver's path, then its arguments)."""
    await box.write_tree(tree)
    await install_driver(box, args[0].rsplit("/", 1)[0], "_check_driver.py")
    request = {"id": variant.id, "source": variant.source, "watch": watch}
    command, warm = driver_command(box, *args)
    result = await box.exec(command, stdin=json.dumps(request), env=GRADING_ENV, warm_python=warm)
    return _Run(variant, result, *_read_channel(result.stdout_text, variant.id, truncated=result.stdout_truncated))


def _settled(runs: Sequence[_Run]) -> bool:
    """Whether the runs so far decide the grade, so that the variants left need not run."""
    last = runs[-1]
    if "forged" in last.notes:
        return True
    real = next((r for r in runs if not r.variant.canary), None)
    if real is None:
        # A canary at a limit before the real check ran stops it: honest code runs a canary no longer than it.
        return last.result.status in _LIMITS
    return real.outcome != "passed" or any(r.variant.canary and r.outcome == "passed" for r in runs)


def _report(test_id: str, runs: Sequence[_Run]) -> RunnerReport:
    real = next((r for r in runs if not r.variant.canary), None)
    deciding = real or runs[-1]
    forged = next((r.notes["forged"] for r in runs if "forged" in r.notes), None)
    canaries = sum(r.variant.canary and r.outcome == "passed" for r in runs)
    if forged is None and real is not None and real.outcome == "passed" and canaries:
        forged = f"{canaries} must-fail canary check(s) passed, as did the real check"
    outcome = _OUTCOMES[real.outcome] if real is not None and real.outcome is not None else Outcome.MISSING
    return RunnerReport(
        tests=(GradedTest(test_id, outcome),),
        run_status=deciding.result.status,
        crashed="import_error" in deciding.notes or deciding.outcome is None,
        tampered=forged is not None,
        detail=forged,
        # The candidate's cost is the real check's run: canaries stop at a random assertion, so counting them
        # would give the same code a different efficiency reward each time.
        cpu_s=deciding.result.cpu_s,
        peak_memory_bytes=deciding.result.peak_memory_bytes or 0,
    )


async def run_check(tree: Path, task: Task, grading: FunctionGrading, sandboxes: SandboxSource) -> RunnerReport:
    """Run the task's check and its canaries against the candidate whose graded tree is the host directory ``tree``.

    Each variant runs in a sandbox of its own from ``sandboxes`` (all borrowed together, so no two variants ever
    share one; those that have not run a variant of this check since their namespaces were made are taken first,
    and one that has is restarted before it runs another), which then holds ``tree`` as it is now; ``tree`` must
    not change meanwhile (the judge's own copy). A failure to set one up is rollbox's (``infra_error``), never the
    candidate's doing. The one graded test is ``ENTRY_POINT[check]``, with the outcome of the real check's
    completion record (``missing`` without one).
    Variants left to run once the grade is decided (the real check did not pass, a canary passed with it, a
    forgery) are skipped, and so are all of them when a canary hits a limit before the real check ran.

    Raises:
        OSError: ``tree`` does not fit a sandbox (ENOSPC and the like: the candidate's doing), or cannot be read.
    """
    test_id = f"{grading.entry_point}[check]"
    missing = (GradedTest(test_id, Outcome.MISSING),)
    if grading.check is None:
        raise ValueError(f"run_check needs a task with a check; {task.id} has none")
    path = task.tests / grading.check
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read the check: {exc}") from exc
    variants, watch = check_variants(source), imported_modules(source)
    driver = f"/tmp/.rollbox-check-{secrets.token_hex(8)}/driver.pyc"
    args = [driver, f"/workspace/{grading.module}", grading.entry_point]
    runs: list[_Run] = []
    # The real check's text is the same in every grading of this task (canaries are random): a run that found
    # it in a sandbox's counters (pid numbers, IPC ids), left there by an earlier run of one, could tell it apart.
    mark = "rollbox.check:" + hashlib.sha256(source.encode()).hexdigest()
    async with sandboxes.sandboxes(len(variants), limits=task.limits, network=task.network, avoid=mark) as boxes:
        for box in boxes:
            if mark in box.history:
                await box.reset(fresh=True)
            box.history.add(mark)
        for variant, box in zip(variants, boxes, strict=True):
            run = await _run_variant(box, tree, variant, watch, args)
            if run.result.status is Status.INFRA_ERROR:
                return RunnerReport(tests=missing, run_status=Status.INFRA_ERROR, detail=run.result.error)
            if (
                "ready" not in run.notes
                and "forged" not in run.notes
                and run.result.status in (Status.OK, Status.NONZERO_EXIT)
            ):
                # The driver died before any code of the task or the candidate ran: that is rollbox's failure.
                detail = f"the check driver failed before the candidate's code ran: {run.result.stderr_text[-2000:]}"
                return RunnerReport(tests=missing, run_status=Status.INFRA_ERROR, detail=detail)
            runs.append(run)
            if _settled(runs):
                break
    return _report(test_id, runs)
