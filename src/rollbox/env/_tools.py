"""The agent's tools: their OpenAI function-calling schemas, and the checks that turn an action into a call.

An action is a tool call in OpenAI's shape, ``{"name": TOOL, "arguments": {...}}``, where the arguments may also
be a JSON string (as OpenAI-compatible servers send them); the wrapped form ``{"type": "function", "function":
{...}}`` is accepted too. Whatever is wrong with an action becomes an :class:`ActionError`, which the episode
shows the agent as an error observation: a malformed action never ends or crashes an episode, however large,
deep or strange it is (what a model can write is its own turn).
"""

from __future__ import annotations

import json
import posixpath
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["TOOLS", "ActionError", "ToolCall", "parse_action", "show", "workspace_path"]


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_PATH = {"type": "string", "description": "A path relative to /workspace (or absolute, inside /workspace)."}

#: The tools as OpenAI function-calling schemas (``tools=`` of a chat completion request).
TOOLS: list[dict[str, Any]] = [
    _function(
        "bash",
        "Run a shell command in /workspace and show its output and exit status. Every process it starts ends "
        "with it; files persist between calls. There is no network.",
        {"command": {"type": "string", "description": "The command line, run by bash -c."}},
        ["command"],
    ),
    _function(
        "read_file",
        "Show a text file, whole or lines start..end (1-based, inclusive).",
        {
            "path": _PATH,
            "start": {"type": "integer", "description": "First line to show (default 1)."},
            "end": {"type": "integer", "description": "Last line to show (default: the last)."},
        },
        ["path"],
    ),
    _function(
        "write_file",
        "Create or replace a text file with the given content; parent directories are made.",
        {"path": _PATH, "content": {"type": "string", "description": "The whole new content."}},
        ["path", "content"],
    ),
    _function(
        "edit",
        "Replace the one occurrence of `old` in a file with `new`. Fails, changing nothing, unless `old` occurs "
        "exactly once: include enough surrounding lines to make it unique.",
        {
            "path": _PATH,
            "old": {"type": "string", "description": "The exact text to replace."},
            "new": {"type": "string", "description": "The text to put in its place."},
        },
        ["path", "old", "new"],
    ),
    _function(
        "apply_patch",
        "Apply a unified diff (as `diff -u` or `git diff` print it) to files of /workspace. Every hunk must apply, "
        "or nothing changes.",
        {"unified_diff": {"type": "string", "description": "The diff."}},
        ["unified_diff"],
    ),
    _function("run_tests", "Run the task's visible tests against the workspace and show the result.", {}, []),
    _function("submit", "Submit the workspace as it is now for grading. This ends the episode.", {}, []),
]

_SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int}
#: The largest integer argument (a line number): beyond it, a number is no line of any file.
_MAX_INTEGER = 2**63 - 1


class ActionError(Exception):
    """An action that cannot be carried out as given; its message is shown to the agent."""


@dataclass(frozen=True)
class ToolCall:
    """A checked action: a known tool with arguments of the right names and types."""

    name: str
    arguments: Mapping[str, Any]


