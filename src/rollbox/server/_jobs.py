"""Jobs over HTTP: the service runs a :class:`rollbox.scheduler.Scheduler` on its own store (``--db``, else
``$ROLLBOX_DB``, else ``HOME/jobs.db``), takes submissions for it, and reports each result as one ``job.result``
event.

What a tenant may submit is narrower than what the library takes: ``exec`` jobs (with limits within the server's
maxima) and ``grade`` jobs of the server's own tasks (named by id; never a host path, never a workspace
directory of the host's). Episodes have their own endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollbox import telemetry
from rollbox.scheduler import Job, JobNotFound, JobResult, JobSpec, JobState, JobStore, Scheduler, store_target

from ._config import ServerConfig
from ._grading import Grader
from ._guard import Refused
from ._tenants import Tenant

__all__ = ["Jobs"]

_KINDS = ("exec", "grade")
#: Each limit of an exec job's payload, and the server's maximum of it (every field of ``Limits``: a limit left
#: unbounded here was taken at any size the sandbox accepts).
_LIMITS = {
    "timeout_s": "max_timeout_s",
    "cpu_time_s": "max_timeout_s",
    "memory_bytes": "max_memory_bytes",
    "pids": "max_pids",
    "disk_bytes": "max_disk_bytes",
    "output_bytes": "max_output_bytes",
    "open_files": "max_open_files",
    "file_size_bytes": "max_disk_bytes",
}


class Jobs:
    """The service's scheduler and what it reports."""

    def __init__(
        self,
        config: ServerConfig,
        grader: Grader,
        *,
        quotas: Mapping[str, int] | None = None,
        cursor: Path | None = None,
    ) -> None:
        """``quotas``: the most jobs of each tenant holding a worker at once (the scheduler's quotas). ``cursor``:
        a file that keeps the last result reported, so that a worker that takes over the reporting from one that
        died reports what that one had not (without it, results stored before the start are not reported)."""
        self.config = config
        self.grader = grader
        self.cursor = cursor
        store = JobStore(store_target(config.db, config.home))
        self.scheduler = Scheduler(store, quotas=quotas, home=config.home)
        self._runner: asyncio.Task[None] | None = None
        self._seq = 0

    @property
    def store(self) -> JobStore:
        """The job store."""
        return self.scheduler.store

    async def start(self) -> None:
        """Open the scheduler and run its jobs in the background; results already stored are not reported again."""
        await self.scheduler.__aenter__()
        kept = self._kept_cursor()
        if kept is None:
            done = await asyncio.to_thread(self.store.results)
            kept = max((r.seq for _, r in done), default=0)
        self._seq = kept
        self._keep_cursor()
        self._runner = asyncio.create_task(self.scheduler.run(until_idle=False))

    def _keep_cursor(self) -> None:
        if self.cursor is not None:
            staging = self.cursor.with_suffix(".tmp")
            staging.write_text(str(self._seq))
            staging.replace(self.cursor)

    def _kept_cursor(self) -> int | None:
        try:
            return int(self.cursor.read_text()) if self.cursor is not None else None
        except (OSError, ValueError):  # none kept yet
            return None

    async def stop(self) -> None:
        """Stop running jobs (those under way go back to the queue) and close the scheduler."""
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        await self.scheduler.close()

    async def payload(self, kind: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The payload as the scheduler will run it: a served task's id becomes its directory.

        Raises:
            Refused: 400, a kind the HTTP API does not take, or a payload that reaches outside what it may.
        """
        if kind not in _KINDS:
            raise Refused(
                400,
                f"kind {kind!r} is not submitted over HTTP; use one of {list(_KINDS)} (episodes: POST /v1/episodes)",
            )
        data = dict(payload)
        if kind == "grade":
            if "workspace" in data:
                raise Refused(
                    400,
                    "a grade job over HTTP gives 'files' ({path: text}) or 'reference': true, never a "
                    "workspace directory of the server's",
                )
            task = await self.grader.task(str(data.get("task")))
            data["task"] = str(task.path)
        else:
            limits = data.get("limits") or {}
            if not isinstance(limits, Mapping):
                raise Refused(400, f"limits must be an object, got {limits!r:.80}")
            for name, value in limits.items():
                if name not in _LIMITS:
                    raise Refused(400, f"limits.{name} is not a limit; the limits are {', '.join(_LIMITS)}")
                if value is None and name == "file_size_bytes":
                    continue  # the disk limit's
                bound = getattr(self.config, _LIMITS[name])
                if isinstance(value, bool) or not isinstance(value, int | float):
                    raise Refused(400, f"limits.{name} must be a number, got {value!r:.40}")
                if value > bound:
                    raise Refused(400, f"limits.{name}={value!r:.40} is above this server's maximum of {bound:g}")
        return data

    def submit(self, tenant: Tenant, specs: list[JobSpec]) -> list[Job]:
        """Submit for ``tenant`` (its name is each job's tenant); see :meth:`Scheduler.submit` for the errors."""
        with telemetry.bound(tenant=tenant.name):
            return self.scheduler.submit(specs)

    def get(self, tenant: Tenant, job_id: int) -> Job:
        """The tenant's job ``job_id`` (404 for another tenant's, as for none)."""
        try:
            job: Job | None = self.store.job(job_id)
        except JobNotFound:
            job = None
        if job is None or job.tenant != tenant.name:
            raise Refused(404, f"no job {job_id}")
        return job

    def report_results(self) -> int:
        """Emit a ``job.result`` event for each result stored since the last call; returns how many. Each says
        whose job it was, its task, its timing (queue wait, run, grading: from its transitions), status and
        reward."""
        found = self.store.results(after=self._seq)
        for job, result in found:
            self._seq = max(self._seq, result.seq)
            telemetry.emit("job.result", **self._fields(job, result))
        if found:
            self._keep_cursor()
        return len(found)

    def _fields(self, job: Job, result: JobResult) -> dict[str, Any]:
        first: dict[JobState, float] = {}
        for move in self.store.transitions(job.id):
            first.setdefault(move.target, move.at)
        started = first.get(JobState.RUNNING)
        graded = first.get(JobState.GRADING)
        task = job.payload.get("task")
        output = result.output
        return {
            "job_id": job.id,
            "run_id": job.run_id,
            "tenant": job.tenant,
            "job_kind": job.kind,
            "task": self.grader.task_id(task) if isinstance(task, str) else None,
            "state": result.state.value,
            "status": result.status,
            "reward": result.reward,
            "error": result.error,
            "attempts": job.attempts,
            "queue_wait_s": started - job.submitted_at if started is not None else None,
            "run_s": (graded or result.at) - started if started is not None else None,
            "grade_s": result.at - graded if graded is not None else None,
            "duration_s": result.at - job.submitted_at,
            "cpu_s": output.get("cpu_s"),
            "peak_memory_bytes": output.get("peak_memory_bytes"),
            "stderr": str(output.get("stderr", ""))[-4000:] if result.status not in ("ok", "passed") else None,
        }
