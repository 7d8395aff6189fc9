"""Budgets: how much one episode may use, from the task with overrides.

A task may set its episode's budget in ``task.toml``, beside its other metadata::

    [metadata.episode]
    max_turns = 30
    wall_time = "10m"          # the whole episode
    command_timeout = "30s"    # one tool call's command (default: the task's [limits] timeout)
    output = "512K"            # every observation together
    observation = "16K"        # one observation, before it is cut with a marker
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rollbox.sandbox import parse_duration, parse_size
from rollbox.tasks import Task, TaskFormatError

__all__ = ["Budget"]

_KiB = 1024
_KEYS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "max_turns": ("max_turns", int),
    "wall_time": ("wall_s", parse_duration),
    "command_timeout": ("command_timeout_s", parse_duration),
    "output": ("output_bytes", parse_size),
    "observation": ("observation_bytes", parse_size),
}


@dataclass(frozen=True, kw_only=True)
class Budget:
    """What one episode may use. Each limit, when reached, ends the episode, which is then judged as it stands
    (``info.end_reason`` says which), except ``observation_bytes``, which only cuts one observation."""

    #: Tool calls (malformed ones included); the episode ends after the last (``max_turns``).
    max_turns: int = 50
    #: Seconds from reset to the end; a command never runs past it, and the episode ends then (``wall_time``).
    wall_s: float = 600.0
    #: Seconds one tool call's command may run (status ``timeout``); ``None``: the task's ``[limits] timeout``.
    command_timeout_s: float | None = None
    #: Bytes of observation text the agent may receive in all; the observation that reaches it is cut there and
    #: ends the episode (``output``).
    output_bytes: int = 512 * _KiB
    #: Bytes of one observation; the rest is replaced by a marker giving the full size.
    observation_bytes: int = 16 * _KiB

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"Budget.{field.name} must be a positive finite number, got {value!r}")
        if not isinstance(self.max_turns, int):
            raise ValueError(f"Budget.max_turns must be a whole number, got {self.max_turns!r}")

    @classmethod
    def for_task(cls, task: Task, **overrides: Any) -> Budget:
        """The task's budget (its ``[metadata.episode]`` table, defaults elsewhere) with ``overrides`` on top;
        ``command_timeout_s`` defaults to the task's command timeout.

        Raises:
            TaskFormatError: the table holds an unknown key or a value that is no budget.
            ValueError: an override, or a value of the table, is no budget (the message names it).
        """
        values: dict[str, Any] = {"command_timeout_s": task.limits.timeout_s}
        file = task.path / "task.toml"
        try:
            table = tomllib.loads(file.read_text(encoding="utf-8")).get("metadata", {}).get("episode", {})
        except (OSError, ValueError):
            table = {}  # load_task read this file already: a task made in code has none
        if not isinstance(table, dict):
            raise TaskFormatError(file, f"[metadata.episode]: expected a table, got {table!r}")
        for key, value in table.items():
            if key not in _KEYS:
                raise TaskFormatError(file, f"[metadata.episode]: unknown key {key!r}; expected one of {sorted(_KEYS)}")
            name, parse = _KEYS[key]
            try:
                values[name] = parse(value)
            except (TypeError, ValueError) as exc:
                raise TaskFormatError(file, f"[metadata.episode] {key}: {exc}") from None
        unknown = set(overrides) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            known = [f.name for f in dataclasses.fields(cls)]
            raise ValueError(f"unknown budget {sorted(unknown)}: expected some of {known}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """As a plain dict of its fields."""
        return dataclasses.asdict(self)
