"""What each client method sends and how it reads the answer, written once for the sync and the async client.

A method of the API is a :class:`Call`: the request (method, path, JSON body) and the function that turns the
answer's JSON into the result. :class:`~rollbox.client.Client` and :class:`~rollbox.client.AsyncClient` only
send calls (with retries), so neither holds any of the API's logic.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from rollbox.judge import GradedTest, Outcome, Verdict, VerdictStatus
from rollbox.sandbox import ExecResult, Limits, RollboxError, Status

__all__ = ["Call", "ClientError", "calls", "exec_result", "verdict"]

T = TypeVar("T")


class ClientError(RollboxError):
    """The service refused a request (``status``: its HTTP status; ``detail``: what it said), or could not be
    reached after every retry (``status`` 0)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status}: {detail}" if status else detail)
        self.status = status
        self.detail = detail


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer. ``key`` is its idempotency key: every retry of the call sends the
    same one, so that the service runs it once."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: Mapping[str, str] | None = None
    key: str | None = field(default_factory=lambda: uuid.uuid4().hex)
    #: Error statuses that mean the call's work is done all the same (a retried close finds the sandbox gone).
    done_if: frozenset[int] = frozenset()
    #: The answer is lines of JSON (a stream read to its end), not one JSON value: ``parse`` gets the list.
    lines: bool = False


def _same(value: Any) -> Any:
    return value


def _none(_value: Any) -> None:
    return None


def exec_result(data: Mapping[str, Any]) -> ExecResult:
    """An :class:`ExecResult` from ``rollbox exec --json``'s object (output is text there: UTF-8 again here)."""
    return ExecResult(
        status=Status(data["status"]),
        exit_code=data.get("exit_code"),
        signal=data.get("signal"),
        stdout=str(data.get("stdout", "")).encode("utf-8", "surrogateescape"),
        stderr=str(data.get("stderr", "")).encode("utf-8", "surrogateescape"),
        stdout_truncated=bool(data.get("stdout_truncated")),
        stderr_truncated=bool(data.get("stderr_truncated")),
        wall_s=float(data.get("wall_s", 0.0)),
        cpu_s=float(data.get("cpu_s", 0.0)),
        peak_memory_bytes=data.get("peak_memory_bytes"),
        error=data.get("error"),
    )


def verdict(data: Mapping[str, Any]) -> Verdict:
    """A :class:`Verdict` from ``rollbox grade --json``'s object."""
    return Verdict(
        task_id=data["task_id"],
        status=VerdictStatus(data["status"]),
        reward=data.get("reward"),
        tests=tuple(GradedTest(t["id"], Outcome(t["outcome"])) for t in data.get("tests", ())),
        flags=tuple(data.get("flags", ())),
        duration_s=float(data.get("duration_s", 0.0)),
        error=data.get("error"),
        image=data.get("image"),
        run_status=Status(data["run_status"]) if data.get("run_status") is not None else None,
        running=data.get("running"),
    )


def _b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


