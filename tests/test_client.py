"""rollbox.Client and AsyncClient against a real service: the same calls, sync and async; remote sandboxes used
as local ones; verdicts and results as rollbox's own types; retries that do not run a call twice."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rollbox
from rollbox.client import AsyncClient, ClientError
from rollbox.client._client import _wait_s
from rollbox.judge import VerdictStatus
from serving import Running, running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    home = tmp_path_factory.mktemp("home")
    task = home / "tasks" / "inc"
    (task / "workspace").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(
        'id = "inc"\n[grading]\nrunner = "function"\nmodule = "m.py"\nentry_point = "inc"\n'
    )
    (task / "workspace" / "m.py").write_text("def inc(x):\n    ...\n")
    (task / "tests" / "cases.jsonl").write_text(json.dumps({"args": [1], "expected": 2}) + "\n")
    with running(rollbox.server.ServerConfig(home=home, tasks_dir=home / "tasks", pool_size=2)) as r:
        yield r


def test_sync_client(server: Running) -> None:
    with rollbox.Client(server.url) as client:
        assert client.health() == {"status": "ok", "worker": "0.0"}  # the worker that answered: slot 0, generation 0
        answer = client.run_code("import sys; print(sys.stdin.read()[::-1])", stdin="abc", files={"x": b"\x00"})
        assert answer["status"] == "Success" and answer["run_result"]["stdout"] == "cba\n"
        with client.sandbox(limits=rollbox.Limits(timeout_s=5, memory_bytes=128 * 2**20)) as sb:
            sb.write_file("main.py", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())")
            result = sb.exec(["python3", "main.py"], stdin=b"\xff\x00bytes")
            assert isinstance(result, rollbox.ExecResult) and result.ok and result.stdout.endswith(b"bytes")
            assert sb.read_file("main.py").startswith(b"import sys")
            slow = sb.exec(["sleep", "5"], timeout_s=0.5)
            assert slow.status is rollbox.Status.TIMEOUT
            sid = sb.id
        with pytest.raises(ClientError) as gone:
            client.send(rollbox.client._calls.calls.exec(sid, ["true"], None, None, {}))
        assert gone.value.status == 404
        verdict = client.grade("inc", {"m.py": "def inc(x):\n    return x + 1\n"})
        assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0 and verdict.passed == 1
        assert client.tasks() == ["inc"]
        assert client.stats()["verdicts"]["passed"] >= 1


def test_async_client(server: Running) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as client:
            answers = await asyncio.gather(*(client.run_code(f"print({i} * 2)") for i in range(8)))
            assert [a["run_result"]["stdout"] for a in answers] == [f"{i * 2}\n" for i in range(8)]
            async with client.sandbox() as sb:
                await sb.write_file("a.txt", "hello")
                assert (await sb.exec(["cat", "a.txt"])).stdout == b"hello"
                assert await sb.read_file("a.txt") == b"hello"
            verdict = await client.grade("inc", {"m.py": "def inc(x):\n    return x\n"})
            assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0
            submitted = await client.submit("tasks", "inc", "```python\ndef inc(x):\n    return x + 1\n```")
            assert submitted["accepted"] is True

    asyncio.run(main())


def test_a_lost_answer_is_not_run_twice(server: Running) -> None:
    """A retry (the same call, so the same idempotency key) gets the first answer: the command ran once."""
    with rollbox.Client(server.url) as client, client.sandbox() as sb:
        call = rollbox.client._calls.calls.exec(sb.id, ["sh", "-c", "echo x >> n; wc -l < n"], None, None, {})
        first, retried = client.send(call), client.send(call)
        assert first.stdout == retried.stdout == b"1\n"
        assert sb.exec(["wc", "-l", "n"]).stdout.startswith(b"1 ")


class _LosesTheFirstAnswer(httpx.HTTPTransport):
    """The service serves every request; the first answer is lost on the way back (a read timeout)."""

    lost = False

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if self.lost:
            return response
        self.lost = True
        response.read()
        response.close()
        raise httpx.ReadTimeout("the answer was lost after the service committed", request=request)


def test_a_batch_whose_answer_was_lost_is_submitted_once(server: Running) -> None:
    job = {"kind": "exec", "payload": {"argv": ["true"]}}
    with rollbox.Client(server.url) as client:
        client._http.close()
        client._http = httpx.Client(base_url=server.url, transport=_LosesTheFirstAnswer(), timeout=60)
        submitted = client.submit_jobs([job, job], run="lost-answer")
    listed = httpx.get(f"{server.url}/v1/jobs", params={"run": "lost-answer"}).json()
    assert len({j["id"] for j in submitted}) == 2 and [j["id"] for j in listed] == [j["id"] for j in submitted]


def test_an_unreachable_service_is_a_client_error(tmp_path: Path) -> None:
    with rollbox.Client("http://127.0.0.1:9", retries=1) as client, pytest.raises(ClientError) as refused:
        client.health()
    assert refused.value.status == 0 and "cannot reach" in str(refused.value)


def test_jobs_and_episodes_through_the_client(server: Running) -> None:
    with rollbox.Client(server.url) as client:
        jobs = [{"kind": "grade", "payload": {"task": "inc", "files": {"m.py": "def inc(x):\n    return x + 1\n"}}}]
        submitted = client.submit_jobs(jobs, run="client-run")
        results = client.results("client-run")
        assert [r["job"]["id"] for r in results] == [submitted[0]["id"]]
        assert results[0]["result"]["status"] == "passed" and client.job(submitted[0]["id"])["state"] == "completed"
        assert client.cancel_job(submitted[0]["id"]) is False  # final already
        with client.episode("inc", max_turns=3) as episode:
            write = {"name": "write_file", "arguments": {"path": "m.py", "content": "def inc(x):\n    return x + 1\n"}}
            assert client.step(episode["id"], write)["done"] is False
            end = client.step(episode["id"], {"name": "submit", "arguments": {}})
            assert end["done"] is True and end["reward"] == 1.0


#: Retry-After values as they come: numbers of every kind, written as Python or a proxy writes them, and any text.
_RETRY_AFTER = st.one_of(
    st.floats().map(str),
    st.integers(-(10**30), 10**30).map(str),
    st.sampled_from(["nan", "-nan", "inf", "-inf", "1e999", "-0", " 3 ", "Wed, 21 Oct 2015 07:28:00 GMT"]),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40),
)


@given(_RETRY_AFTER)
def test_a_retry_waits_from_0_to_30_s_whatever_retry_after_says(value: str) -> None:
    response = httpx.Response(503, headers={"Retry-After": value})
    assert 0.0 <= _wait_s(1, response) <= 30.0


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_or_nan_retry_after_is_retried_not_a_crash(value: str) -> None:
    answers = []

    def busy(request: httpx.Request) -> httpx.Response:
        answers.append(request.url.path)
        return httpx.Response(503, headers={"Retry-After": value}, json={"detail": "busy"})

    with rollbox.Client("http://svc", retries=1) as client:
        client._http.close()
        client._http = httpx.Client(base_url="http://svc", transport=httpx.MockTransport(busy))
        with pytest.raises(ClientError) as refused:
            client.health()
    assert refused.value.status == 503 and answers == ["/healthz", "/healthz"]
