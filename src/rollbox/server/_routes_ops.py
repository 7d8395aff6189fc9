"""Endpoints that show: health and readiness, Prometheus metrics, the live figures, alerts, languages, tasks,
and the dashboard page."""

from __future__ import annotations

from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from rollbox.telemetry import prometheus_rules

from ._app import current_tenant, optional_tenant, service_of
from ._guard import Refused
from ._metrics_view import exposition
from ._service import Service
from ._tenants import Tenant

__all__ = ["router"]

router = APIRouter()
TenantDep = Annotated[Tenant, Depends(current_tenant)]


@router.get("/healthz", tags=["operations"])
async def health(request: Request) -> dict[str, str]:
    """The process answers (no key needed), and which worker it is (``SLOT.GENERATION``, after the node's name on
    a service of several hosts)."""
    return {"status": "ok", "worker": str(service_of(request).owner)}


@router.get("/readyz", tags=["operations"])
async def ready(request: Request) -> Response:
    """The service has started and accepts work (503 while it starts or stops; no key needed)."""
    service = service_of(request)
    if not service.ready:
        return PlainTextResponse("starting or stopping", status_code=503)
    return PlainTextResponse("ready")


@router.get("/metrics", tags=["operations"], response_class=PlainTextResponse)
async def metrics(request: Request, viewer: Annotated[Tenant | None, Depends(optional_tenant)]) -> Response:
    """Prometheus metrics. No key is needed for the service's totals; the series of each tenant are shown to an
    admin key (every tenant's) and to a tenant's own key (its own). They carry counts, never code or output."""
    service = service_of(request)
    service.refresh_gauges()
    operator = viewer is not None and viewer.admin
    text = exposition(service.metrics().registry, operator=operator, tenant=viewer.name if viewer else None)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/stats", tags=["operations"])
async def stats(
    request: Request,
    tenant: TenantDep,
    of: Annotated[str | None, Query(max_length=64, description="admins: one tenant's figures")] = None,
) -> dict[str, Any]:
    """The live figures the dashboard and ``rollbox top`` show: the caller's own, or, for an admin, the whole
    service's (or tenant ``of``'s)."""
    service = service_of(request)
    service.refresh_gauges()
    if of is not None and not tenant.admin and of != tenant.name:
        raise Refused(403, "only an admin tenant may see another tenant's figures")
    view = of if of is not None else (None if tenant.admin else tenant.name)
    snapshot = service.stats.snapshot(view)
    snapshot["alerts"] = _firing(service, tenant)
    snapshot["run"] = service.config.run
    snapshot["languages"] = service.languages.names()
    snapshot["archive"] = {"url": service.config.archive, "error": service.archive and service.archive.last_error}
    return snapshot


def _firing(service: Service, tenant: Tenant) -> list[dict[str, Any]]:
    """The alerts firing now, for an admin: they are the whole service's figures, which a tenant does not see."""
    return [a.to_json() for a in service.alerts.firing] if tenant.admin else []


@router.get("/v1/alerts", tags=["operations"])
async def alerts(request: Request, tenant: TenantDep) -> dict[str, Any]:
    """The alert rules, and those firing now (for an admin; a tenant gets none: they are the service's)."""
    service = service_of(request)
    return {
        "firing": _firing(service, tenant),
        "rules": [
            {"name": r.name, "severity": r.severity, "summary": r.summary, "expr": r.expr} for r in service.alerts.rules
        ],
    }


@router.get("/v1/alerts/rules", tags=["operations"], response_class=PlainTextResponse)
async def alert_rules(request: Request, tenant: TenantDep) -> Response:
    """The alert rules as a Prometheus rules file (YAML)."""
    return PlainTextResponse(prometheus_rules(service_of(request).alerts.rules), media_type="application/yaml")


@router.get("/v1/languages", tags=["sandboxfusion"])
async def languages(request: Request, tenant: TenantDep) -> list[dict[str, object]]:
    """Every language rollbox knows: whether ``/run_code`` runs it here (and in which image, with which commands),
    or why not (Debian does not package it; the service runs on the host's toolchains)."""
    return service_of(request).languages.listing()


@router.get("/v1/tasks", tags=["grading"])
async def tasks(request: Request, tenant: TenantDep) -> list[str]:
    """The ids of the tasks in the server's task directory."""
    datasets = await service_of(request).grader.datasets()
    return sorted(datasets["tasks"])


@router.get("/v1/tasks/{task_id:path}", tags=["grading"])
async def task(task_id: str, request: Request, tenant: TenantDep) -> dict[str, Any]:
    """A task as the agent sees it: its instruction, runner, limits and workspace files (never its tests)."""
    found = await service_of(request).grader.task(task_id)
    files = sorted(str(p.relative_to(found.workspace)) for p in found.workspace.rglob("*") if p.is_file())
    return {
        "id": found.id,
        "instruction": found.instruction,
        "runner": type(found.grading).__name__.removesuffix("Grading").lower(),
        "limits": {"timeout_s": found.limits.timeout_s, "memory_bytes": found.limits.memory_bytes},
        "workspace": files[:1000],
    }


@router.get("/", include_in_schema=False)
async def root() -> Response:
    return RedirectResponse("/dashboard")


@router.get("/dashboard", tags=["operations"], response_class=HTMLResponse)
async def dashboard() -> Response:
    """The live dashboard (a page; its figures come from ``/v1/stats`` with the key it is given)."""
    page = resources.files("rollbox.server").joinpath("static/dashboard.html").read_text()
    return HTMLResponse(page)
