"""Jobs and runs over HTTP: submit to the service's durable scheduler, follow, cancel, and stream a run's results."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.responses import StreamingResponse

from rollbox.scheduler import (
    TERMINAL,
    IdempotencyConflict,
    JobSpec,
    JobState,
    PayloadError,
    QueueFull,
    Unplaceable,
)

from ._app import current_tenant, service_of
from ._guard import Refused
from ._models import SubmitJobs
from ._tenants import Tenant

__all__ = ["router"]

router = APIRouter(tags=["jobs"])
TenantDep = Annotated[Tenant, Depends(current_tenant)]
#: A job's id: a positive SQLite integer (a larger number is a 422, not an overflow deep in the store).
JobId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@router.post("/v1/jobs", status_code=201)
async def submit_jobs(body: SubmitJobs, request: Request, tenant: TenantDep) -> list[dict[str, Any]]:
    """Submit jobs, durably, all or none: each is the caller's and runs until it has its one result. A job with a
    ``key`` already submitted is that job (a retry adds nothing)."""
    service = service_of(request)
    run, scheduled = body.run or service.config.run, service.jobs
    specs = []
    for index, job in enumerate(body.jobs):  # a refusal names the job by its place in the batch, as the scheduler's do
        try:
            specs.append(
                JobSpec(
                    kind=job.kind,
                    payload=await scheduled.payload(job.kind, job.payload),
                    key=f"{tenant.name}/{job.key}" if job.key else None,  # one tenant's keys never meet another's
                    run_id=run,
                    priority=job.priority,
                    tenant=tenant.name,
                    max_attempts=job.max_attempts,
                    deadline_s=job.deadline_s,
                )
            )
        except Refused as exc:
            raise Refused(exc.status, f"jobs[{index}]: {exc.message}", retry_after_s=exc.retry_after_s) from None
        except ValueError as exc:
            raise Refused(400, f"jobs[{index}]: {exc}") from None
    try:
        jobs = await asyncio.to_thread(scheduled.submit, tenant, specs)
    except (PayloadError, Unplaceable) as exc:
        raise Refused(400, str(exc)) from None
    except QueueFull as exc:
        raise Refused(429, str(exc), retry_after_s=exc.retry_after_s) from None
    except IdempotencyConflict as exc:
        raise Refused(409, str(exc)) from None
    return [job.to_json() for job in jobs]


@router.get("/v1/jobs")
async def list_jobs(
    request: Request,
    tenant: TenantDep,
    run: Annotated[str | None, Query(max_length=128)] = None,
    state: Annotated[JobState | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[dict[str, Any]]:
    """The caller's jobs (of one run, in one state), oldest first."""
    store = service_of(request).jobs.store
    jobs = await asyncio.to_thread(store.jobs, run_id=run, state=state, tenant=tenant.name, limit=limit)
    return [job.to_json() for job in jobs]


@router.get("/v1/jobs/{job_id}")
async def get_job(job_id: JobId, request: Request, tenant: TenantDep) -> dict[str, Any]:
    """A job of the caller's: where it is, every move it made, and its result once it has one."""
    store = service_of(request).jobs.store
    job = await asyncio.to_thread(service_of(request).jobs.get, tenant, job_id)
    result = await asyncio.to_thread(store.result, job_id)
    moves = await asyncio.to_thread(store.transitions, job_id)
    return {
        **job.to_json(),
        "result": result.to_json() if result is not None else None,
        "transitions": [
            {"source": m.source and m.source.value, "target": m.target.value, "at": m.at, "reason": m.reason}
            for m in moves
        ],
    }


@router.post("/v1/jobs/{job_id}/cancel")
async def cancel_job(job_id: JobId, request: Request, tenant: TenantDep) -> dict[str, Any]:
    """Cancel a job of the caller's (one already final stays as it is)."""
    service = service_of(request)
    await asyncio.to_thread(service.jobs.get, tenant, job_id)
    cancelled = await asyncio.to_thread(service.jobs.scheduler.cancel, [job_id])
    return {"id": job_id, "cancelled": job_id in cancelled}


@router.get("/v1/runs")
async def runs(request: Request, tenant: TenantDep) -> list[dict[str, Any]]:
    """The runs that hold jobs of the caller's, with those jobs counted by state (an admin: every run, every job
    counted). A run is named by its submitters: another tenant's jobs in a run of the same name are not counted."""
    store = service_of(request).jobs.store
    found = await asyncio.to_thread(store.runs, tenant=None if tenant.admin else tenant.name)
    return [{"id": run_id, "created_at": at, "meta": meta, "counts": counts} for run_id, at, meta, counts in found]


@router.get("/v1/runs/{run_id}/results", response_class=StreamingResponse)
async def results(
    run_id: str,
    request: Request,
    tenant: TenantDep,
    follow: Annotated[bool, Query(description="keep streaming until every job of the run is final")] = True,
    after: Annotated[int, Query(ge=0, le=2**63 - 1, description="only results after this sequence number")] = 0,
) -> StreamingResponse:
    """The run's results of the caller's jobs as a stream: one JSON object a line (the job, its result, and its
    ``seq`` to resume from with ``after``), as they are committed, until every job of the caller's in the run is
    final (another tenant's jobs in a run of the same name neither show nor hold the stream open). While no result
    comes, a blank line every ``stream_keepalive_s`` keeps proxies from closing the stream as idle: readers skip
    blank lines."""
    service = service_of(request)
    store = service.jobs.store

    async def lines() -> AsyncIterator[bytes]:
        seq = after
        sent = time.monotonic()
        while True:
            # Counted before the results are read: a job final in the count has its result (committed in the
            # same transaction) in the read after it. Read the other way round, a job ending between the two
            # reads would end the stream without its result.
            counts = await asyncio.to_thread(store.counts, run_id, tenant=tenant.name) if follow else {}
            found = await asyncio.to_thread(store.results, run_id=run_id, tenant=tenant.name, after=seq)
            for job, result in found:
                seq = max(seq, result.seq)
                line = {"seq": result.seq, "job": job.to_json(), "result": result.to_json()}
                yield (json.dumps(line, separators=(",", ":")) + "\n").encode()
                sent = time.monotonic()
            if not follow or not any(counts.get(state.value, 0) for state in JobState if state not in TERMINAL):
                return
            if await request.is_disconnected():
                return
            if time.monotonic() - sent >= service.config.stream_keepalive_s:
                yield b"\n"
                sent = time.monotonic()
            await asyncio.sleep(min(0.2, service.config.stream_keepalive_s))

    return StreamingResponse(lines(), media_type="application/x-ndjson")
