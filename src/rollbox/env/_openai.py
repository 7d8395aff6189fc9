"""A policy that asks an OpenAI-compatible chat-completions server (vLLM, SGLang, hosted endpoints) for tool calls.

Each episode is one conversation: the first observation as the user's message, every tool call the model makes
as an action, and each observation back as that call's ``tool`` message. A reply without a tool call is shown to
the episode as an action without one (an error observation the model then reads as a user message). Whatever
the model wrote inside its message (a tool call of any shape, arguments that are no JSON, a content that is no
text) is its turn, answered by an error observation; only an answer that holds no chat message at all (the
server's failure) is a :class:`PolicyError`. Requests
are retried on connection errors, timeouts, 429 and 5xx answers, with exponential backoff; at most
``max_concurrency`` are in flight at once, whatever the number of episodes. Token usage is counted, and token
ids and logprobs are recorded with each turn when the server returns them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import httpx

from ._episode import Episode
from ._errors import PolicyError
from ._policy import Agent, Decision
from ._types import Observation

__all__ = ["OpenAIPolicy", "Usage"]

_RETRIED = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass
class Usage:
    """What a policy has used so far, over every episode."""

    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt_tokens + self.completion_tokens


class OpenAIPolicy:
    """Chat completions with tool calling, from ``base_url`` (``.../v1``).

    Args:
        model: The model name the server knows.
        base_url: The server's API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key: Sent as a bearer token when given.
        max_concurrency: Requests in flight at once, over all episodes.
        timeout_s: One request's limit; a request past it is retried.
        retries: Attempts after the first, for connection errors, timeouts, 408, 409, 429 and 5xx.
        backoff_s: The first retry's wait, doubled for each later one.
        system_prompt: A system message to open every conversation.
        logprobs: Ask for logprobs (recorded with each turn with the tokens; and token ids, where the server
            sends them).
        sampling: More request fields (``temperature``, ``max_tokens``, ``top_p``, server extensions).

    Use it as an async context manager, or call :meth:`aclose`, to close its connections.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "http://127.0.0.1:8000/v1",
        api_key: str | None = None,
        max_concurrency: int = 16,
        timeout_s: float = 120.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        system_prompt: str | None = None,
        logprobs: bool = False,
        **sampling: Any,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.name = f"openai:{model}"
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.system_prompt = system_prompt
        self.logprobs = logprobs
        self.sampling = sampling
        self.usage = Usage()
        self._limit = asyncio.Semaphore(max_concurrency)
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> OpenAIPolicy:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connections (idempotent); a later request opens new ones."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def start(self, episode: Episode) -> Agent:
        """A conversation for ``episode``."""
        return _Conversation(self, episode.tools)

    async def complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], float, int]:
        """One chat completion: the response, its latency in seconds, and how many retries it took.

        Raises:
            PolicyError: the server refused the request (4xx but 408, 409 and 429), or kept failing past
                ``retries``; the message shows its status and body.
        """
        body: dict[str, Any] = {"model": self.model, "messages": messages, "tools": tools, **self.sampling}
        if self.logprobs:
            body["logprobs"] = True
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers)
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                self.usage.retries += 1
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            async with self._limit:
                begin = time.monotonic()
                try:
                    response = await self._client.post(self.url, json=body)
                except httpx.TimeoutException:
                    problem = f"no answer within {self.timeout_s} s"
                    continue
                except httpx.TransportError as exc:
                    problem = f"{type(exc).__name__}: {exc}"
                    continue
                latency = time.monotonic() - begin
            if response.status_code in _RETRIED:
                problem = f"HTTP {response.status_code}: {response.text[:300]}"
                continue
            if response.status_code >= 400:
                raise PolicyError(f"{self.url} refused the request: HTTP {response.status_code}: {response.text[:500]}")
            try:
                data = response.json()
                if not isinstance(data["choices"][0]["message"], dict):
                    raise TypeError("the message is no JSON object")
            except (ValueError, KeyError, IndexError, TypeError, RecursionError):
                raise PolicyError(f"{self.url} answered with no chat completion: {response.text[:500]}") from None
            self.usage.requests += 1
            usage = _mapping(data.get("usage"))
            self.usage.prompt_tokens += _count(usage.get("prompt_tokens"))
            self.usage.completion_tokens += _count(usage.get("completion_tokens"))
            return data, latency, attempt
        raise PolicyError(f"{self.url} failed {self.retries + 1} times; the last: {problem}. Is the server up?")


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _count(value: object) -> int:
    """A token count as the server gave it; anything that is no count counts nothing."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _record(data: dict[str, Any], latency_s: float, retries: int) -> dict[str, Any]:
    """What a response says about itself: usage, finish reason, and tokens with their ids and logprobs."""
    choice = data["choices"][0]
    usage = _mapping(data.get("usage"))
    record: dict[str, Any] = {
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "finish_reason": choice.get("finish_reason"),
        "latency_s": round(latency_s, 6),
        "retries": retries,
    }
    content = _mapping(choice.get("logprobs")).get("content")
    if isinstance(content, list) and content:
        record["tokens"] = [_mapping(t).get("token") for t in content]
        record["logprobs"] = [_mapping(t).get("logprob") for t in content]
    for key, source in (("token_ids", choice), ("prompt_token_ids", data), ("prompt_token_ids", choice)):
        if source.get(key) is not None:
            record[key] = source[key]
    return record


def _function(call: object) -> dict[str, Any] | None:
    """The ``function`` of a tool call of the model's, when it has one of the right shape."""
    function = call.get("function") if isinstance(call, dict) else None
    return function if isinstance(function, dict) else None


