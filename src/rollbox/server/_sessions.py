"""Sandboxes that live across requests (the sandboxes API), one tenant's each, closed when idle."""

from __future__ import annotations

import time
from dataclasses import asdict

from rollbox import telemetry
from rollbox.sandbox import Limits, Sandbox, SandboxError

from ._config import ServerConfig
from ._guard import Refused
from ._models import CreateSandbox, SandboxInfo
from ._peers import Owner, new_id
from ._quota import Quota
from ._registry import Entry, Registry
from ._tenants import Tenant

__all__ = ["Sessions", "info"]


def info(entry: Entry[Sandbox], idle_timeout_s: float) -> SandboxInfo:
    """A sandbox as the API shows it."""
    return SandboxInfo(
        id=entry.id,
        created_at=entry.created_at,
        last_used_at=entry.last_used_at,
        idle_timeout_s=idle_timeout_s,
        limits=asdict(entry.thing.limits),
        network=entry.thing.network.value,
    )


class Sessions(Registry[Sandbox]):
    """The sandboxes API's sandboxes."""

    def __init__(self, config: ServerConfig, *, run: str, owner: Owner, quota: Quota) -> None:
        super().__init__(
            "sandbox", "sandboxes", quota=quota, idle_timeout_s=config.idle_timeout_s, closed=self._report_close
        )
        self.config = config
        self.run = run
        self.owner = owner

    def _report_close(self, entry: Entry[Sandbox], why: str) -> None:
        telemetry.emit("sandbox.close", sandbox=entry.id, tenant=entry.tenant, run=self.run, why=why)

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

    async def create(self, tenant: Tenant, request: CreateSandbox) -> Entry[Sandbox]:
        """Open a sandbox for ``tenant``.

        Raises:
            Refused: 400 for limits beyond the server's, 429 when the tenant has ``max_sandboxes`` open (503 when
                that cannot be known: see :meth:`Registry.opening`).
            SandboxError: the sandbox could not be made (reported as a ``sandbox.start`` event).
        """
        limits = self.limits(request)
        async with self.opening(tenant):
            sandbox = Sandbox(limits=limits, network=request.network, warm_python=request.warm_python)
            sandbox_id = new_id("sb", self.owner)
            start = time.monotonic()
            base = {"sandbox": sandbox_id, "tenant": tenant.name, "run": self.run}
            try:
                await sandbox.__aenter__()
            except SandboxError as exc:
                telemetry.emit("sandbox.start", ok=False, wall_s=time.monotonic() - start, error=str(exc), **base)
                raise
            telemetry.emit("sandbox.start", ok=True, wall_s=time.monotonic() - start, **base)
            return self.add(tenant.name, sandbox_id, sandbox)
