"""Endpoints that run code: SandboxFusion's ``/run_code`` and ``/submit``, the sandboxes API, and grading."""

from __future__ import annotations

import base64
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response

from rollbox.sandbox import SandboxError, SandboxStateError

from ._app import current_tenant, idempotent, service_of
from ._execute import decode_b64
from ._guard import Refused
from ._models import (
    CreateSandbox,
    EvalResult,
    ExecRequest,
    FileContent,
    GradeRequest,
    RunCodeRequest,
    RunCodeResponse,
    SandboxInfo,
    SubmitRequest,
    WriteFile,
)
from ._sessions import info
from ._tenants import Tenant

__all__ = ["router"]

router = APIRouter()
TenantDep = Annotated[Tenant, Depends(current_tenant)]
_RUN_DOC = "the run this work belongs to (default: the service's own run)"


def _run(request: Request, header: str | None) -> str | None:
    run = header or request.query_params.get("run")
    if run is not None and not 0 < len(run) <= 128:
        raise Refused(400, f"the run id must be 1-128 characters, got {len(run)}")
    return run


def _infra(exc: SandboxError) -> Refused:
    return Refused(503, f"rollbox or the host failed to make a sandbox: {exc}", retry_after_s=1.0)


@router.post("/run_code", response_model=RunCodeResponse, tags=["sandboxfusion"])
async def run_code(
    body: RunCodeRequest,
    request: Request,
    tenant: TenantDep,
    x_rollbox_run: Annotated[str | None, Header(description=_RUN_DOC)] = None,
) -> Response:
    """Run one program (SandboxFusion's request and response). A failure of rollbox or the host is
    ``status: SandboxError`` (verl masks it), never a wrong answer."""
    service = service_of(request)
    run = _run(request, x_rollbox_run) or service.config.run

    async def call() -> tuple[int, Any]:
        async with service.guard.executing(tenant):
            response = await service.executor.run_code(body, tenant=tenant.name, run=run)
        return 200, response.model_dump(mode="json")

    return await idempotent(request, tenant, call)


@router.post("/submit", response_model=EvalResult, tags=["sandboxfusion"])
@router.post("/online_judge/submit", response_model=EvalResult, tags=["sandboxfusion"], include_in_schema=False)
async def submit(
    body: SubmitRequest,
    request: Request,
    tenant: TenantDep,
    x_rollbox_run: Annotated[str | None, Header(description=_RUN_DOC)] = None,
) -> Response:
    """Grade a completion against a task (SandboxFusion's online-judge ``submit``), with rollbox's judge."""
    service = service_of(request)
    run = _run(request, x_rollbox_run)

    async def call() -> tuple[int, Any]:
        async with service.guard.executing(tenant):
            result = await service.grader.submit(body, tenant=tenant.name, run=run)
        return 200, result.model_dump(mode="json")

    return await idempotent(request, tenant, call)


@router.post("/v1/grade", tags=["grading"])
async def grade(
    body: GradeRequest,
    request: Request,
    tenant: TenantDep,
) -> Response:
    """Grade files (workspace-relative paths to text) against a served task; answers the verdict
    (``rollbox grade --json``'s object)."""
    service = service_of(request)
    task = await service.grader.task(body.task)

    async def call() -> tuple[int, Any]:
        async with service.guard.executing(tenant):
            verdict = await service.grader.grade(task, body.files, tenant=tenant.name, run=body.run, endpoint="grade")
        return 200, verdict.to_json()

    return await idempotent(request, tenant, call)


@router.post("/v1/sandboxes", response_model=SandboxInfo, status_code=201, tags=["sandboxes"])
async def create_sandbox(body: CreateSandbox, request: Request, tenant: TenantDep) -> Response:
    """Open a sandbox that lives across requests until closed, or until unused for the idle timeout."""
    service = service_of(request)

    async def call() -> tuple[int, Any]:
        try:
            session = await service.sessions.create(tenant, body)
        except SandboxError as exc:
            raise _infra(exc) from None
        return 201, info(session, service.config.idle_timeout_s).model_dump(mode="json")

    return await idempotent(request, tenant, call)


@router.get("/v1/sandboxes", response_model=list[SandboxInfo], tags=["sandboxes"])
async def list_sandboxes(request: Request, tenant: TenantDep) -> list[SandboxInfo]:
    """The caller's open sandboxes."""
    service = service_of(request)
    return [info(s, service.config.idle_timeout_s) for s in service.sessions.list(tenant)]


