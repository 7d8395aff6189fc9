"""The clients: :class:`Client` (blocking) and :class:`AsyncClient`, over httpx, with safe retries.

    with rollbox.Client("http://127.0.0.1:8080", api_key=KEY) as client:
        answer = client.run_code("print(6 * 7)")                      # SandboxFusion's response shape
        verdict = client.grade("add", {"solution.py": source})         # a rollbox.judge.Verdict
        with client.sandbox(limits=rollbox.Limits(timeout_s=5)) as sb:  # a remote sandbox, used like a local one
            sb.write_file("main.py", "print(1)")
            result = sb.exec(["python3", "main.py"])                   # a rollbox.ExecResult

A request that fails on the way (connection refused or reset, a timeout) or that the service answers with 429,
502, 503 or 504 is sent again, up to ``retries`` times, after the service's ``Retry-After`` or an exponential
backoff. Requests that run something carry an ``Idempotency-Key`` that every retry repeats, so that a retry of a
request whose answer was lost gets that answer instead of running it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import httpx

from rollbox.judge import Verdict
from rollbox.sandbox import ExecResult, Limits

from ._calls import Call, ClientError, calls

__all__ = ["AsyncClient", "AsyncRemoteSandbox", "Client", "RemoteSandbox"]

T = TypeVar("T")
_RETRY_STATUSES = frozenset({429, 502, 503, 504})


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _request(call: Call[Any]) -> dict[str, Any]:
    headers = {"Idempotency-Key": call.key} if call.key else {}
    return {"method": call.method, "url": call.path, "json": call.json, "params": call.params, "headers": headers}


def _outcome(call: Call[T], response: httpx.Response) -> T:
    if response.status_code in call.done_if:
        return call.parse(None)
    if response.status_code >= 400:
        try:
            detail = str(response.json().get("detail"))
        except ValueError:
            detail = response.text[:500]
        raise ClientError(response.status_code, detail)
    if call.lines:
        return call.parse([json.loads(line) for line in response.text.splitlines() if line.strip()])
    return call.parse(response.json() if response.content else None)


def _wait_s(attempt: int, response: httpx.Response | None) -> float:
    """How long to wait before retry ``attempt`` (1, 2, ...): the service's Retry-After in seconds (0 to 30), or
    0.2 s doubling (up to 10 s) when there is none or it is not a finite number (an HTTP date, ``nan``)."""
    if response is not None:
        with contextlib.suppress(KeyError, ValueError):
            given = float(response.headers["retry-after"])
            if math.isfinite(given):  # a proxy's or a misconfigured service's value must not end the client
                return min(max(given, 0.0), 30.0)
    return min(0.2 * 2.0 ** (attempt - 1), 10.0)


class Client:
    """A blocking client of a rollbox service (see the module's documentation).

    Args:
        base_url: The service, e.g. ``http://127.0.0.1:8080``.
        api_key: The tenant's key, when the service has auth on.
        timeout_s: How long one request may take (running code included).
        retries: How many times a failed request is sent again.
    """

    def __init__(
        self, base_url: str, *, api_key: str | None = None, timeout_s: float = 120.0, retries: int = 3
    ) -> None:
        self.retries = retries
        self._http = httpx.Client(base_url=base_url, headers=_headers(api_key), timeout=timeout_s)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections (idempotent)."""
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one call, retrying it as the module's documentation says.

        Raises:
            ClientError: the service refused it, or could not be reached after every retry.
        """
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(**_request(call))
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise ClientError(0, f"cannot reach {self._http.base_url}: {exc!r}") from exc
                time.sleep(_wait_s(attempt + 1, None))
                continue
            if response.status_code not in _RETRY_STATUSES or attempt == self.retries:
                return _outcome(call, response)
            time.sleep(_wait_s(attempt + 1, response))
        raise AssertionError("unreachable")

    def health(self) -> dict[str, Any]:
        """``/healthz``."""
        return self.send(calls.health())

    def stats(self, of: str | None = None) -> dict[str, Any]:
        """The live figures (``/v1/stats``): the caller's, or for an admin the service's (or tenant ``of``'s)."""
        return self.send(calls.stats(of))

    def tasks(self) -> list[str]:
        """The ids of the tasks the service grades."""
        return self.send(calls.tasks())

    def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        stdin: str | None = None,
        run_timeout_s: float = 10.0,
        compile_timeout_s: float = 10.0,
        memory_limit_mb: int = -1,
        files: Mapping[str, bytes | str] | None = None,
        fetch_files: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Run a program as SandboxFusion's ``/run_code`` does; answers its response object."""
        return self.send(
            calls.run_code(
                code,
                language,
                stdin=stdin,
                run_timeout_s=run_timeout_s,
                compile_timeout_s=compile_timeout_s,
                memory_limit_mb=memory_limit_mb,
                files=files,
                fetch_files=fetch_files,
            )
        )

    def submit(
        self, dataset: str, problem: int | str, completion: str, config: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Grade a completion as SandboxFusion's ``/submit`` does; answers its ``EvalResult`` object."""
        return self.send(calls.submit(dataset, problem, completion, config or {}))

    def grade(self, task: str, files: Mapping[str, str], *, run: str | None = None) -> Verdict:
        """Grade ``files`` against the service's task ``task``."""
        return self.send(calls.grade(task, files, run))

    def submit_jobs(self, jobs: Sequence[Mapping[str, Any]], *, run: str | None = None) -> list[dict[str, Any]]:
        """Submit jobs (``{"kind": "exec" | "grade", "payload": ..., "key": ...}``) to the service's scheduler. A job
        without a ``key`` gets a random one for this call, so that a retry never submits it twice; give keys of
        your own for a later call to find the same jobs."""
        return self.send(calls.submit_jobs(jobs, run))

    def job(self, job_id: int) -> dict[str, Any]:
        """A job: its state, its moves, its result once it has one."""
        return self.send(calls.job(job_id))

    def cancel_job(self, job_id: int) -> bool:
        """Cancel a job; whether it was (one already final is not)."""
        return self.send(calls.cancel_job(job_id))

    def results(self, run: str, *, follow: bool = True) -> list[dict[str, Any]]:
        """The run's results (``{"seq", "job", "result"}``): with ``follow``, once every job of the run is final."""
        return self.send(calls.results(run, follow))

    @contextlib.contextmanager
    def episode(self, task: str, **budget: Any) -> Iterator[dict[str, Any]]:
        """An episode of the service's task ``task`` for the block (closed when it ends): the created episode's
        ``{"id", "observation", "tools", ...}``; step it with :meth:`step`."""
        created = self.send(calls.create_episode(task, budget))
        try:
            yield created
        finally:
            self.send(calls.close_episode(created["id"]))

    def step(self, episode: str, action: Any) -> dict[str, Any]:
        """One tool call of an episode: ``{"observation", "reward", "done", "info"}``."""
        return self.send(calls.step(episode, action))

    @contextlib.contextmanager
    def sandbox(
        self, *, limits: Limits | None = None, network: str = "none", warm_python: bool = False
    ) -> Iterator[RemoteSandbox]:
        """A sandbox on the service for the block, closed when it ends."""
        sandbox = RemoteSandbox(self, self.send(calls.create_sandbox(limits, network, warm_python)))
        try:
            yield sandbox
        finally:
            sandbox.close()


class RemoteSandbox:
    """A sandbox on the service, used as a local :class:`rollbox.Sandbox` is."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self.client, self.id = client, sandbox_id

    def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """Run a command to its end (see :meth:`rollbox.Sandbox.exec`)."""
        return self.client.send(calls.exec(self.id, argv, stdin, timeout_s, env or {}))

    def write_file(self, path: str, data: bytes | str) -> None:
        """Write a file (relative: under /workspace)."""
        self.client.send(calls.write_file(self.id, path, data))

    def read_file(self, path: str) -> bytes:
        """Read a file (relative: under /workspace)."""
        return self.client.send(calls.read_file(self.id, path))

    def close(self) -> None:
        """Close the sandbox (idempotent)."""
        self.client.send(calls.close_sandbox(self.id))


class AsyncClient:
    """The asynchronous client: :class:`Client`'s methods, awaited."""

    def __init__(
        self, base_url: str, *, api_key: str | None = None, timeout_s: float = 120.0, retries: int = 3
    ) -> None:
        self.retries = retries
        self._http = httpx.AsyncClient(base_url=base_url, headers=_headers(api_key), timeout=timeout_s)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (idempotent)."""
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """As :meth:`Client.send`."""
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.request(**_request(call))
            except httpx.TransportError as exc:
                if attempt == self.retries:
                    raise ClientError(0, f"cannot reach {self._http.base_url}: {exc!r}") from exc
                await asyncio.sleep(_wait_s(attempt + 1, None))
                continue
            if response.status_code not in _RETRY_STATUSES or attempt == self.retries:
                return _outcome(call, response)
            await asyncio.sleep(_wait_s(attempt + 1, response))
        raise AssertionError("unreachable")

    async def health(self) -> dict[str, Any]:
        """As :meth:`Client.health`."""
        return await self.send(calls.health())

    async def stats(self, of: str | None = None) -> dict[str, Any]:
        """As :meth:`Client.stats`."""
        return await self.send(calls.stats(of))

    async def tasks(self) -> list[str]:
        """As :meth:`Client.tasks`."""
        return await self.send(calls.tasks())

    async def run_code(
        self,
        code: str,
        language: str = "python",
        *,
        stdin: str | None = None,
        run_timeout_s: float = 10.0,
        compile_timeout_s: float = 10.0,
        memory_limit_mb: int = -1,
        files: Mapping[str, bytes | str] | None = None,
        fetch_files: Sequence[str] = (),
    ) -> dict[str, Any]:
        """As :meth:`Client.run_code`."""
        return await self.send(
            calls.run_code(
                code,
                language,
                stdin=stdin,
                run_timeout_s=run_timeout_s,
                compile_timeout_s=compile_timeout_s,
                memory_limit_mb=memory_limit_mb,
                files=files,
                fetch_files=fetch_files,
            )
        )

    async def submit(
        self, dataset: str, problem: int | str, completion: str, config: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """As :meth:`Client.submit`."""
        return await self.send(calls.submit(dataset, problem, completion, config or {}))

    async def grade(self, task: str, files: Mapping[str, str], *, run: str | None = None) -> Verdict:
        """As :meth:`Client.grade`."""
        return await self.send(calls.grade(task, files, run))

    async def submit_jobs(self, jobs: Sequence[Mapping[str, Any]], *, run: str | None = None) -> list[dict[str, Any]]:
        """As :meth:`Client.submit_jobs`."""
        return await self.send(calls.submit_jobs(jobs, run))

    async def job(self, job_id: int) -> dict[str, Any]:
        """As :meth:`Client.job`."""
        return await self.send(calls.job(job_id))

    async def cancel_job(self, job_id: int) -> bool:
        """As :meth:`Client.cancel_job`."""
        return await self.send(calls.cancel_job(job_id))

    async def results(self, run: str, *, follow: bool = True) -> list[dict[str, Any]]:
        """As :meth:`Client.results`."""
        return await self.send(calls.results(run, follow))

    @contextlib.asynccontextmanager
    async def episode(self, task: str, **budget: Any) -> AsyncIterator[dict[str, Any]]:
        """As :meth:`Client.episode`."""
        created = await self.send(calls.create_episode(task, budget))
        try:
            yield created
        finally:
            await self.send(calls.close_episode(created["id"]))

    async def step(self, episode: str, action: Any) -> dict[str, Any]:
        """As :meth:`Client.step`."""
        return await self.send(calls.step(episode, action))

    @contextlib.asynccontextmanager
    async def sandbox(
        self, *, limits: Limits | None = None, network: str = "none", warm_python: bool = False
    ) -> AsyncIterator[AsyncRemoteSandbox]:
        """As :meth:`Client.sandbox`."""
        sandbox = AsyncRemoteSandbox(self, await self.send(calls.create_sandbox(limits, network, warm_python)))
        try:
            yield sandbox
        finally:
            await sandbox.close()


class AsyncRemoteSandbox:
    """As :class:`RemoteSandbox`, awaited."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self.client, self.id = client, sandbox_id

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
    ) -> ExecResult:
        """As :meth:`RemoteSandbox.exec`."""
        return await self.client.send(calls.exec(self.id, argv, stdin, timeout_s, env or {}))

    async def write_file(self, path: str, data: bytes | str) -> None:
        """As :meth:`RemoteSandbox.write_file`."""
        await self.client.send(calls.write_file(self.id, path, data))

    async def read_file(self, path: str) -> bytes:
        """As :meth:`RemoteSandbox.read_file`."""
        return await self.client.send(calls.read_file(self.id, path))

    async def close(self) -> None:
        """As :meth:`RemoteSandbox.close`."""
        await self.client.send(calls.close_sandbox(self.id))
