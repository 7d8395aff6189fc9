"""The ``validate`` kind: :func:`rollbox.curate.validate` on one task, its decision and reasons as the job's result.

Payload::

    {"task": "/path/to/task"}
    {"task": "/path/to/task", "options": {"runs": 5, "pressure": false}, "workers": 2, "cache": false}

``options`` are :class:`rollbox.curate.ValidateOptions` fields (curate's defaults for the others), ``workers`` the
gradings at once (default 1: one CPU, one sandbox of the task's limits at a time), ``cache`` whether a report kept
under ``$ROLLBOX_HOME/validate`` for the same task content and options is reused (default true, as for
``rollbox validate``).

The result's status is the decision (``admit``, ``weak``, ``reject``: :class:`rollbox.curate.Decision`), its reward
``None``, its output the whole :class:`rollbox.curate.TaskReport` (``decision``, ``reasons`` with the
:class:`rollbox.curate.ReasonCode` values, kill ratio, candidates, mutants). A report that says
``validation_error`` (a grading failed in rollbox or the host past curate's own retries) is the infrastructure's
failure, not the task's: the job is retried, and after its last attempt completes as ``infra_error``.

Validation grades in warm sandboxes of its own, opened and closed with each attempt (curate's grader), not in the
worker's elastic pools. Its CPU-pressure phase (``options.pressure``, on by default) runs four busy loops per CPU
beside the reference for a few seconds: jobs sharing the machine feel it too, which is the point of the check but
slows them, and several validation jobs at once multiply it. Turn it off for validations that run side by side or
beside other work (``rollbox run --validate`` does).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollbox.curate import Progress, ReasonCode, ValidateOptions, ValidationCache, validate

from ._errors import PayloadError
from ._grade_kind import load_payload_task
from ._kinds import JobContext, Outcome
from ._model import Requirements

__all__ = ["ValidateKind", "validate_payload"]


def validate_payload(
    task: str | os.PathLike[str],
    options: ValidateOptions | None = None,
    *,
    workers: int = 1,
    cache: bool = True,
) -> dict[str, Any]:
    """The payload of a ``validate`` job: ``task`` (a task directory) checked with ``options`` (default
    :class:`rollbox.curate.ValidateOptions`), ``workers`` gradings at once, reusing a cached report if ``cache``."""
    return {
        "task": str(Path(task).resolve()),
        "options": dataclasses.asdict(options) if options is not None else {},
        "workers": workers,
        "cache": cache,
    }


def _parse(payload: Mapping[str, Any]) -> tuple[ValidateOptions, int, bool]:
    """The options, workers and cache flag of a payload, each checked.

    Raises:
        PayloadError: which field is wrong, and how to fix it.
    """
    options = payload.get("options") or {}
    if not isinstance(options, Mapping):
        raise PayloadError(f"a validate job's 'options' must be a table of ValidateOptions fields, got {options!r:.80}")
    try:
        parsed = ValidateOptions(**options)
    except (TypeError, ValueError) as exc:
        known = ", ".join(f.name for f in dataclasses.fields(ValidateOptions))
        raise PayloadError(f"invalid options in a validate job: {exc} (the fields: {known})") from exc
    workers = payload.get("workers", 1)
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise PayloadError(f"a validate job's 'workers' must be a whole number of at least 1, got {workers!r}")
    cache = payload.get("cache", True)
    if not isinstance(cache, bool):
        raise PayloadError(f"a validate job's 'cache' must be true or false, got {cache!r}")
    return parsed, workers, cache


class _Began:
    """Validation's progress as the job's state: its first planned grading moves the job to ``grading`` (the static
    checks before it are the ``running`` part)."""

    def __init__(self, context: JobContext) -> None:
        self._context, self._said = context, False

    def __call__(self, progress: Progress) -> None:
        if progress.planned and not self._said:
            self._said = True
            self._context.grading()


class ValidateKind:
    """Validates one task with :func:`rollbox.curate.validate`."""

    def requirements(self, payload: Mapping[str, Any]) -> Requirements:
        task = load_payload_task(payload)
        _, workers, _ = _parse(payload)
        # ``workers`` gradings at once, each in a sandbox of the task's limits. No warm pool of the worker's serves
        # it (curate's grader has its own), so no pool key: the queue's word on it would grow nothing.
        return Requirements(cpus=float(workers), memory_bytes=workers * task.limits.memory_bytes)

    async def run(self, payload: Mapping[str, Any], context: JobContext) -> Outcome:
        task = load_payload_task(payload)
        options, workers, cache = _parse(payload)
        (report,) = await validate(
            [task],
            options=options,
            workers=workers,
            cache=ValidationCache() if cache else None,
            on_progress=_Began(context),
        )
        failures = [r.detail for r in report.reasons if r.code is ReasonCode.VALIDATION_ERROR]
        if failures:
            return Outcome(status="infra_error", error=f"validation of task {task.id} failed: {failures[0]}")
        return Outcome(status=report.decision.value, output=report.to_json())
