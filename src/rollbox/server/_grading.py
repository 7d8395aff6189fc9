"""Tasks and grading over HTTP: the server's task directory (and HumanEval, as SandboxFusion's ``humaneval``
dataset), graded by :func:`rollbox.judge.grade` in shared warm sandboxes, each verdict reported as a
``judge.verdict`` event."""

from __future__ import annotations

import asyncio
import re
import secrets
from pathlib import Path
from typing import Any

from rollbox import telemetry
from rollbox.env.adapters import CompletionError, place_code
from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.sandbox import WarmSandboxes
from rollbox.tasks import Task, TaskFormatError, humaneval_tasks, load_task

from ._config import ServerConfig
from ._guard import Refused
from ._models import EvalResult, EvalTestCase, RunCodeResponse, RunStatus, SubmitRequest

__all__ = ["Grader", "extract_code"]

#: A fenced block: its opening line (the language's name first), and its code, to the closing fence or the end. No
#: two parts of the pattern can match the same characters: the opening line's name and the rest of it, taken
#: apart by one pattern, made a long line of letters with no newline cost quadratic time.
_FENCE = re.compile(r"```([^\n]*)\n(.*?)(?:```|\Z)", re.DOTALL)
_TAG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")


def _language(line: str) -> str:
    found = _TAG.match(line)
    return found.group(1).lower() if found else ""


def extract_code(completion: str, language: str = "python") -> tuple[str, str]:
    """The code in a model's completion and how it was found: the last fenced block in ``language`` (or
    without one), else the last fenced block, ``incomplete_fenced`` for a block never closed, else the
    whole completion (``heuristic``), or ``empty``."""
    blocks = [
        (_language(m.group(1)), m.group(2), m.group(0).rstrip().endswith("```")) for m in _FENCE.finditer(completion)
    ]
    if blocks:
        preferred = [b for b in blocks if b[0] in (language, "py" if language == "python" else language, "")]
        _tag, code, closed = (preferred or blocks)[-1]
        return code, "fenced" if closed else "incomplete_fenced"
    if not completion.strip():
        return "", "empty"
    return completion, "heuristic"


class Grader:
    """The tasks the server serves, and the warm sandboxes their gradings share."""

    def __init__(self, config: ServerConfig, *, run: str) -> None:
        self.config = config
        self.run = run
        self.sandboxes = WarmSandboxes(size=config.pool_size)
        self._tasks: dict[str, dict[str, Path]] = {}
        self._loaded: dict[Path, Task] = {}
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        """Close the grading sandboxes."""
        await self.sandboxes.close()

    async def datasets(self) -> dict[str, dict[str, Path]]:
        """Dataset name -> task id -> task directory: the server's task directory (named after it, and
        ``tasks``), and ``humaneval`` once asked for."""
        async with self._lock:
            if "tasks" not in self._tasks:
                found: dict[str, Path] = {}
                root = self.config.tasks_dir
                if root is not None and root.is_dir():
                    for path in sorted(root.iterdir()):
                        if (path / "task.toml").is_file():
                            try:
                                found[self._load(path).id] = path
                            except TaskFormatError:
                                continue  # not served; load_task's message says why when it is asked for
                self._tasks["tasks"] = found
                if root is not None:
                    self._tasks[root.name] = found
            return self._tasks

    async def _humaneval(self) -> dict[str, Path]:
        async with self._lock:
            if "humaneval" not in self._tasks:
                dest = self.config.home / "humaneval"
                self._tasks["humaneval"] = await asyncio.to_thread(humaneval_tasks, dest)
            return self._tasks["humaneval"]

    def _load(self, path: Path) -> Task:
        if path not in self._loaded:
            self._loaded[path] = load_task(path)
        return self._loaded[path]

    def task_id(self, path: str) -> str:
        """The id of the task loaded from ``path`` (its directory's name when it was never loaded here)."""
        loaded = self._loaded.get(Path(path))
        return loaded.id if loaded is not None else Path(path).name

    async def task(self, task_id: str, dataset: str = "tasks") -> Task:
        """A served task.

        Raises:
            Refused: 404, no such dataset or task (the message lists what there is).
        """
        datasets = await self.datasets()
        if dataset == "humaneval":
            tasks = await self._humaneval()
            task_id = task_id if task_id.startswith("HumanEval/") else f"HumanEval/{task_id}"
        elif dataset in datasets:
            tasks = datasets[dataset]
        else:
            raise Refused(404, f"no dataset {dataset!r}; this server has {sorted({*datasets, 'humaneval'})}")
        path = tasks.get(task_id)
        if path is None:
            shown = sorted(tasks)[:20]
            raise Refused(404, f"no task {task_id!r} in {dataset!r}; it has {len(tasks)} tasks, e.g. {shown}")
        return await asyncio.to_thread(self._load, path)

    async def grade(self, task: Task, files: dict[str, str], *, tenant: str, run: str | None, **extra: Any) -> Verdict:
        """Grade ``files`` (workspace-relative paths to text) against ``task``; reports a ``judge.verdict``."""
        verdict = await grade(task, files, sandboxes=self.sandboxes)
        telemetry.emit(
            "judge.verdict",
            id=secrets.token_hex(8),
            run=run or self.run,
            tenant=tenant,
            task=task.id,
            status=verdict.status.value,
            reward=verdict.reward,
            duration_s=verdict.duration_s,
            passed=verdict.passed,
            total=verdict.total,
            error=verdict.error,
            **extra,
        )
        return verdict

    async def submit(self, request: SubmitRequest, *, tenant: str, run: str | None) -> EvalResult:
        """SandboxFusion's ``/submit``: the completion's code becomes the task's solution file and is graded."""
        task = await self.task(str(request.id), request.dataset)
        code, kind = extract_code(request.completion, request.config.language or "python")
        path = request.config.extra.get("path")
        if path is not None and not isinstance(path, str):
            raise Refused(400, f"config.extra.path must be a workspace path (a string), got {path!r}")
        try:  # where the task expects it (a function's body after its prompt): as the trainer adapters place it
            ((path, full),) = place_code(task, code, path).items()
        except CompletionError as exc:
            raise Refused(400, str(exc)) from None
        verdict = await self.grade(task, {path: full}, tenant=tenant, run=run, endpoint="submit")
        infra = verdict.status is VerdictStatus.INFRA_ERROR
        summary = RunCodeResponse(
            status=RunStatus.SandboxError if infra else RunStatus.Success if verdict.reward == 1 else RunStatus.Failed,
            message=verdict.error or "",
        )
        return EvalResult(
            id=request.id,
            accepted=verdict.status is VerdictStatus.PASSED,
            extracted_code=code,
            full_code=full,
            tests=[
                EvalTestCase(passed=t.outcome.value == "passed", exec_info=summary, test_info=t.to_json())
                for t in verdict.tests
            ],
            extracted_type=kind,  # type: ignore[arg-type]
            extra={"verdict": verdict.to_json()},
        )
