"""The service's state: everything one ``rollbox serve`` process holds, started and stopped with it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from pathlib import Path

from rollbox import telemetry
from rollbox.env import Episode
from rollbox.sandbox import ExecResult
from rollbox.telemetry import Alerts, JsonlSink, LiveStats, Sink

from ._config import ServerConfig
from ._execute import Executor
from ._grading import Grader
from ._guard import Guard, IdempotencyCache, Refused
from ._jobs import Jobs
from ._languages import available_languages
from ._registry import Registry
from ._sessions import Sessions
from ._tenants import Tenant, TenantStore

__all__ = ["LOCAL", "Service"]

_log = logging.getLogger("uvicorn.error")

#: Whom requests come from when auth is off: every request is the machine's own user's.
LOCAL = Tenant(name="local", admin=True, rate_per_s=1e6, burst=10**6, max_in_flight=8192, max_sandboxes=1024)


class Service:
    """Tenants, telemetry (live figures, metrics, alerts, archive, the run's JSONL), executions, sessions and
    grading of one service process."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tenants = TenantStore(config.tenants_path)
        if config.auth_required and self.tenants.empty:
            raise ValueError(
                f"auth is on (the service listens on {config.host}, not a loopback address) but "
                f"{config.tenants_path} has no API key: make one with 'rollbox serve --add-key TENANT', or listen "
                "on 127.0.0.1"
            )
        self.stats = LiveStats()
        self.alerts = Alerts(self.stats, config.alerts)
        self.languages = available_languages()
        self.executor = Executor(config, self.languages)
        self.sessions = Sessions(config, run=config.run)
        self.episodes: Registry[Episode] = Registry("episode", idle_timeout_s=config.idle_timeout_s)
        self.grader = Grader(config, run=config.run)
        self.jobs = Jobs(config, self.grader, quotas=self._quotas())
        self.guard = Guard()
        self.idempotency = IdempotencyCache()
        self.ready = False
        self._sinks: list[Sink] = []
        self._closers: list[JsonlSink] = []
        self._archive: telemetry.Archive | None = None
        self._ticker: asyncio.Task[None] | None = None

    @property
    def archive(self) -> telemetry.Archive | None:
        """The archive, when one is configured."""
        return self._archive

    def metrics(self) -> telemetry.PrometheusSink:
        """The Prometheus metrics sink (made at start)."""
        sink = next((s for s in self._sinks if isinstance(s, telemetry.PrometheusSink)), None)
        assert sink is not None, "the service has not started"
        return sink

    async def start(self) -> None:
        """Register the telemetry sinks and start the ticker (alerts, gauges, idle sandboxes)."""
        metrics = telemetry.PrometheusSink(
            self.stats, firing=lambda: ([a.name for a in self.alerts.firing], self.alerts.reward_shift())
        )
        run_log = JsonlSink(Path(self.config.home) / "runs" / self.config.run / "events.jsonl")
        self._closers.append(run_log)
        self._sinks = [self.stats, metrics, run_log]
        url = self.config.archive
        if url is not None:
            self._archive = await asyncio.to_thread(telemetry.Archive, url, storage_options=self.config.archive_options)
            self._sinks.append(self._archive)
        for sink in self._sinks:
            telemetry.add_sink(sink)
        telemetry.emit("service.start", run=self.config.run, host=self.config.host, port=self.config.port)
        await self.jobs.start()
        self._ticker = asyncio.create_task(self._tick_forever())
        self.ready = True

    async def stop(self) -> None:
        """Close every sandbox, flush the archive, unregister the sinks."""
        self.ready = False
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        await self.jobs.stop()
        await asyncio.to_thread(self.jobs.report_results)
        await self.sessions.close_all()
        await self.episodes.close_all()
        await self.executor.close()
        await self.grader.close()
        telemetry.emit("service.stop", run=self.config.run)
        for sink in self._sinks:
            telemetry.remove_sink(sink)
        if self._archive is not None:
            await asyncio.to_thread(self._archive.close)
        for closer in self._closers:
            closer.close()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.tick_s)
            try:
                await self.tick()
            except Exception as exc:  # the ticker must outlive any one failure; say what happened
                telemetry.emit("service.error", where="tick", error=f"{type(exc).__name__}: {exc}")

    def _quotas(self) -> dict[str, int]:
        return {t.name: t.max_running_jobs for t in self.tenants.tenants() if t.max_running_jobs is not None}

    def reload_tenants(self) -> None:
        """Read the tenants file again if it changed (keys added or revoked, settings edited while the service
        runs); the scheduler's quotas follow. A file that is no longer valid is reported once, as a
        ``service.error`` event and in the log, and the tenants read before stay in force."""
        try:
            changed = self.tenants.refresh()
        except ValueError as exc:
            _log.warning("rollbox serve: %s; the tenants read before stay in force", exc)
            telemetry.emit("service.error", where="tenants", error=str(exc))
            return
        if changed:
            self.jobs.scheduler.placement.set_quotas(self._quotas())

    async def tick(self) -> None:
        """Read the tenants file again if it changed, report new job results, refresh the gauges, evaluate the
        alerts, close idle sandboxes and episodes."""
        self.reload_tenants()
        await asyncio.to_thread(self.jobs.report_results)
        self.refresh_gauges()
        self.alerts.evaluate(time.time())
        await self.sessions.reap(time.time())
        await self.episodes.reap(time.time())

    def refresh_gauges(self) -> None:
        """Set the gauges no event carries: pools, queue, in flight, sandboxes open."""
        idle, busy = self.executor.pool_sizes()
        self.stats.set_gauge("pool_idle", idle)
        self.stats.set_gauge("pool_busy", busy)
        self.stats.set_gauge("executions_waiting", self.executor.waiting)
        self.stats.set_gauge("executions_running", self.executor.running)
        self.stats.set_gauge("sandboxes_open", self.sessions.count())
        self.stats.set_gauge("episodes_open", self.episodes.count())
        self.stats.set_gauge("in_flight", sum(self.guard.in_flight.values()))
        for tenant, count in self.guard.in_flight.items():
            self.stats.set_gauge("in_flight", count, tenant=tenant)
            self.stats.set_gauge("sandboxes_open", self.sessions.count(tenant), tenant=tenant)

    def report_exec(self, result: ExecResult, *, tenant: str, run: str, sandbox: str, argv: list[str]) -> None:
        """Report a command run through the sandboxes API as a ``sandbox.exec`` event."""
        fields: dict[str, object] = {"id": secrets.token_hex(8), "run": run, "tenant": tenant, "sandbox": sandbox}
        fields.update(endpoint="exec", command=" ".join(argv)[:200], status=result.status.value)
        fields.update(exit_code=result.exit_code, wall_s=result.wall_s, cpu_s=result.cpu_s, error=result.error)
        fields.update(peak_memory_bytes=result.peak_memory_bytes)
        if not result.ok:
            fields["stderr"] = result.stderr_text[-4000:]
        telemetry.emit("sandbox.exec", **fields)

    def authenticate(self, key: str | None) -> Tenant:
        """The tenant a request comes from, admitted by its rate limit.

        Raises:
            Refused: 401 without a valid key (when auth is on), 429 over the rate limit.
        """
        if not self.config.auth_required:
            tenant = LOCAL
        elif not key:
            raise Refused(401, "this service needs an API key: send 'Authorization: Bearer KEY' (or X-API-Key: KEY)")
        else:
            found = self.tenants.authenticate(key)
            if found is None:  # a key made since the file was last read works at once
                self.reload_tenants()
                found = self.tenants.authenticate(key)
            if found is None:
                raise Refused(401, "the API key is not valid (revoked, mistyped, or made for another server)")
            tenant = found
        self.guard.admit(tenant)
        return tenant