def _action(call: object) -> Any:
    """The action a tool call of the model's asks for; a call of no known shape is handed on as it is, for the
    episode to answer with an error observation."""
    function = _function(call)
    return call if function is None else {"name": function.get("name"), "arguments": function.get("arguments")}


def _echo(call: object, call_id: str) -> dict[str, Any]:
    """The tool call as the conversation sends it back to the server: always well-formed (its name and its
    arguments as text), whatever shape the model gave it, so that a malformed call never makes the server refuse
    the rest of the conversation."""
    function = _function(call) or {}
    name = function.get("name")
    return {
        "id": call_id,
        "type": "function",
        "function": {
            "name": name if isinstance(name, str) else "",
            "arguments": _text(function.get("arguments"), "{}"),
        },
    }


def _text(value: object, empty: str = "") -> str:
    """``value`` as text: a string as it is, anything else as its JSON (``empty`` for None or what JSON cannot
    write)."""
    if isinstance(value, str):
        return value
    try:
        return empty if value is None else json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        return empty


def _call_id(call: object, fallback: str) -> str:
    found = call.get("id") if isinstance(call, dict) else None
    return found if isinstance(found, str) and found else fallback


class _Conversation:
    def __init__(self, policy: OpenAIPolicy, tools: list[dict[str, Any]]) -> None:
        self.policy = policy
        self.tools = tools
        self.messages: list[dict[str, Any]] = []
        if policy.system_prompt:
            self.messages.append({"role": "system", "content": policy.system_prompt})
        self.pending: deque[Decision] = deque()
        self.answering: deque[str | None] = deque()  # the tool call id each pending decision answers

    async def act(self, observation: Observation) -> Decision:
        if not self.messages or self.messages[-1]["role"] in ("system",):
            self.messages.append({"role": "user", "content": observation.text})
        elif self.answering:
            call_id = self.answering.popleft()
            if call_id is None:
                self.messages.append({"role": "user", "content": observation.text})
            else:
                self.messages.append({"role": "tool", "tool_call_id": call_id, "content": observation.text})
        if not self.pending:
            await self._ask()
        return self.pending.popleft()

    async def _ask(self) -> None:
        data, latency, retries = await self.policy.complete(self.messages, self.tools)
        record = _record(data, latency, retries)
        message = data["choices"][0]["message"]
        content = message.get("content")
        content = content if content is None else _text(content)
        calls = message.get("tool_calls") or []
        if not isinstance(calls, list):
            calls = [calls]  # one call not in a list: still the model's call, to be answered
        ids = [_call_id(call, f"call_{len(self.messages)}_{index}") for index, call in enumerate(calls)]
        kept: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            kept["tool_calls"] = [_echo(call, call_id) for call, call_id in zip(calls, ids, strict=True)]
        self.messages.append(kept)
        if not calls:
            self.pending.append(Decision({"name": None, "content": content}, record))
            self.answering.append(None)
            return
        for index, (call, call_id) in enumerate(zip(calls, ids, strict=True)):
            self.pending.append(
                Decision(_action(call), record if index == 0 else {"same_response_as_turn_before": True})
            )
            self.answering.append(call_id)
