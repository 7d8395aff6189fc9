"""Policies against real things: an OpenAI-compatible server on loopback (a scripted model behind it), the scripted
policies, trajectories written and read back, and replays that reproduce the reward."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import rollbox
from rollbox.env import OpenAIPolicy, PolicyError, policy_from_name, read_trajectories, run_episode, write_trajectories
from rollbox.tasks import Task
from test_env_tasks import write_calc_task

Model = Callable[[list[dict[str, Any]]], dict[str, Any]]


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        ],
    }


def fixer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A scripted model that reads calc.py, fixes it, runs the tests and submits, one tool call a reply."""
    replies = sum(m["role"] == "assistant" for m in messages)
    script = [
        tool_call("read_file", path="calc.py"),
        tool_call("edit", path="calc.py", old="a - b", new="a + b"),
        tool_call("run_tests"),
        tool_call("submit"),
    ]
    return script[min(replies, len(script) - 1)]


class Server:
    """A chat-completions server on 127.0.0.1 with a scripted model, faults on demand, and what it saw."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.failures: list[int] = []  # statuses to answer with, before any success
        self.delay_s = 0.0
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                    status = server.failures.pop(0) if server.failures else 200
                # In flight until its answer is written, not after: the client may send its next request as soon
                # as the answer arrives, before this thread would get back to count this one out.
                try:
                    time.sleep(server.delay_s)
                    if self.path != "/v1/chat/completions":
                        status = 404
                    payload = server.answer(body) if status == 200 else {"error": {"message": "scripted failure"}}
                    data = json.dumps(payload).encode()
                finally:
                    with server.lock:
                        server.in_flight -= 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        message = self.model(body["messages"])
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": "ok", "logprob": -0.25}, {"token": "!", "logprob": -1.5}]}
            choice["token_ids"] = [11, 12]
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [choice],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7, "total_tokens": 107},
            "prompt_token_ids": [1, 2, 3],
        }

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server(fixer)
    yield s
    s.close()


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_calc_task(tmp_path_factory.mktemp("calc"))


async def with_policy(policy: OpenAIPolicy, episode: Any) -> Any:
    async with policy:
        return await run_episode(episode, policy)


def test_a_model_behind_a_real_server_solves_the_task_with_tool_calls(calc: Task, server: Server) -> None:
    policy = OpenAIPolicy("scripted-fixer", base_url=server.url, logprobs=True, temperature=0.0)
    trajectory = run(with_policy(policy, rollbox.make(calc)))
    assert trajectory.reward == 1.0 and trajectory.policy == "openai:scripted-fixer"
    assert [t.action["name"] for t in trajectory.turns] == ["read_file", "edit", "run_tests", "submit"]
    first = server.requests[0]
    assert first["model"] == "scripted-fixer" and first["temperature"] == 0.0 and first["logprobs"] is True
    assert [t["function"]["name"] for t in first["tools"]][-1] == "submit"
    assert first["messages"][0]["role"] == "user" and "calc.py subtracts" in first["messages"][0]["content"]
    last = server.requests[-1]["messages"]
    assert (
        last[-1]["role"] == "tool"
        and last[-1]["tool_call_id"] == "call_run_tests"
        and "2 passed" in last[-1]["content"]
    )
    record = trajectory.turns[0].policy
    assert record["tokens"] == ["ok", "!"] and record["logprobs"] == [-0.25, -1.5]
    assert (
        record["token_ids"] == [11, 12] and record["prompt_token_ids"] == [1, 2, 3] and record["completion_tokens"] == 7
    )
    assert policy.usage.requests == 4 and policy.usage.prompt_tokens == 400 and policy.usage.total_tokens == 428


def test_failures_are_retried_and_a_dead_server_is_a_policy_error(calc: Task, server: Server) -> None:
    server.failures = [500, 429]
    policy = OpenAIPolicy("m", base_url=server.url, backoff_s=0.01)
    trajectory = run(with_policy(policy, rollbox.make(calc)))
    assert trajectory.reward == 1.0 and policy.usage.retries == 2 and trajectory.turns[0].policy["retries"] == 2

    server.failures = [503] * 10
    policy = OpenAIPolicy("m", base_url=server.url, retries=2, backoff_s=0.01)
    env = rollbox.make(calc)
    with pytest.raises(PolicyError, match=r"failed 3 times; the last: HTTP 503"):
        run(with_policy(policy, env))
    assert env.state.value == "closed" and env.trajectory.verdict is None  # closed unjudged

    server.failures = [400]
    with pytest.raises(PolicyError, match="refused the request: HTTP 400"):
        run(with_policy(OpenAIPolicy("m", base_url=server.url, backoff_s=0.01), rollbox.make(calc)))
    assert not server.failures  # a 400 is not retried

    server.delay_s = 1.0
    with pytest.raises(PolicyError, match=r"no answer within 0\.2 s"):
        run(
            with_policy(
                OpenAIPolicy("m", base_url=server.url, timeout_s=0.2, retries=1, backoff_s=0.01), rollbox.make(calc)
            )
        )

    with pytest.raises(PolicyError, match="ConnectError"):
        run(with_policy(OpenAIPolicy("m", base_url="http://127.0.0.1:9/v1", retries=0), rollbox.make(calc)))


def test_the_concurrency_limit_holds_over_many_episodes(calc: Task, server: Server) -> None:
    server.delay_s = 0.05

    async def many() -> list[Any]:
        async with OpenAIPolicy("m", base_url=server.url, max_concurrency=2) as policy:
            return await asyncio.gather(*(run_episode(rollbox.make(calc), policy) for _ in range(5)))

    trajectories = run(many())
    assert [t.reward for t in trajectories] == [1.0] * 5
    assert server.most_in_flight == 2 and len(server.requests) == 20


def test_a_reply_without_a_tool_call_is_an_error_the_model_reads(calc: Task) -> None:
    def chatty(messages: list[dict[str, Any]]) -> dict[str, Any]:
        if sum(m["role"] == "assistant" for m in messages) == 0:
            return {"role": "assistant", "content": "I think I will just talk."}
        return tool_call("submit")

    server = Server(chatty)
    try:
        trajectory = run(with_policy(OpenAIPolicy("m", base_url=server.url), rollbox.make(calc)))
    finally:
        server.close()
    assert trajectory.turns[0].observation.error and "no tool call" in trajectory.turns[0].observation.text
    second = server.requests[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": "I think I will just talk."}
    assert second[-1]["role"] == "user" and "no tool call" in second[-1]["content"]
    assert trajectory.status == "failed" and len(trajectory.turns) == 2


def test_trajectories_round_trip_and_replays_reproduce_the_reward(calc: Task, server: Server, tmp_path: Path) -> None:
    fixed = run(with_policy(OpenAIPolicy("m", base_url=server.url, logprobs=True), rollbox.make(calc)))
    cheat = [{"name": "bash", "arguments": {"command": "rm test_calc.py"}}, {"name": "submit", "arguments": "{}"}]
    from rollbox.env import ScriptedPolicy

    failed = run(run_episode(rollbox.make(calc), ScriptedPolicy(cheat, name="cheat")))
    path = write_trajectories(tmp_path / "runs.jsonl", [fixed])
    write_trajectories(path, [failed])
    back = read_trajectories(path)
    assert [t.to_json() for t in back] == [fixed.to_json(), failed.to_json()]
    assert back[0].turns[0].policy["logprobs"] == [-0.25, -1.5] and back[0].turns[1].observation.tool == "edit"

    replayed = run(run_episode(rollbox.make(calc), policy_from_name(f"replay:{path}")))
    assert replayed.reward == fixed.reward == 1.0 and replayed.policy == f"replay:{path}"
    assert [t.observation.text for t in replayed.turns[:2]] == [t.observation.text for t in fixed.turns[:2]]
    write_trajectories(tmp_path / "cheat.jsonl", [failed], append=False)
    again = run(run_episode(rollbox.make(calc), policy_from_name(f"replay:{tmp_path / 'cheat.jsonl'}")))
    assert again.reward == failed.reward and again.status == failed.status

    with pytest.raises(ValueError, match="not a JSON trajectory record"):
        (tmp_path / "bad.jsonl").write_text('{"episode_id": 1\n')
        read_trajectories(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="unknown policy 'greedy'"):
        policy_from_name("greedy")


def test_parquet_trajectories_read_back_exactly(calc: Task, tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    trajectory = run(run_episode(rollbox.make(calc), policy_from_name("reference")))
    path = write_trajectories(tmp_path / "runs.parquet", [trajectory, trajectory])
    back = read_trajectories(path)
    assert [t.to_json() for t in back] == [trajectory.to_json()] * 2
    assert trajectory.reward == 1.0 and [t.action["name"] for t in trajectory.turns] == [
        "write_file",
        "run_tests",
        "submit",
    ]
    replayed = run(run_episode(rollbox.make(calc), policy_from_name(f"replay:{path}")))
    assert replayed.reward == 1.0


#: What a model (or the server's parser of its text) may put in its message: each is the model's turn.
ODD_MESSAGES: list[dict[str, Any]] = [
    {"role": "assistant", "content": None, "tool_calls": {"id": "one", "function": {"name": "bash"}}},
    {"role": "assistant", "content": None, "tool_calls": [{"id": 7, "function": "bash ls"}]},
    {"role": "assistant", "content": None, "tool_calls": ["bash", None, 3]},
    {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "bash", "arguments": {"command": 1}}}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "deep", "function": {"name": "bash", "arguments": "[" * 1000 + "]" * 1000}}],
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "big", "function": {"name": "bash", "arguments": json.dumps({"command": "x" * 2**21})}}],
    },
    {"role": "assistant", "content": [{"type": "text", "text": "parts"}, {"deep": [[[[[]]]]]}]},
    {"role": "assistant", "content": 42, "tool_calls": [{"id": "", "function": {"name": ["bash"], "arguments": None}}]},
]


class OddServer(Server):
    """A server whose model answers with the odd messages above, then submits; with usage and logprobs that are
    no counts and no tokens."""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        replies = sum(m["role"] == "assistant" for m in body["messages"])
        message = ODD_MESSAGES[replies] if replies < len(ODD_MESSAGES) else tool_call("submit")
        choice = {"index": 0, "message": message, "finish_reason": None, "logprobs": {"content": [1, "x", None]}}
        return {"choices": [choice], "usage": {"prompt_tokens": "many", "completion_tokens": -3}}


def test_whatever_the_model_writes_in_its_message_is_its_turn(calc: Task) -> None:
    """Tool calls of every wrong shape, arguments nested 1,000 deep or 2 MB long, content that is no text: error
    observations the model reads, one turn each, never a PolicyError (a failed job) or an exception (infra_error);
    the conversation sent back to the server stays well-formed."""
    server = OddServer(fixer)
    try:
        policy = OpenAIPolicy("m", base_url=server.url, logprobs=True)
        trajectory = run(with_policy(policy, rollbox.make(calc)))
    finally:
        server.close()
    assert trajectory.status == "failed" and trajectory.reward == 0.0 and trajectory.end_reason == "submitted"
    turns = trajectory.turns
    assert len(turns) == 1 + 1 + 3 + 1 + 1 + 1 + 1 + 1 + 1  # every call of every odd message, then submit
    assert all(t.observation.error for t in turns[:-1]) and not turns[-1].observation.error
    texts = [t.observation.text for t in turns]
    assert "missing the argument 'command'" in texts[0] and "nested too deeply" in texts[6]
    assert "a command line holds at most" in texts[7] and "no tool call" in texts[8]
    assert policy.usage.prompt_tokens == 0 and policy.usage.completion_tokens == 0
    assert turns[0].policy["tokens"] == [None, None, None]
    for request in server.requests:
        for message in request["messages"]:
            for sent in message.get("tool_calls", []):
                assert isinstance(sent["id"], str) and sent["id"] and sent["type"] == "function"
                assert isinstance(sent["function"]["name"], str) and isinstance(sent["function"]["arguments"], str)
            assert message.get("content") is None or isinstance(message["content"], str)
