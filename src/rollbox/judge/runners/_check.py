"""Check-based function grading: the task's own ``check(candidate)``, run where the candidate cannot reach it.

Some assertions cannot be written as cases (tolerances, properties, random inputs, calls compared with calls), so
a function task may name ``check = "check.py"``: a file in tests/ defining ``check(candidate)``. The check runs in
one process of the grading sandbox and the candidate's code in another (see ``_check_driver``): the check's
process forks the candidate's before it reads anything of the check, and is unreadable to it (not dumpable), and
each call crosses between them as plain values. So the check's expectations, its locals, its code and its
comparisons never exist where the candidate's code runs, and its completion record is written on a channel only
the check's process holds, under an id only it knows. Nothing in the candidate's process can be read for an
answer, or subverted to report one: the check passes when, and only when, the values the candidate's function
returns satisfy it.

What it cannot do: a check that passes the candidate something other than a plain value (a callback, an object
of its own), that counts on the candidate changing an argument in place, or that imports the workspace's own
modules, cannot be graded this way (the call raises ``TypeError``, the change is not seen, the import fails);
write such checks as ``pytest`` tasks. Covert channels through
the host (timing) are not closed.

The sandbox is one that has not run this check since its namespaces were made (or is restarted first): what an
in-place reset leaves (pid numbers, IPC ids) would otherwise let a candidate behave differently in a repeat run,
and get a different reward for the same code.
"""

from __future__ import annotations

import ast
import hashlib
import json
import secrets
from typing import Any

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.sandbox import ExecResult, SandboxConfig, SandboxSource, Status
from rollbox.tasks import FunctionGrading, Task, TaskFormatError

from ._channel import ForgedChannel, read_records
from ._drivers import driver_command, install_driver
from ._probe import grading_env, sandbox_config
from ._report import RunnerReport
from ._tree import GradingTree, candidates_room

__all__ = ["run_check"]

_OUTCOMES = {"passed": Outcome.PASSED, "failed": Outcome.FAILED, "error": Outcome.ERROR}


def _read_channel(stdout: str, run_id: str, *, truncated: bool) -> tuple[str | None, dict[str, Any]]:
    """The outcome the run reported, and what else it said (ready, import_error, forged)."""
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
        elif (
            record.get("id") == run_id
            and outcome is None
            and isinstance(record.get("outcome"), str)  # a forged one may be unhashable
            and record["outcome"] in _OUTCOMES
        ):
            outcome = record["outcome"]
        else:
            notes["forged"] = f"the result channel carried a forged or repeated report: {json.dumps(record)[:200]}"
            break
    return outcome, notes


def _imported_modules(source: str) -> list[str]:
    """The absolute modules a check imports anywhere: its process imports them before the candidate's starts."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return sorted(n for n in names if all(part.isidentifier() for part in n.split(".")))


def _report(test_id: str, result: ExecResult, outcome: str | None, notes: dict[str, Any]) -> RunnerReport:
    forged = notes.get("forged")
    return RunnerReport(
        tests=(GradedTest(test_id, _OUTCOMES[outcome] if outcome is not None and not forged else Outcome.MISSING),),
        run_status=result.status,
        crashed="import_error" in notes or outcome is None,
        tampered=forged is not None,
        detail=forged,
        cpu_s=result.cpu_s,
        peak_memory_bytes=result.peak_memory_bytes or 0,
    )


async def run_check(tree: GradingTree, task: Task, grading: FunctionGrading, sandboxes: SandboxSource) -> RunnerReport:
    """Run the task's check against the candidate whose grading tree is ``tree``.

    The run takes a sandbox from ``sandboxes`` that has not run this check since its namespaces were made (or
    restarts one that has), which then holds ``tree`` as it is now; ``tree``'s files must not change meanwhile
    (the judge's own copy). A failure to set it up is rollbox's (``infra_error``), never the candidate's doing. The one
    graded test is ``ENTRY_POINT[check]``, with the outcome of the check's completion record (``missing`` without
    one).

    Raises:
        OSError: ``tree`` does not fit a sandbox (ENOSPC and the like: the candidate's doing), or cannot be read.
    """
    test_id = f"{grading.entry_point}[check]"
    if grading.check is None:
        raise ValueError(f"run_check needs a task with a check; {task.id} has none")
    path = task.tests / grading.check
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read the check: {exc}") from exc
    run_id = secrets.token_hex(16)
    mark = "rollbox.check:" + hashlib.sha256(source.encode()).hexdigest()
    async with sandboxes.sandboxes(
        1, sandbox_config(SandboxConfig(limits=task.limits, network=task.network, workspace=tree.base)), avoid=mark
    ) as (box,):
        if mark in box.history:
            await box.reset(fresh=True)
        box.history.add(mark)
        await tree.lay(box)
        with candidates_room(box):  # laid after the tree, in the room it left
            driver = await install_driver(box, f"/tmp/.rollbox-check-{secrets.token_hex(8)}", "_check_driver.py")
        imports = _imported_modules(source)
        command, warm = driver_command(box, driver, f"/workspace/{grading.module}", grading.entry_point, *imports)
        request = json.dumps({"id": run_id, "source": source})
        result = await box.exec(command, stdin=request, env=grading_env(), warm_python=warm)
    if result.status is Status.INFRA_ERROR:
        return RunnerReport(
            tests=(GradedTest(test_id, Outcome.MISSING),), run_status=result.status, detail=result.error
        )
    outcome, notes = _read_channel(result.stdout_text, run_id, truncated=result.stdout_truncated)
    if "ready" not in notes and "forged" not in notes and result.status in (Status.OK, Status.NONZERO_EXIT):
        # The driver died before any code of the task or the candidate ran: that is rollbox's failure.
        detail = f"the check driver failed before the candidate's code ran: {result.stderr_text[-2000:]}"
        return RunnerReport(tests=(GradedTest(test_id, Outcome.MISSING),), run_status=Status.INFRA_ERROR, detail=detail)
    return _report(test_id, result, outcome, notes)