@router.get("/v1/sandboxes/{sandbox_id}", response_model=SandboxInfo, tags=["sandboxes"])
async def get_sandbox(sandbox_id: str, request: Request, tenant: TenantDep) -> SandboxInfo:
    """One of the caller's sandboxes."""
    service = service_of(request)
    return info(service.sessions.get(tenant, sandbox_id), service.config.idle_timeout_s)


@router.delete("/v1/sandboxes/{sandbox_id}", status_code=204, tags=["sandboxes"])
async def close_sandbox(sandbox_id: str, request: Request, tenant: TenantDep) -> Response:
    """Close a sandbox: every process killed, every file freed."""
    await service_of(request).sessions.close(tenant, sandbox_id)
    return Response(status_code=204)


@router.post("/v1/sandboxes/{sandbox_id}/exec", tags=["sandboxes"])
async def exec_in_sandbox(sandbox_id: str, body: ExecRequest, request: Request, tenant: TenantDep) -> Response:
    """Run a command to its end; answers ``rollbox exec --json``'s object (what the command did, never an error
    for it)."""
    service = service_of(request)
    if body.stdin is not None and body.stdin_b64 is not None:
        raise Refused(400, "give stdin or stdin_b64, not both")
    stdin: bytes | str | None = decode_b64(body.stdin_b64, "stdin_b64") if body.stdin_b64 is not None else body.stdin
    timeout = body.timeout_s
    if timeout is not None and timeout > service.config.max_timeout_s:
        raise Refused(400, f"timeout_s={timeout:g} is above this server's maximum of {service.config.max_timeout_s:g}")
    run = _run(request, request.headers.get("x-rollbox-run")) or service.config.run

    async def call() -> tuple[int, Any]:
        async with service.guard.executing(tenant), service.sessions.use(tenant, sandbox_id) as session:
            try:
                result = await session.thing.exec(
                    body.argv, stdin=stdin, timeout_s=timeout, env=body.env, cwd=body.cwd, warm_python=body.warm_python
                )
            except SandboxStateError:
                raise Refused(404, f"sandbox {sandbox_id!r} was closed meanwhile") from None
            except ValueError as exc:  # an argv the sandbox refuses (NUL characters, warm_python misuse)
                raise Refused(400, str(exc)) from None
        service.report_exec(result, tenant=tenant.name, run=run, sandbox=sandbox_id, argv=body.argv)
        return 200, result.to_json()

    return await idempotent(request, tenant, call)


@router.put("/v1/sandboxes/{sandbox_id}/files", status_code=204, tags=["sandboxes"])
async def write_file(sandbox_id: str, body: WriteFile, request: Request, tenant: TenantDep) -> Response:
    """Write a file (text or base64) in the sandbox's /workspace (relative paths) or /tmp."""
    if (body.content is None) == (body.content_b64 is None):
        raise Refused(400, "give exactly one of content (text) and content_b64 (bytes, base64)")
    data = body.content.encode("utf-8", "surrogatepass") if body.content is not None else b""
    if body.content_b64 is not None:
        data = decode_b64(body.content_b64, "content_b64")
    async with service_of(request).sessions.use(tenant, sandbox_id) as session:
        try:
            await session.thing.write_file(body.path, data, mode=body.mode)
        except SandboxStateError:
            raise Refused(404, f"sandbox {sandbox_id!r} was closed meanwhile") from None
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        except OSError as exc:
            raise Refused(409, f"cannot write {body.path!r}: {exc.strerror or exc}") from None
    return Response(status_code=204)


@router.get("/v1/sandboxes/{sandbox_id}/files", response_model=FileContent, tags=["sandboxes"])
async def read_file(
    sandbox_id: str,
    request: Request,
    tenant: TenantDep,
    path: Annotated[str, Query(min_length=1, max_length=4096)],
) -> FileContent:
    """Read a file from the sandbox (as base64); larger than the server's file limit: 413."""
    service = service_of(request)
    async with service.sessions.use(tenant, sandbox_id) as session:
        try:
            data = await session.thing.read_file(path, max_bytes=service.config.max_file_bytes)
        except SandboxStateError:
            raise Refused(404, f"sandbox {sandbox_id!r} was closed meanwhile") from None
        except ValueError as exc:
            raise Refused(400, str(exc)) from None
        except OSError as exc:
            if exc.errno == 27:  # EFBIG
                raise Refused(413, f"{path!r} is larger than {service.config.max_file_bytes} bytes") from None
            raise Refused(404, f"cannot read {path!r}: {exc.strerror or exc}") from None
    return FileContent(path=path, size=len(data), content_b64=base64.b64encode(data).decode())
