"""One-shot executions (SandboxFusion's ``/run_code``): a warm sandbox per request, the program's files, an optional
compile, the run, and the files fetched back; reported as one ``sandbox.exec`` event."""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace

from rollbox import telemetry
from rollbox.sandbox import (
    ExecResult,
    Limits,
    Openings,
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxPool,
    Status,
)
from rollbox.sandbox.images import Image, ImageError
from rollbox.sandbox.images._languages import Language

from ._config import ServerConfig
from ._guard import Refused
from ._languages import Languages
from ._models import CommandRunResult, CommandRunStatus, RunCodeRequest, RunCodeResponse, RunStatus

__all__ = ["Executor", "StartFailed", "decode_b64"]

_TAIL = 4000


class StartFailed(SandboxError):
    """No sandbox could be made for an execution, and that was reported as a failed ``sandbox.start``: the one
    event that counts it (as the execution's infra error)."""


def decode_b64(text: str, what: str) -> bytes:
    """Strict base64, or a 400 that names what could not be decoded."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Refused(400, f"{what} is not valid base64: {exc}") from None


class Executor:
    """Warm pools for one-shot executions: one per sandbox configuration (limits and image; at most
    ``config.warm_configs`` kept: a request of another gets a fresh sandbox), each of ``config.pool_size``
    sandboxes. A pooled sandbox is reset to its fresh state before it serves again, on an image as on the host."""

    def __init__(self, config: ServerConfig, languages: Languages) -> None:
        self.config = config
        self.languages = languages
        self._pools: OrderedDict[SandboxConfig, SandboxPool] = OrderedDict()
        #: One opening per configuration at a time: requests of other configurations never wait for it.
        self._openings: Openings[SandboxConfig, SandboxPool] = Openings()
        self.waiting = 0
        self.running = 0

    def pool_sizes(self) -> tuple[int, int]:
        """(idle, busy) sandboxes over every warm pool."""
        return sum(p.idle for p in self._pools.values()), sum(p.busy for p in self._pools.values())

    async def close(self) -> None:
        """Close every pool (openings under way are cancelled)."""
        await self._openings.cancel()
        pools, self._pools = list(self._pools.values()), OrderedDict()
        for pool in pools:
            with contextlib.suppress(Exception):
                await pool.close()

    async def _pool(self, config: SandboxConfig, tenant: str) -> SandboxPool | None:
        pool = self._pools.get(config)
        if pool is not None:
            self._pools.move_to_end(config)
            return pool
        if config not in self._openings and len(self._pools) + len(self._openings) >= self.config.warm_configs:
            return None
        return await self._openings.once(config, functools.partial(self._open, config, tenant))

    async def _open(self, config: SandboxConfig, tenant: str) -> SandboxPool:
        # The warm interpreter is the host's Python: an image has its own (or none).
        pool = SandboxPool(config, size=self.config.pool_size, warm_python=config.image is None)
        await self._start(pool.__aenter__(), tenant, pool=True)
        self._pools[config] = pool
        return pool

    async def _start(self, starting: Awaitable[object], tenant: str, **fields: object) -> None:
        """Await a sandbox (or a pool of them) starting, reported as one ``sandbox.start`` event.

        Raises:
            StartFailed: it failed (reported).
        """
        start = time.monotonic()
        try:
            await starting
        except SandboxError as exc:
            elapsed = time.monotonic() - start
            telemetry.emit(
                "sandbox.start", ok=False, wall_s=elapsed, error=str(exc), tenant=tenant, run=self.config.run, **fields
            )
            raise StartFailed(str(exc)) from exc
        elapsed = time.monotonic() - start
        telemetry.emit("sandbox.start", ok=True, wall_s=elapsed, tenant=tenant, run=self.config.run, **fields)

    @contextlib.asynccontextmanager
    async def sandbox(self, limits: Limits, tenant: str, image: Image | None = None) -> AsyncIterator[Sandbox]:
        """A sandbox with these limits (on ``image``'s root, or the host's) for the block: warm from the pool of
        its configuration, or fresh when no more pools are kept.

        Raises:
            Refused: 429, ``config.max_queue`` executions already wait for a sandbox.
            StartFailed: no sandbox could be made (reported as a ``sandbox.start`` event).
            SandboxError: a warm sandbox could not be had from its pool.
        """
        if self.waiting >= self.config.max_queue:
            raise Refused(
                429, f"{self.waiting} executions already wait for a sandbox; retry in a moment", retry_after_s=1.0
            )
        self.waiting += 1
        waiting = True
        try:
            config = SandboxConfig(limits=limits, image=image)
            pool = await self._pool(config, tenant)
            if pool is None:
                fresh = Sandbox(config)
                await self._start(fresh.__aenter__(), tenant)
            async with pool.sandbox() if pool is not None else _closing(fresh) as sb:
                self.waiting -= 1
                waiting = False
                self.running += 1
                try:
                    yield sb
                finally:
                    self.running -= 1
        finally:
            if waiting:  # never got a sandbox (an error, or cancelled meanwhile)
                self.waiting -= 1

    def limits_for(self, request: RunCodeRequest, language: Language) -> tuple[Limits, float, float]:
        """The limits of a ``/run_code`` request, and its compile and run timeouts: the server's defaults raised to
        what the language needs, with the request's memory, and CPU time and wall time bounded by the server's
        maximum timeout (each command gets its own timeout: the request's, else the language's).

        Raises:
            Refused: 400, a timeout or the memory is beyond the server's maximum (or below the sandbox's minimum).
        """
        c = self.config
        for name in ("compile_timeout", "run_timeout"):
            value = getattr(request, name)
            if value > c.max_timeout_s:
                raise Refused(400, f"{name}={value:g} s is above this server's maximum of {c.max_timeout_s:g} s")
        limits = language.limits(c.default_limits)
        memory = min(limits.memory_bytes, c.max_memory_bytes)
        if request.memory_limit_MB != -1:
            memory = request.memory_limit_MB * 2**20
            if not 8 * 2**20 <= memory <= c.max_memory_bytes:
                raise Refused(
                    400,
                    f"memory_limit_MB={request.memory_limit_MB} is outside 8..{c.max_memory_bytes // 2**20} "
                    "(or -1 for the server's default)",
                )
        pids = min(limits.pids, c.max_pids)
        limits = replace(limits, memory_bytes=memory, pids=pids, timeout_s=c.max_timeout_s, cpu_time_s=c.max_timeout_s)
        given = request.model_fields_set  # a timeout the request does not give is the language's
        compile_s = (
            request.compile_timeout if "compile_timeout" in given else min(language.compile_timeout_s, c.max_timeout_s)
        )
        run_s = request.run_timeout if "run_timeout" in given else min(language.run_timeout_s, c.max_timeout_s)
        return limits, compile_s, run_s

    async def run_code(self, request: RunCodeRequest, *, tenant: str, run: str) -> RunCodeResponse:
        """Run a SandboxFusion request; what the program did is in the response, never an exception.

        Raises:
            Refused: 400 for a language this server does not run, bad base64, or limits beyond the maximum; 429
                when too many executions wait.
        """
        try:
            runnable = await self.languages.get(request.language)
        except ImageError as exc:  # the service's fault: an infra error, never the program's
            message = f"the image of {request.language} could not be made: {exc}"
            telemetry.emit(
                "sandbox.exec", run=run, tenant=tenant, endpoint="run_code", status="infra_error", error=message
            )
            return RunCodeResponse(status=RunStatus.SandboxError, message=message)
        language = runnable.language
        limits, compile_s, run_s = self.limits_for(request, language)
        files = {path: decode_b64(data, f"files[{path!r}]") for path, data in request.files.items() if data is not None}
        queued = time.monotonic()
        event: dict[str, object] = {"id": secrets.token_hex(8), "run": run, "tenant": tenant}
        event.update(endpoint="run_code", language=language.name)
        if runnable.image is not None:
            event["image"] = runnable.image.digest
        response = RunCodeResponse(status=RunStatus.Success)
        compiled: ExecResult | None = None
        result: ExecResult | None = None
        try:
            async with self.sandbox(limits, tenant, runnable.image) as sb:
                event["queue_s"] = time.monotonic() - queued
                try:
                    for path, data in files.items():
                        await sb.write_file(path, data)
                    await sb.write_file(language.source, request.code)
                except (ValueError, OSError) as exc:
                    raise Refused(400, f"cannot write the request's files: {exc}") from None
                if language.compile is not None:
                    compiled = await sb.exec(list(language.compile), timeout_s=compile_s)
                    response.compile_result = _command(compiled)
                if compiled is None or compiled.ok:
                    result = await sb.exec(
                        list(language.run),
                        stdin=request.stdin,
                        timeout_s=run_s,
                        warm_python=language.warm_python and runnable.image is None,
                    )
                    response.run_result = _command(result)
                # As SandboxFusion does: what the compile left is fetched too when the run never happened.
                response.files = await self._fetch(sb, request.fetch_files)
        except SandboxError as exc:
            result = ExecResult.infra_error(f"no sandbox could be made: {exc}")
            response.run_result = _command(result)
            if isinstance(exc, StartFailed):  # its sandbox.start counts it: another event would count it twice
                response.status, response.message = _overall(None, result)
                return response
        decisive = result or compiled
        assert decisive is not None
        response.status, response.message = _overall(compiled, result)
        event.update(
            status=decisive.status.value,
            exit_code=decisive.exit_code,
            wall_s=decisive.wall_s,
            cpu_s=decisive.cpu_s,
            peak_memory_bytes=decisive.peak_memory_bytes,
            compile_s=compiled.wall_s if compiled is not None else None,
            error=decisive.error,
        )
        if decisive.status not in (Status.OK,):
            event["stderr"] = decisive.stderr_text[-_TAIL:]
        telemetry.emit("sandbox.exec", **event)
        return response

    async def _fetch(self, sb: Sandbox, paths: list[str]) -> dict[str, str]:
        """The files asked for, base64, in their order; those missing, unreadable, larger than
        ``config.max_file_bytes`` or beyond what is left of ``config.max_fetch_bytes`` are left out (as SandboxFusion
        leaves out those it cannot read)."""
        fetched: dict[str, str] = {}
        left = self.config.max_fetch_bytes
        for path in dict.fromkeys(paths):  # a path named twice is answered once
            # Hard links count again: the answer holds each path's copy.
            with contextlib.suppress(ValueError, OSError):
                data = await sb.read_file(path, max_bytes=min(self.config.max_file_bytes, left))
                fetched[path] = base64.b64encode(data).decode()
                left -= len(data)
        return fetched


@contextlib.asynccontextmanager
async def _closing(sandbox: Sandbox) -> AsyncIterator[Sandbox]:
    try:
        yield sandbox
    finally:
        await sandbox.close()


def _command(result: ExecResult) -> CommandRunResult:
    if result.status is Status.INFRA_ERROR:
        status = CommandRunStatus.Error
    elif result.status in (Status.TIMEOUT, Status.CPU_TIME_LIMIT):
        status = CommandRunStatus.TimeLimitExceeded
    else:
        status = CommandRunStatus.Finished
    code = result.exit_code if result.exit_code is not None else (-result.signal if result.signal else None)
    return CommandRunResult(
        status=status,
        execution_time=round(result.wall_s, 6),
        return_code=code,
        stdout=result.stdout_text,
        stderr=result.stderr_text if result.status is not Status.INFRA_ERROR else (result.error or ""),
        rollbox_status=result.status.value,
    )


def _overall(compiled: ExecResult | None, run: ExecResult | None) -> tuple[RunStatus, str]:
    """SandboxFusion's request status: an infra error is ``SandboxError`` (with its message), any other failure of
    either command ``Failed``."""
    for result in (compiled, run):
        if result is not None and result.status is Status.INFRA_ERROR:
            return RunStatus.SandboxError, result.error or "rollbox or the host failed"
    if any(r is not None and not r.ok for r in (compiled, run)):
        return RunStatus.Failed, ""
    return RunStatus.Success, ""
