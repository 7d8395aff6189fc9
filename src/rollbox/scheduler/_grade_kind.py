"""The ``grade`` kind: the judge's verdict on one candidate, as the job's result.

Payload::

    {"task": "/path/to/task", "files": {"solution.py": "..."}}     the candidate's files over the task's workspace
    {"task": "/path/to/task", "workspace": "/path/to/workspace"}   a candidate's whole workspace
    {"task": "/path/to/task", "reference": true}                   the task's own solution/

The result's status is the verdict's (:class:`rollbox.judge.VerdictStatus`), its reward the verdict's; an
``infra_error`` verdict is retried.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollbox.judge import Solution, check_solution_path, grade, runtime_spec, task_image
from rollbox.sandbox import Limits, RollboxError
from rollbox.sandbox.images import ImageError
from rollbox.sandbox.runtime import RuntimeSpec
from rollbox.tasks import Task, TaskFormatError, load_task

from ._errors import PayloadError
from ._kinds import JobContext, Outcome
from ._model import Requirements
from ._pool_key import pool_key

__all__ = ["GradeKind", "load_payload_task", "task_pool", "task_requirements"]


@functools.lru_cache(maxsize=4096)
def _load(path: str) -> Task:
    return load_task(path)


@functools.lru_cache(maxsize=4096)
def _runtime(path: str) -> RuntimeSpec | None:
    return runtime_spec(_load(path))


def load_payload_task(payload: Mapping[str, Any]) -> Task:
    """The task a payload names (loaded once per path in this process).

    Raises:
        PayloadError: no ``task``, or the task directory is invalid.
    """
    if not isinstance(payload.get("task"), str):
        raise PayloadError(f"the payload needs 'task': a task directory, got {payload.get('task')!r}")
    try:
        return _load(str(Path(payload["task"]).resolve()))
    except (TaskFormatError, OSError) as exc:
        raise PayloadError(f"cannot load task {payload['task']!r}: {exc}") from exc


def _image(task: Task) -> str | None:
    """The digest of ``task``'s image, as the pools name it; None without one, or where it cannot be had here (the
    job says so when it runs)."""
    if task.environment.image is None:
        return None
    try:
        image = task_image(task)
    except ImageError:
        return None
    return image.digest if image is not None else None


def task_pool(task: Task, limits: Limits | None = None, *, workspace: bool = False) -> str:
    """The warm pool of ``task``'s sandboxes: of its limits (or ``limits``), network, runtime, image and variables, and
    with its workspace for the agent's sandbox of an episode (the judge's sandboxes have none: the candidate's
    files are written into them)."""
    return pool_key(
        limits or task.limits,
        task.network,
        runtime=_runtime(str(task.path)),
        workspace=task.workspace if workspace else None,
        env=task.environment.env,
        image=_image(task),
    )


def task_requirements(task: Task) -> Requirements:
    """What grading ``task`` holds at once: one sandbox of its limits, from its pool."""
    return Requirements(memory_bytes=task.limits.memory_bytes, pool=task_pool(task))


def _solution(task: Task, payload: Mapping[str, Any]) -> Solution:
    if payload.get("reference"):
        if task.solution is None:
            raise PayloadError(f"task {task.id} has no solution/ to grade")
        return {
            str(p.relative_to(task.solution)): p.read_bytes() for p in sorted(task.solution.rglob("*")) if p.is_file()
        }
    if isinstance(payload.get("workspace"), str):
        return Path(payload["workspace"])
    files = payload.get("files")
    if not isinstance(files, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise PayloadError(
            "a grade job's payload needs 'files' ({path: text}), 'workspace' (a directory) or 'reference'"
        )
    for path in files:
        try:
            check_solution_path(path)
        except RollboxError as exc:  # refused when submitted, not graded as the candidate's error
            raise PayloadError(f"invalid grade payload: files: {exc}") from None
    return dict(files)


class GradeKind:
    """Grades a candidate against a task with :func:`rollbox.judge.grade`, in the worker's warm sandboxes."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        task = load_payload_task(payload)
        _solution(task, payload)
        return task_requirements(task)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        task = load_payload_task(payload)
        solution = _solution(task, payload)
        context.grading()
        verdict = await grade(task, solution, sandboxes=context.sandboxes)
        return Outcome(
            status=verdict.status.value, reward=verdict.reward, output=verdict.to_json(), error=verdict.error
        )
