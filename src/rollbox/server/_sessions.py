"""Sandboxes that live across requests (the sandboxes API): each belongs to one tenant, and one left unused for
``idle_timeout_s`` is closed, so that a client that went away leaves nothing behind for long."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field

from rollbox import telemetry
from rollbox.sandbox import Limits, Sandbox, SandboxError

from ._config import ServerConfig
from ._guard import Refused
from ._models import CreateSandbox, SandboxInfo
from ._tenants import Tenant

__all__ = ["Session", "Sessions"]


@dataclass
class Session:
    """One sandbox of the sandboxes API."""

    id: str
    tenant: str
    sandbox: Sandbox
    created_at: float
    last_used_at: float
    busy: int = 0
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def info(self, idle_timeout_s: float) -> SandboxInfo:
        """As the API shows it."""
        return SandboxInfo(
            id=self.id,
            created_at=self.created_at,
            last_used_at=self.last_used_at,
            idle_timeout_s=idle_timeout_s,
            limits=asdict(self.sandbox.limits),
            network=self.sandbox.network.value,
        )


class Sessions:
    """Every open session, by id."""

    def __init__(self, config: ServerConfig, *, run: str) -> None:
        self.config = config
        self.run = run
        self._sessions: dict[str, Session] = {}

    def count(self, tenant: str | None = None) -> int:
        """Sessions open (of one tenant)."""
        return sum(tenant is None or s.tenant == tenant for s in self._sessions.values())

    def limits(self, request: CreateSandbox) -> Limits:
        """The request's limits over the server's defaults.

        Raises:
            Refused: 400, a limit beyond the server's maximum, or limits the sandbox refuses.
        """
        c = self.config
        bounds = {
            "timeout_s": c.max_timeout_s,
            "cpu_time_s": c.max_timeout_s,
            "memory_bytes": c.max_memory_bytes,
            "pids": c.max_pids,
            "disk_bytes": c.max_disk_bytes,
            "output_bytes": c.max_output_bytes,
        }
        asked = {name: getattr(request, name) for name in bounds if getattr(request, name) is not None}
        for name, value in asked.items():
            if value > bounds[name]:
                raise Refused(400, f"{name}={value:g} is above this server's maximum of {bounds[name]:g}")
        try:
            return Limits(**{**asdict(c.default_limits), **asked})
        except ValueError as exc:
            raise Refused(400, str(exc)) from None

    async def create(self, tenant: Tenant, request: CreateSandbox) -> Session:
        """Open a sandbox for ``tenant``.

        Raises:
            Refused: 400 for limits beyond the server's, 429 when the tenant has ``max_sandboxes`` open.
            SandboxError: the sandbox could not be made (reported as a ``sandbox.start`` event).
        """
        limits = self.limits(request)
        if self.count(tenant.name) >= tenant.max_sandboxes:
            raise Refused(
                429,
                f"tenant {tenant.name!r} already has {tenant.max_sandboxes} sandboxes open (its limit); close some "
                "(DELETE /v1/sandboxes/ID) or let idle ones expire",
                retry_after_s=min(self.config.idle_timeout_s, 60.0),
            )
        sandbox = Sandbox(limits=limits, network=request.network, warm_python=request.warm_python)
        sandbox_id = "sb_" + secrets.token_urlsafe(12)
        start = time.monotonic()
        base = {"sandbox": sandbox_id, "tenant": tenant.name, "run": self.run}
        try:
            await sandbox.__aenter__()
        except SandboxError as exc:
            telemetry.emit("sandbox.start", ok=False, wall_s=time.monotonic() - start, error=str(exc), **base)
            raise
        telemetry.emit("sandbox.start", ok=True, wall_s=time.monotonic() - start, **base)
        now = time.time()
        session = Session(sandbox_id, tenant.name, sandbox, now, now)
        self._sessions[sandbox_id] = session
        return session

    def get(self, tenant: Tenant, sandbox_id: str) -> Session:
        """The tenant's session ``sandbox_id``.

        Raises:
            Refused: 404, there is no such sandbox of this tenant's (another tenant's is not found either).
        """
        session = self._sessions.get(sandbox_id)
        if session is None or session.tenant != tenant.name:
            raise Refused(404, f"no sandbox {sandbox_id!r}: it was closed, expired after being idle, or never existed")
        return session

    def list(self, tenant: Tenant) -> list[Session]:
        """The tenant's sessions."""
        return [s for s in self._sessions.values() if s.tenant == tenant.name]

    @contextlib.asynccontextmanager
    async def use(self, tenant: Tenant, sandbox_id: str) -> AsyncIterator[Session]:
        """The session, marked busy (the idle reaper leaves it alone) for the block."""
        session = self.get(tenant, sandbox_id)
        session.busy += 1
        try:
            yield session
        finally:
            session.busy -= 1
            session.last_used_at = time.time()

    async def close(self, tenant: Tenant, sandbox_id: str) -> None:
        """Close the tenant's session (404 as :meth:`get`)."""
        await self._close(self.get(tenant, sandbox_id), "closed")

    async def _close(self, session: Session, why: str) -> None:
        if self._sessions.pop(session.id, None) is None:
            return
        session.closed = True
        with contextlib.suppress(Exception):  # a sandbox that fails to close is gone from the API either way
            await session.sandbox.close()
        telemetry.emit("sandbox.close", sandbox=session.id, tenant=session.tenant, run=self.run, why=why)

    async def reap(self, now: float) -> int:
        """Close sessions idle for longer than the idle timeout; returns how many."""
        idle = [s for s in self._sessions.values() if s.busy == 0 and now - s.last_used_at > self.config.idle_timeout_s]
        for session in idle:
            await self._close(session, "idle")
        return len(idle)

    async def close_all(self) -> None:
        """Close every session (the service stops)."""
        for session in list(self._sessions.values()):
            await self._close(session, "shutdown")
