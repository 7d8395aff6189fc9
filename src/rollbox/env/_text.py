"""Tool calls written in a model's text, for trainers that hand the environment raw completions.

Understood forms: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (the Hermes and Qwen chat
templates' form), and, without such blocks, a completion that is itself one JSON tool call (optionally in a
```json fence). Anything else holds no tool call.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from ._episode import Episode
from ._types import StepResult

__all__ = ["parse_tool_calls", "step_completion"]

_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_tool_calls(text: str) -> list[Any]:
    """The tool calls in a completion, in order, as actions for :meth:`Episode.step`. A block that is not valid
    JSON is kept as its text, so that the episode answers it with an error observation.

    >>> parse_tool_calls('ok <tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    [{'name': 'submit', 'arguments': {}}]
    """
    blocks = _BLOCK.findall(text)
    if not blocks:
        stripped = text.strip()
        fenced = _FENCE.match(stripped)
        candidate = fenced.group(1) if fenced else stripped
        if not candidate.startswith("{"):
            return []
        blocks = [candidate]
    calls: list[Any] = []
    for block in blocks:
        try:
            calls.append(json.loads(block))
        except (ValueError, RecursionError):  # no JSON, or nested deeper than the parser goes
            calls.append(block)  # the episode answers: "an action is a tool call ..., got '...'"
    return calls


async def step_completion(episode: Episode, text: str) -> StepResult:
    """Carry out every tool call in a completion (one turn each) until the episode ends; a completion without
    one is one turn with an error observation. The observations are joined, each under the call it answers.

    Raises:
        EpisodeStateError: the episode is not running.
    """
    calls = parse_tool_calls(text) or [{"name": None}]
    shown: list[str] = []
    result: StepResult | None = None
    for call in calls:
        result = await episode.step(call)
        name = call.get("name") if isinstance(call, dict) else None
        shown.append(f"[{name}]\n{result.observation.text}" if len(calls) > 1 else result.observation.text)
        if result.done:
            break
    assert result is not None
    joined = dataclasses.replace(result.observation, text="\n\n".join(shown))
    return StepResult(joined, result.reward, result.done, result.info)