def parse_action(action: object) -> ToolCall:
    """Check ``action`` against the tools' schemas.

    Raises:
        ActionError: an unknown tool, arguments that are not a JSON object, a missing, unknown or mistyped
            argument, or text that holds a NUL character or a lone surrogate (binary content).
    """
    if isinstance(action, ToolCall):
        action = {"name": action.name, "arguments": dict(action.arguments)}
    if isinstance(action, str):
        _check_readable(action)
    if not isinstance(action, Mapping):
        raise ActionError(f"an action is a tool call {{'name': ..., 'arguments': {{...}}}}, got {show(action)}")
    call: Mapping[str, Any] = action
    if isinstance(call.get("function"), Mapping):  # OpenAI's wrapped form
        call = call["function"]
    name = call.get("name")
    if name is None:
        raise ActionError(f"no tool call: reply with a call of one of {', '.join(_SCHEMAS)} (submit() when done)")
    if not isinstance(name, str) or name not in _SCHEMAS:
        raise ActionError(f"unknown tool {show(name)}: call one of {', '.join(_SCHEMAS)}")
    arguments = call.get("arguments", {})
    if arguments is None or (isinstance(arguments, str) and not arguments):
        arguments = {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ActionError(f"{name}: the arguments are not valid JSON ({exc}): {show(arguments)}") from None
        except (ValueError, RecursionError) as exc:  # valid JSON beyond what the parser holds
            raise ActionError(f"{name}: the arguments cannot be read: {_reason(exc)}: {show(arguments)}") from None
    if not isinstance(arguments, Mapping):
        raise ActionError(f"{name}: the arguments must be a JSON object, got {show(arguments)}")
    schema = _SCHEMAS[name]
    unknown = [key for key in arguments if key not in schema["properties"]]
    if unknown:
        raise ActionError(
            f"{name}: unknown argument {show(unknown[0])}; it takes {', '.join(schema['properties']) or 'none'}"
        )
    for key in schema["required"]:
        if key not in arguments:
            raise ActionError(f"{name}: missing the argument {key!r}")
    for key, value in arguments.items():
        kind = schema["properties"][key]["type"]
        if value is None and key not in schema["required"]:
            continue
        if not isinstance(value, _JSON_TYPES[kind]) or isinstance(value, bool):
            raise ActionError(f"{name}: {key!r} must be a{'n' if kind == 'integer' else ''} {kind}, got {show(value)}")
        if isinstance(value, str):
            _check_text(name, key, value)
        elif isinstance(value, int) and abs(value) > _MAX_INTEGER:
            raise ActionError(f"{name}: {key!r} must be a line number, got an integer of {value.bit_length()} bits")
    return ToolCall(name, {k: v for k, v in arguments.items() if v is not None})


def _check_text(tool: str, key: str, value: str) -> None:
    if "\0" in value:
        raise ActionError(f"{tool}: {key!r} holds a NUL character; only text is accepted (use bash for binary data)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ActionError(f"{tool}: {key!r} is not valid text (a lone surrogate); only text is accepted") from None


def workspace_path(path: str) -> str:
    """``path`` as a clean path relative to /workspace.

    Raises:
        ActionError: it is empty, names /workspace itself, or leads out of it (``..``, another absolute path).
    """
    if path.startswith("/"):
        if path != "/workspace" and not path.startswith("/workspace/"):
            raise ActionError(f"{path!r} is outside /workspace: give a path inside it, such as 'src/main.py'")
        path = path[len("/workspace") :].lstrip("/")
    clean = posixpath.normpath(path) if path else ""
    if clean in ("", ".") or clean == ".." or clean.startswith("../"):
        raise ActionError(f"{path!r} does not name a file inside /workspace: give one such as 'src/main.py'")
    return clean


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother, _SHOWN.maxlong = 3, 160, 160, 40


def show(value: object, limit: int = 200) -> str:
    """``value`` as the agent is shown it: a short repr (at most ``limit`` characters), whatever its size, depth
    or type."""
    try:
        text = _SHOWN.repr(value)
    except Exception:  # a value whose repr fails (an integer of 10,000 digits) is still an action to answer
        text = f"a value of type {type(value).__name__}"
    return text if len(text) <= limit else text[:limit] + "..."


def _check_readable(text: str) -> None:
    """Say why a tool call given as text (one a service could not parse) cannot be read, when it is JSON that
    Python's parser cannot hold; text that is no JSON at all is answered as any other action that is no call."""
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return
    except (RecursionError, ValueError) as exc:
        raise ActionError(
            f"the tool call cannot be read: {_reason(exc)}; call a tool as {{'name': ..., 'arguments': {{...}}}} with "
            f"plain arguments, got {show(text)}"
        ) from None


def _reason(exc: BaseException) -> str:
    """Why JSON could not be read, in words (not Python's advice on its own limits)."""
    if isinstance(exc, RecursionError):
        return "it is nested too deeply (a few hundred levels at most)"
    if "digits" in str(exc):
        return "it holds a number of more than 4,300 digits"
    return str(exc)
