"""Tool calls written in a model's text, for trainers that hand the environment raw completions.

Understood forms: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (the Hermes and Qwen chat
templates' form), and, without such blocks, a completion that is itself one JSON tool call (optionally in a
```json fence). Anything else holds no tool call.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ._episode import Episode
from ._types import StepResult

__all__ = ["parse_tool_calls", "step_completion"]

_OPEN, _CLOSE, _FENCE = "<tool_call>", "</tool_call>", "```"


def _blocks(text: str) -> list[str]:
    """The text of each ``<tool_call>...</tool_call>`` block, stripped, in order (an unclosed one is none). A
    scan, in time linear in the text: a regular expression matching whitespace on both sides of its lazy group took
    cubic time on an unclosed block of whitespace, and a model writes such text."""
    blocks: list[str] = []
    start = text.find(_OPEN)
    while start != -1:
        end = text.find(_CLOSE, start + len(_OPEN))
        if end == -1:
            break
        blocks.append(text[start + len(_OPEN) : end].strip())
        start = text.find(_OPEN, end + len(_CLOSE))
    return blocks


def _unfenced(stripped: str) -> str:
    """The inside of a completion that is one ```json fence (stripped), else the completion."""
    if len(stripped) < 2 * len(_FENCE) or not (stripped.startswith(_FENCE) and stripped.endswith(_FENCE)):
        return stripped
    inside = stripped[len(_FENCE) : -len(_FENCE)]
    return inside.removeprefix("json").strip()


def parse_tool_calls(text: str) -> list[Any]:
    """The tool calls in a completion, in order, as actions for :meth:`Episode.step`. A block that is not valid
    JSON is kept as its text, so that the episode answers it with an error observation.

    >>> parse_tool_calls('ok <tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    [{'name': 'submit', 'arguments': {}}]
    """
    blocks = _blocks(text)
    if not blocks:
        candidate = _unfenced(text.strip())
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
