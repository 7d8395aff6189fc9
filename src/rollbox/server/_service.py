"""The service's state: everything one ``rollbox serve`` process holds, started and stopped with it.

With several workers, each holds its own sandboxes, episodes, pools and idempotency cache; the first worker also
holds the service's scheduler (jobs and runs), reports each job's result once, and keeps the live figures, the
metrics and the alerts of the whole service from the events the others relay to it (``_relay``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from rollbox import telemetry
from rollbox.env import Episode
from rollbox.sandbox import ExecResult
from rollbox.sandbox.images import ImageStore
from rollbox.scheduler import recorded_file
from rollbox.telemetry import Alerts, Event, JsonlSink, LiveStats, Sink

from ._config import ServerConfig
from ._execute import Executor
from ._grading import Grader
from ._guard import Guard, IdempotencyCache, Refused
from ._jobs import Jobs
from ._languages import Languages
from ._peers import Owner, Peers
from ._quota import Quota
from ._registry import Registry
from ._relay import Gauge, Received, Relay
from ._sessions import Sessions
from ._tenants import Tenant, TenantStore

__all__ = ["LOCAL", "Service"]

_log = logging.getLogger("uvicorn.error")

#: Whom requests come from when auth is off: every request is the machine's own user's.
LOCAL = Tenant(name="local", admin=True, rate_per_s=1e6, burst=10**6, max_in_flight=8192, max_sandboxes=1024)


class _RunLog(JsonlSink):
    """The service's run's ``events.jsonl``: every event of this process but those that the service's scheduler
    records in that file itself (a job's moves in the service's run), so that each is there once."""

    def write(self, event: Event) -> None:
        if recorded_file(event) != self.path:
            super().write(event)


class Service:
    """Tenants, telemetry (live figures, metrics, alerts, archive, the run's JSONL), executions, sessions and
    grading of one service process.

    Args:
        config: The service's configuration.
        peers: The other workers, when this process is one of several (``None``: the service's only process).
    """

    def __init__(self, config: ServerConfig, peers: Peers | None = None) -> None:
        self.config = config
        self.peers = peers
        #: This process: the worker that the ids of its sandboxes and episodes name.
        self.owner = peers.me if peers is not None and peers.me is not None else Owner(config.node, 0, 0)
        #: Whether this process holds the scheduler and the whole service's figures (the first worker).
        self.primary = self.owner.slot == 0
        self.tenants = TenantStore(config.tenants_path)
        if config.auth_required and self.tenants.empty:
            raise ValueError(
                f"auth is on (the service listens on {config.host}, not a loopback address) but "
                f"{config.tenants_path} has no API key: make one with 'rollbox serve --add-key TENANT', or listen "
                "on 127.0.0.1"
            )
        self.stats = LiveStats()
        self.alerts = Alerts(self.stats, config.alerts)
        self.languages = Languages(config.language_images, ImageStore(Path(config.home) / "images"))
        self.executor = Executor(config, self.languages)
        #: Tenants' sandboxes and episodes open at once, counted over the whole service.
        self.quota = Quota(self.owner, peers)
        self.sessions = Sessions(config, run=config.run, owner=self.owner, quota=self.quota)
        self.episodes: Registry[Episode] = Registry(
            "episode", "episodes", quota=self.quota, idle_timeout_s=config.idle_timeout_s
        )
        self.grader = Grader(config, run=config.run)
        cursor = peers.directory / "results.seq" if peers is not None else None
        self._jobs = Jobs(config, self.grader, quotas=self._quotas(), cursor=cursor) if self.primary else None
        #: What the other workers relayed (the first worker's), and this worker's relay to the first (the others').
        self.received = Received()
        self._relay = Relay(peers) if peers is not None and not self.primary else None
        #: Each tenant's rate and executions in flight: over the whole service, as its sandboxes are; with auth off
        #: the only tenant is the machine's own user (``LOCAL``), whose bounds each worker keeps for itself.
        self.guard = Guard(self.quota if config.auth_required else Quota(self.owner, None))
        self.idempotency = IdempotencyCache()
        self.ready = False
        self._sinks: list[Sink] = []
        self._closers: list[JsonlSink] = []
        self._archive: telemetry.Archive | None = None
        self._ticker: asyncio.Task[None] | None = None

    @property
    def jobs(self) -> Jobs:
        """The service's scheduler and what it reports (the first worker holds it).

        Raises:
            Refused: 503, on another worker (the router sends jobs to the first; this is its restart's window).
        """
        if self._jobs is None:
            restarting = "jobs are served by the service's first worker, which is restarting: retry"
            raise Refused(503, restarting, retry_after_s=1.0)
        return self._jobs

    @property
    def archive(self) -> telemetry.Archive | None:
        """The archive, when one is configured."""
        return self._archive

    def metrics(self) -> telemetry.PrometheusSink:
        """The Prometheus metrics sink (made at start)."""
        sink = next((s for s in self._sinks if isinstance(s, telemetry.PrometheusSink)), None)
        assert sink is not None, "the service has not started"
        return sink

    def figure_sinks(self) -> list[Any]:
        """The sinks that keep the live figures and the metrics (the first worker's; the others relay to them)."""
        return [s for s in self._sinks if s is self.stats or isinstance(s, telemetry.PrometheusSink)]

    async def start(self) -> None:
        """Register the telemetry sinks and start the ticker (alerts, gauges, idle sandboxes)."""
        run_log = _RunLog(Path(self.config.home) / "runs" / self.config.run / "events.jsonl")
        self._closers.append(run_log)
        if self._relay is None:
            metrics = telemetry.PrometheusSink(
                self.stats, firing=lambda: ([a.name for a in self.alerts.firing], self.alerts.reward_shift())
            )
            self._sinks = [self.stats, metrics, run_log]
        else:
            self._sinks = [self._relay, run_log]
        url = self.config.archive
        if url is not None:
            self._archive = await asyncio.to_thread(telemetry.Archive, url, storage_options=self.config.archive_options)
            self._sinks.append(self._archive)
        for sink in self._sinks:
            telemetry.add_sink(sink)
        telemetry.emit("service.start", run=self.config.run, host=self.config.host, port=self.config.port)
        if self._jobs is not None:
            await self._jobs.start()
        self._ticker = asyncio.create_task(self._tick_forever())
        self.ready = True

    async def stop(self) -> None:
        """Close every sandbox, flush the archive, unregister the sinks."""
        self.ready = False
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._jobs is not None:
            await self._jobs.stop()
            await asyncio.to_thread(self._jobs.report_results)
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
        if changed and self._jobs is not None:
            self._jobs.scheduler.placement.set_quotas(self._quotas())

    async def tick(self) -> None:
        """Read the tenants file again if it changed, report new job results, refresh the gauges, evaluate the
        alerts (the first worker; the others relay their events and gauges to it), close idle sandboxes and
        episodes."""
        self.reload_tenants()
        if self._jobs is not None:
            await asyncio.to_thread(self._jobs.report_results)
        if self._relay is not None:
            await self._relay.flush(self.gauges())
        else:
            self.refresh_gauges()
            self.alerts.evaluate(time.time())
            self.quota.forget_dead()
        await self.sessions.reap(time.time())
        await self.episodes.reap(time.time())

    def gauges(self) -> list[Gauge]:
        """This process's gauges, which no event carries: pools, executions, in flight, sandboxes open."""
        idle, busy = self.executor.pool_sizes()
        found: list[Gauge] = [
            ("pool_idle", "", idle),
            ("pool_busy", "", busy),
            ("executions_waiting", "", self.executor.waiting),
            ("executions_running", "", self.executor.running),
            ("sandboxes_open", "", self.sessions.count()),
            ("episodes_open", "", self.episodes.count()),
            ("in_flight", "", sum(self.guard.in_flight.values())),
        ]
        for tenant, count in self.guard.in_flight.items():
            found += [("in_flight", tenant, count), ("sandboxes_open", tenant, self.sessions.count(tenant))]
        return found

    def refresh_gauges(self) -> None:
        """Set the gauges of the whole service: this process's, plus what the other workers last sent."""
        totals: dict[tuple[str, str], float] = defaultdict(float)
        for name, tenant, value in (*self.gauges(), *self.received.gauges()):
            totals[(name, tenant)] += value
        for (name, tenant), value in totals.items():
            self.stats.set_gauge(name, value, tenant=tenant)

    def report_exec(self, result: ExecResult, *, tenant: str, run: str, sandbox: str, argv: list[str]) -> None:
        """Report a command run through the sandboxes API as a ``sandbox.exec`` event."""
        fields: dict[str, object] = {"id": secrets.token_hex(8), "run": run, "tenant": tenant, "sandbox": sandbox}
        fields.update(endpoint="exec", command=" ".join(argv)[:200], status=result.status.value)
        fields.update(exit_code=result.exit_code, wall_s=result.wall_s, cpu_s=result.cpu_s, error=result.error)
        fields.update(peak_memory_bytes=result.peak_memory_bytes)
        if not result.ok:
            fields["stderr"] = result.stderr_text[-4000:]
        telemetry.emit("sandbox.exec", **fields)

    async def authenticate(self, key: str | None, *, admit: bool = True) -> Tenant:
        """The tenant a request comes from, admitted by its rate limit (unless ``admit`` is false: a copy of a request
        admitted already by the worker it reached).

        Raises:
            Refused: 401 without a valid key (when auth is on), 429 over the rate limit, 503 when the rate could not
                be checked (the first worker of several is restarting or not answering).
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
        if admit:
            await self.guard.admit(tenant)
        return tenant
