"""Trajectories as an Arrow table: one row per episode, typed columns, turns as a nested list (the Parquet form
that :func:`rollbox.env.write_trajectories` writes; the columns are listed in :mod:`rollbox.env._trajectory`).

Needs pyarrow (``pip install 'rollbox[parquet]'``); imported only where a table is made or read.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from ._trajectory import Trajectory

__all__ = ["TRAJECTORY_SCHEMA", "record_of_row", "trajectory_row", "trajectory_table"]

_OBSERVATION = pa.struct(
    [
        ("text", pa.string()),
        ("tool", pa.string()),
        ("error", pa.bool_()),
        ("status", pa.string()),
        ("exit_code", pa.int64()),
        ("truncated", pa.bool_()),
        ("full_bytes", pa.int64()),
    ]
)
_TURN = pa.struct(
    [
        ("turn", pa.int64()),
        ("action", pa.string()),  # JSON: the action as the policy gave it
        ("observation", _OBSERVATION),
        ("started_s", pa.float64()),
        ("wall_s", pa.float64()),
        ("cpu_s", pa.float64()),
        ("peak_memory_bytes", pa.int64()),
        ("reward", pa.float64()),
        ("shaped_reward", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("policy", pa.string()),  # JSON: what the policy recorded (token ids, logprobs)
    ]
)
#: One row per episode.
TRAJECTORY_SCHEMA = pa.schema(
    [
        ("episode_id", pa.string()),
        ("task_id", pa.string()),
        ("task_path", pa.string()),
        ("policy", pa.string()),
        ("runtime", pa.string()),
        ("started_at", pa.float64()),
        ("end_reason", pa.string()),
        ("status", pa.string()),
        ("reward", pa.float64()),
        ("tests_passed", pa.int64()),
        ("tests_total", pa.int64()),
        ("num_turns", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("cpu_s", pa.float64()),
        ("peak_memory_bytes", pa.int64()),
        ("wall_s", pa.float64()),
        ("budget", pa.string()),  # JSON
        ("reset", _OBSERVATION),
        ("verdict", pa.string()),  # JSON: the verdict whole, as ``rollbox grade --json`` prints it
        ("turns", pa.list_(_TURN)),
    ]
)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _total(values: Iterable[Any]) -> Any:
    """The sum of the values known; ``None`` when none is."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def trajectory_row(trajectory: Trajectory) -> dict[str, Any]:
    """One episode as a row of :data:`TRAJECTORY_SCHEMA`."""
    data = trajectory.to_json()
    turns = []
    for turn in data["turns"]:
        policy = turn["policy"]
        turns.append(
            {
                **{k: turn[k] for k in ("turn", "observation", "started_s", "wall_s", "cpu_s", "reward")},
                "action": json.dumps(turn["action"]),
                "peak_memory_bytes": turn["peak_memory_bytes"],
                "shaped_reward": turn["shaped_reward"],
                "prompt_tokens": _count(policy.get("prompt_tokens")),
                "completion_tokens": _count(policy.get("completion_tokens")),
                "policy": json.dumps(policy),
            }
        )
    verdict = data["verdict"] or {}
    return {
        **{k: data[k] for k in ("episode_id", "task_id", "task_path", "policy", "runtime", "started_at")},
        **{k: data[k] for k in ("end_reason", "status", "reward", "wall_s", "reset")},
        "tests_passed": verdict.get("passed"),
        "tests_total": verdict.get("total"),
        "num_turns": len(turns),
        "prompt_tokens": _total(t["prompt_tokens"] for t in turns),
        "completion_tokens": _total(t["completion_tokens"] for t in turns),
        "cpu_s": _total(t["cpu_s"] for t in turns),
        "peak_memory_bytes": max(
            (t["peak_memory_bytes"] for t in turns if t["peak_memory_bytes"] is not None), default=None
        ),
        "budget": json.dumps(data["budget"]),
        "verdict": json.dumps(data["verdict"]) if data["verdict"] is not None else None,
        "turns": turns,
    }


def trajectory_table(trajectories: Iterable[Trajectory]) -> pa.Table:
    """The trajectories as an Arrow table of :data:`TRAJECTORY_SCHEMA`, one row each."""
    return pa.Table.from_pylist([trajectory_row(t) for t in trajectories], schema=TRAJECTORY_SCHEMA)


def record_of_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row read back as :meth:`Trajectory.to_json` made it (the inverse of :func:`trajectory_row`)."""
    turns = [
        {
            **{k: t[k] for k in ("turn", "observation", "started_s", "wall_s", "cpu_s", "peak_memory_bytes")},
            **{k: t[k] for k in ("reward", "shaped_reward")},
            "action": json.loads(t["action"]),
            "policy": json.loads(t["policy"]),
        }
        for t in row["turns"] or []
    ]
    return {
        **{k: row[k] for k in ("episode_id", "task_id", "task_path", "policy", "runtime", "started_at")},
        **{k: row[k] for k in ("end_reason", "reward", "wall_s", "reset")},
        "budget": json.loads(row["budget"]),
        "verdict": json.loads(row["verdict"]) if row["verdict"] is not None else None,
        "turns": turns,
    }
