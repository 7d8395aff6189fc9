"""The FastAPI application: the service's state in its lifespan, authentication, bounded bodies, and errors that
are always a 4xx with a message for bad input (a 5xx only for rollbox's own failures)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import rollbox

from ._config import ServerConfig
from ._guard import ADMITTED, Refused
from ._peers import Peers
from ._responses import SafeJSONResponse
from ._responses import error as _error
from ._route import Router
from ._service import Service
from ._tenants import Tenant

__all__ = ["SafeJSONResponse", "create_app", "current_tenant", "idempotent", "optional_tenant", "service_of"]


class _BodyBounds:
    """Refuses a request whose body is larger than the limit (413: before reading it when it says its length, as
    soon as it passes the limit when it does not) or does not arrive in time (408): uvicorn waits for a body
    forever, so a client sending a byte now and then would hold its connection and the request's memory."""

    def __init__(self, app: ASGIApp, limit: int, timeout_s: float) -> None:
        self.app, self.limit, self.timeout_s = app, limit, timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = f"the request body is larger than this server's limit of {self.limit} bytes"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            status, message = (413, too_large) if length.isdigit() else (400, "Content-Length is not a number")
            await _error(status, message)(scope, receive, send)
            return
        seen, complete, deadline = 0, False, 0.0

        async def bounded() -> Message:
            nonlocal seen, complete, deadline
            if complete:  # what follows the body (a disconnect) may come whenever it comes
                return await receive()
            if not deadline:  # from when the application starts reading: it may read late, the client is not late
                deadline = asyncio.get_running_loop().time() + self.timeout_s
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise HTTPException(
                    408, f"the request body did not arrive within this server's {self.timeout_s:g} s"
                ) from None
            seen += len(message.get("body", b""))
            if seen > self.limit:
                raise HTTPException(413, too_large)  # answered by the application's handler, as any 4xx
            complete = message["type"] != "http.request" or not message.get("more_body", False)
            return message

        await self.app(scope, bounded, send)


def _validation_message(exc: RequestValidationError) -> str:
    """Pydantic's errors as one line each: where, and what is wrong (the offending value is not echoed whole)."""
    lines = []
    for error in exc.errors()[:20]:
        where = ".".join(str(part) for part in error.get("loc", ()))
        lines.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(lines) or "the request is not valid"


def create_app(config: ServerConfig | None = None, *, peers: Peers | None = None) -> FastAPI:
    """The application for ``config``; its lifespan starts and stops the service. ``peers``: the other workers,
    when this process is one of several.

    Raises:
        ValueError: auth is on and no tenant has a key (the message says how to make one).
    """
    from . import _routes_env, _routes_exec, _routes_jobs, _routes_ops

    config = config or ServerConfig()
    service = Service(config, peers)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(
        title="rollbox",
        version=rollbox.__version__,
        description="Isolated sandboxes, grading and telemetry over HTTP; SandboxFusion-compatible /run_code and "
        "/submit. Every endpoint but /healthz, /readyz and /metrics needs an API key when auth is on.",
        lifespan=lifespan,
        default_response_class=SafeJSONResponse,
    )
    app.state.service = service

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        return _error(exc.status, exc.message, exc.retry_after_s)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(exc))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    app.include_router(_routes_ops.router)
    app.include_router(_routes_exec.router)
    app.include_router(_routes_env.router)
    app.include_router(_routes_jobs.router)
    app.add_middleware(Router, service=service)
    app.add_middleware(_BodyBounds, limit=config.max_body_bytes, timeout_s=config.body_timeout_s)
    return app


def service_of(request: Request) -> Service:
    """The service serving ``request``."""
    service: Service = request.app.state.service
    return service


_bearer = HTTPBearer(auto_error=False, description="Authorization: Bearer KEY")
_api_key = APIKeyHeader(name="X-API-Key", auto_error=False, description="or X-API-Key: KEY")


async def current_tenant(
    request: Request,
    bearer: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008 (FastAPI's idiom)
    api_key: str | None = Depends(_api_key),
) -> Tenant:
    """The tenant of the request (401 without a valid key when auth is on; 429 over its rate)."""
    key = bearer.credentials if bearer is not None else api_key
    # SandboxFusion's clients cannot send headers: ?api_key= is taken too (it shows in access logs: prefer headers).
    key = key or request.query_params.get("api_key")
    return await service_of(request).authenticate(key, admit=ADMITTED not in request.headers)


async def optional_tenant(
    request: Request,
    bearer: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008 (FastAPI's idiom)
    api_key: str | None = Depends(_api_key),
) -> Tenant | None:
    """The tenant of a request that needs no key: ``None`` when it sends none (auth on), else as
    :func:`current_tenant` (401 for a key that is not valid)."""
    key = (bearer.credentials if bearer is not None else api_key) or request.query_params.get("api_key")
    service = service_of(request)
    if not key and service.config.auth_required:
        return None
    return await service.authenticate(key, admit=ADMITTED not in request.headers)


async def idempotent(
    request: Request, tenant: Tenant, call: Callable[[], Awaitable[tuple[int, Any]]]
) -> SafeJSONResponse:
    """Run ``call`` once per ``Idempotency-Key`` (a retry with the same key gets the first response)."""
    key = request.headers.get("idempotency-key")
    body = request.url.path.encode() + b"\n" + await request.body() if key is not None else b""
    status, payload = await service_of(request).idempotency.run(tenant.name, key, body, call)
    return SafeJSONResponse(payload, status_code=status)
