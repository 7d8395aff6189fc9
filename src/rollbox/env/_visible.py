"""The task's visible tests: run for the agent in its own sandbox (``run_tests``), and graded by the judge for
shaped rewards.

``run_tests`` runs the pristine visible tests (copies written anew for each call, outside /workspace) against the
agent's workspace, with a configuration of rollbox's: what the agent did to its copies of the tests, or to pytest's
configuration in /workspace, changes nothing. Its output is only feedback: the agent controls its sandbox.

Shaped rewards therefore never come from there. They are the visible tests' pass rate as the judge grades it, in a
fresh sandbox, from the agent's workspace exported as for the final verdict: a task made of the visible tests
(``tests/`` holding them, the same workspace, reward ``pass_rate``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from rollbox.judge import Verdict, VerdictStatus
from rollbox.sandbox import ExecResult, Sandbox, temporary_directory
from rollbox.tasks import PytestGrading, RewardKind, RewardSpec, Task

from ._workspace import WorkspaceScan

__all__ = ["VisibleTests"]

_DIR = "/tmp/.rollbox-visible"
_INI = "[pytest]\npythonpath = /workspace\n"


class VisibleTests:
    """The visible tests of one task (found in ``scan``, its workspace's), for one episode. :meth:`close` removes
    the host files it made."""

    def __init__(self, task: Task, scan: WorkspaceScan) -> None:
        self.task = task
        self.tests, self.support = scan.tests, scan.support
        self._graded: tuple[Task, tempfile.TemporaryDirectory[str]] | None = None
        #: The files a run writes in the sandbox (the pristine tests, their support, the configuration).
        self._files: dict[str, bytes | str | None] | None = None

    def __bool__(self) -> bool:
        return bool(self.tests)

    async def run(self, sandbox: Sandbox, timeout_s: float) -> ExecResult:
        """Run them in the agent's ``sandbox`` against its /workspace, within ``timeout_s``.

        Raises:
            OSError: the tests could not be laid out in the sandbox (the agent filled its disk).
        """
        if self._files is None:
            self._files = await asyncio.to_thread(self._read)
        with contextlib.suppress(FileNotFoundError):
            await sandbox.remove(_DIR)  # whatever the agent put there (a link, a file of its own) goes first
        await sandbox.write_files(self._files)
        argv = ["python3", "-m", "pytest", "-c", f"{_DIR}/pytest.ini", f"--rootdir={_DIR}", f"--confcutdir={_DIR}"]
        argv += [
            "-p",
            "no:cacheprovider",
            "-q",
            "-rfE",
            "--tb=short",
            "--color=no",
            "--",
            *(f"{_DIR}/{t}" for t in self.tests),
        ]
        # Plugins are not loaded from the environment's entry points, as the judge does not load them: the feedback
        # is what grading sees, and a runtime's stray plugins cost nothing.
        variables = {"PYTHONDONTWRITEBYTECODE": "1", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        return await sandbox.exec(argv, timeout_s=timeout_s, env=variables, cwd=_DIR)

    def _read(self) -> dict[str, bytes | str | None]:
        files: dict[str, bytes | str | None] = {
            f"{_DIR}/{rel}": (self.task.workspace / rel).read_bytes() for rel in (*self.tests, *self.support)
        }
        files[f"{_DIR}/pytest.ini"] = _INI
        return files

    def grading_task(self) -> Task:
        """The task the judge grades for shaped rewards: the visible tests as hidden ones, reward ``pass_rate``."""
        if self._graded is None:
            scratch = temporary_directory("rollbox-visible-")
            root = Path(scratch.name)
            os.symlink(self.task.workspace, root / "workspace")
            for rel in (*self.tests, *self.support):
                (root / "tests" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self.task.workspace / rel, root / "tests" / rel)
            task = dataclasses.replace(
                self.task,
                id=f"{self.task.id}#visible",
                path=root,
                grading=PytestGrading(),
                reward=RewardSpec(kind=RewardKind.PASS_RATE),
            )
            self._graded = (task, scratch)
        return self._graded[0]

    @staticmethod
    def pass_rate(verdict: Verdict) -> float | None:
        """The pass rate a grading of :meth:`grading_task` gives; ``None`` when rollbox failed."""
        if verdict.status is VerdictStatus.INFRA_ERROR:
            return None
        return verdict.passed / verdict.total if verdict.total else 0.0

    def close(self) -> None:
        """Remove the grading task's files (idempotent)."""
        if self._graded is not None:
            self._graded[1].cleanup()
            self._graded = None
