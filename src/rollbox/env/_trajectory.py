"""Trajectories: every turn of an episode (action, observation, timings, resources) and then its verdict, one
record per episode, written as JSON Lines (the default) or Parquet (``.parquet``, with pyarrow installed).

In Parquet, one row per episode with typed columns an analyst can query without parsing text (pyarrow, DuckDB,
pandas): ``episode_id``, ``task_id``, ``task_path``, ``policy``, ``runtime``, ``started_at``, ``end_reason``,
``status``, ``reward``, ``tests_passed``, ``tests_total``, ``num_turns``, ``prompt_tokens``,
``completion_tokens``, ``cpu_s``, ``peak_memory_bytes``, ``wall_s``, ``reset`` (the first observation, a struct)
and ``turns``, a list of structs (``turn``, ``action``, ``observation`` {``text``, ``tool``, ``error``,
``status``, ``exit_code``, ``truncated``, ``full_bytes``}, ``started_s``, ``wall_s``, ``cpu_s``,
``peak_memory_bytes``, ``reward``, ``shaped_reward``, ``prompt_tokens``, ``completion_tokens``, ``policy``).
What has no fixed shape is JSON text: a turn's ``action`` (as the policy gave it) and ``policy`` record (token
ids, logprobs), the episode's ``budget`` and ``verdict`` (whole, so that the file reads back exactly).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._types import Observation

__all__ = ["Trajectory", "Turn", "read_trajectories", "write_trajectories"]


@dataclass(kw_only=True)
class Turn:
    """One tool call and what came of it."""

    turn: int
    #: The action as the policy gave it (arguments a dict, or the JSON text a server sent).
    action: Any
    observation: Observation
    #: Seconds since the episode's reset when the turn started, and how long it took (grading included).
    started_s: float
    wall_s: float
    #: What the tool's command used, when it ran one.
    cpu_s: float | None = None
    peak_memory_bytes: int | None = None
    reward: float | None = 0.0
    shaped_reward: float | None = None
    #: What the policy recorded with its decision: token counts, token ids, logprobs.
    policy: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """As a plain JSON dict."""
        return {
            "turn": self.turn,
            "action": self.action,
            "observation": self.observation.to_json(),
            "started_s": round(self.started_s, 6),
            "wall_s": round(self.wall_s, 6),
            "cpu_s": self.cpu_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "reward": self.reward,
            "shaped_reward": self.shaped_reward,
            "policy": self.policy,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Turn:
        """The inverse of :meth:`to_json`."""
        return cls(
            turn=data["turn"],
            action=data["action"],
            observation=Observation.from_json(data["observation"]),
            started_s=data["started_s"],
            wall_s=data["wall_s"],
            cpu_s=data.get("cpu_s"),
            peak_memory_bytes=data.get("peak_memory_bytes"),
            reward=data.get("reward"),
            shaped_reward=data.get("shaped_reward"),
            policy=dict(data.get("policy") or {}),
        )


@dataclass(kw_only=True)
class Trajectory:
    """One episode, from reset to verdict."""

    episode_id: str
    task_id: str
    #: The task directory, as given to :func:`rollbox.make`.
    task_path: str
    policy: str | None = None
    #: The runtime layer the episode ran on (its key in the layer store); ``None`` for rollbox's own Python.
    runtime: str | None = None
    #: The digest of the image the episode ran on (``sha256:...``); ``None``: the host's system directories.
    image: str | None = None
    #: Seconds since the epoch at reset.
    started_at: float = 0.0
    budget: dict[str, Any] = field(default_factory=dict)
    reset: Observation | None = None
    turns: list[Turn] = field(default_factory=list)
    end_reason: str | None = None
    #: The judge's verdict as ``rollbox grade --json`` prints it.
    verdict: dict[str, Any] | None = None
    reward: float | None = None
    wall_s: float = 0.0

    @property
    def status(self) -> str | None:
        """The verdict's status (``infra_error``: mask this episode)."""
        return self.verdict["status"] if self.verdict else None

    def to_json(self) -> dict[str, Any]:
        """As one plain JSON object."""
        return {
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "task_path": self.task_path,
            "policy": self.policy,
            "runtime": self.runtime,
            "image": self.image,
            "started_at": self.started_at,
            "budget": self.budget,
            "reset": self.reset.to_json() if self.reset else None,
            "turns": [t.to_json() for t in self.turns],
            "end_reason": self.end_reason,
            "verdict": self.verdict,
            "status": self.status,
            "reward": self.reward,
            "wall_s": round(self.wall_s, 6),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Trajectory:
        """The inverse of :meth:`to_json`."""
        return cls(
            episode_id=data["episode_id"],
            task_id=data["task_id"],
            task_path=data["task_path"],
            policy=data.get("policy"),
            runtime=data.get("runtime"),
            image=data.get("image"),
            started_at=data.get("started_at", 0.0),
            budget=dict(data.get("budget") or {}),
            reset=Observation.from_json(data["reset"]) if data.get("reset") else None,
            turns=[Turn.from_json(t) for t in data.get("turns") or []],
            end_reason=data.get("end_reason"),
            verdict=data.get("verdict"),
            reward=data.get("reward"),
            wall_s=data.get("wall_s", 0.0),
        )


def _parquet() -> Any:
    try:
        import pyarrow.parquet
    except ImportError:
        raise ImportError(
            "Parquet trajectories need pyarrow: pip install 'rollbox[parquet]', or write .jsonl"
        ) from None
    return pyarrow.parquet


def write_trajectories(
    path: str | os.PathLike[str], trajectories: Iterable[Trajectory], *, append: bool = True
) -> Path:
    """Write one record per trajectory to ``path``: Parquet when it ends in ``.parquet``, else JSON Lines
    (appended to, unless ``append=False``; a Parquet file is always written whole). Returns the path.

    Raises:
        ImportError: a ``.parquet`` path without pyarrow installed.
    """
    target = Path(path)
    if target.suffix == ".parquet":
        parquet = _parquet()
        from ._trajectory_table import trajectory_table

        parquet.write_table(trajectory_table(trajectories), target)
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("a" if append else "w", encoding="utf-8") as out:
        for trajectory in trajectories:
            out.write(json.dumps(trajectory.to_json()) + "\n")
    return target


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Every trajectory in a file :func:`write_trajectories` wrote (JSON Lines, or ``.parquet``).

    Raises:
        ValueError: a line or row is not a trajectory (the message gives the file and line).
        ImportError: a ``.parquet`` file without pyarrow installed.
    """
    source = Path(path)
    if source.suffix == ".parquet":
        parquet = _parquet()
        from ._trajectory_table import record_of_row

        # ParquetFile without threads: read_table can abort the interpreter at exit (apache/arrow#34314).
        records = []
        for number, row in enumerate(parquet.ParquetFile(source).read(use_threads=False).to_pylist(), 1):
            try:
                records.append(record_of_row(row))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{source}: row {number} is not a trajectory (missing or bad {exc})") from None
    else:
        records = []
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except ValueError as exc:
                    raise ValueError(f"{source}:{number}: not a JSON trajectory record ({exc})") from None
    trajectories = []
    for number, record in enumerate(records, 1):
        try:
            trajectories.append(Trajectory.from_json(record))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{source}: record {number} is not a trajectory (missing or bad {exc})") from None
    return trajectories