class calls:
    """The API's calls."""

    @staticmethod
    def health() -> Call[dict[str, Any]]:
        return Call("GET", "/healthz", _same, key=None)

    @staticmethod
    def stats(of: str | None = None) -> Call[dict[str, Any]]:
        return Call("GET", "/v1/stats", _same, params={"of": of} if of else None, key=None)

    @staticmethod
    def tasks() -> Call[list[str]]:
        return Call("GET", "/v1/tasks", _same, key=None)

    @staticmethod
    def run_code(
        code: str,
        language: str,
        *,
        stdin: str | None,
        run_timeout_s: float,
        compile_timeout_s: float,
        memory_limit_mb: int,
        files: Mapping[str, bytes | str] | None,
        fetch_files: Sequence[str],
    ) -> Call[dict[str, Any]]:
        body = {
            "code": code,
            "language": language,
            "stdin": stdin,
            "run_timeout": run_timeout_s,
            "compile_timeout": compile_timeout_s,
            "memory_limit_MB": memory_limit_mb,
            "files": {path: _b64(data) for path, data in (files or {}).items()},
            "fetch_files": list(fetch_files),
        }
        return Call("POST", "/run_code", _same, json=body)

    @staticmethod
    def submit(dataset: str, problem: int | str, completion: str, config: Mapping[str, Any]) -> Call[dict[str, Any]]:
        body = {"dataset": dataset, "id": problem, "completion": completion, "config": dict(config)}
        return Call("POST", "/submit", _same, json=body)

    @staticmethod
    def grade(task: str, files: Mapping[str, str], run: str | None) -> Call[Verdict]:
        return Call("POST", "/v1/grade", verdict, json={"task": task, "files": dict(files), "run": run})

    @staticmethod
    def create_sandbox(limits: Limits | None, network: str, warm_python: bool) -> Call[str]:
        body: dict[str, Any] = {"network": network, "warm_python": warm_python}
        if limits is not None:
            body.update({k: v for k, v in asdict(limits).items() if k not in ("open_files", "file_size_bytes")})
        return Call("POST", "/v1/sandboxes", lambda data: str(data["id"]), json=body)

    @staticmethod
    def exec(
        sandbox: str, argv: Sequence[str], stdin: bytes | str | None, timeout_s: float | None, env: Mapping[str, str]
    ) -> Call[ExecResult]:
        body: dict[str, Any] = {"argv": list(argv), "timeout_s": timeout_s, "env": dict(env)}
        if isinstance(stdin, bytes):
            body["stdin_b64"] = _b64(stdin)
        else:
            body["stdin"] = stdin
        return Call("POST", f"/v1/sandboxes/{sandbox}/exec", exec_result, json=body)

    @staticmethod
    def write_file(sandbox: str, path: str, data: bytes | str) -> Call[None]:
        body = {"path": path, "content_b64": _b64(data)}
        return Call("PUT", f"/v1/sandboxes/{sandbox}/files", _none, json=body, key=None)

    @staticmethod
    def read_file(sandbox: str, path: str) -> Call[bytes]:
        def parse(data: Any) -> bytes:
            return base64.b64decode(data["content_b64"])

        return Call("GET", f"/v1/sandboxes/{sandbox}/files", parse, params={"path": path}, key=None)

    @staticmethod
    def submit_jobs(jobs: Sequence[Mapping[str, Any]], run: str | None) -> Call[list[dict[str, Any]]]:
        # The service keys a submission by each job's own key, not by Idempotency-Key: a job without one gets one
        # here, once per call, so that a retry of a batch whose answer was lost finds its jobs instead of adding them.
        keyed = [dict(j) if j.get("key") else {**j, "key": uuid.uuid4().hex} for j in jobs]
        return Call("POST", "/v1/jobs", _same, json={"jobs": keyed, "run": run}, key=None)

    @staticmethod
    def job(job_id: int) -> Call[dict[str, Any]]:
        return Call("GET", f"/v1/jobs/{job_id}", _same, key=None)

    @staticmethod
    def cancel_job(job_id: int) -> Call[bool]:
        return Call("POST", f"/v1/jobs/{job_id}/cancel", lambda data: bool(data["cancelled"]), key=None)

    @staticmethod
    def results(run: str, follow: bool) -> Call[list[dict[str, Any]]]:
        params = {"follow": "true" if follow else "false"}
        return Call("GET", f"/v1/runs/{run}/results", _same, params=params, key=None, lines=True)

    @staticmethod
    def create_episode(task: str, budget: Mapping[str, Any]) -> Call[dict[str, Any]]:
        return Call("POST", "/v1/episodes", _same, json={"task": task, **budget})

    @staticmethod
    def step(episode: str, action: Any) -> Call[dict[str, Any]]:
        return Call("POST", f"/v1/episodes/{episode}/step", _same, json={"action": action})

    @staticmethod
    def close_episode(episode: str) -> Call[None]:
        return Call("DELETE", f"/v1/episodes/{episode}", _none, key=None, done_if=frozenset({404}))

    @staticmethod
    def close_sandbox(sandbox: str) -> Call[None]:
        return Call("DELETE", f"/v1/sandboxes/{sandbox}", _none, key=None, done_if=frozenset({404}))
