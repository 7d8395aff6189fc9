"""What ``rollbox run`` says and writes when a run ends: the summary (mean reward, pass@k per task, and wrong
answers apart from dead-policy jobs and infrastructure failures) and ``episodes.parquet``, one typed row per
episode for analysts."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollbox.env import Trajectory, read_trajectories

__all__ = ["RunSummary", "pass_at_k", "read_lines", "summarize", "write_episodes"]

#: The columns ``episodes.parquet`` has before the trajectory's (rollbox.env's Parquet trajectory columns).
RUN_COLUMNS = ("run_id", "sample", "job_id", "state", "attempts", "error")
#: How many tasks the summary's table shows (all of them are in episodes.parquet).
_SHOWN = 25


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from ``n`` samples of which ``c`` passed (Chen et al., 2021)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class _Task:
    scored: list[float] = field(default_factory=list)
    passed: int = 0
    infra: int = 0
    dead: int = 0


@dataclass
class RunSummary:
    """A run's results in the terms a trainer cares about."""

    jobs: int = 0
    #: Episodes the judge scored (a reward to learn from): passed, and wrong answers by status.
    passed: int = 0
    wrong: dict[str, int] = field(default_factory=dict)
    #: Jobs whose policy could not act (the job failed, timed out or was cancelled): no episode, no reward.
    dead_policy: int = 0
    #: Episodes rollbox or the host failed (``infra_error``): masked, never a reward.
    infra: int = 0
    decisions: dict[str, int] = field(default_factory=dict)
    tasks: dict[str, _Task] = field(default_factory=dict)

    @property
    def rewards(self) -> list[float]:
        return [r for t in self.tasks.values() for r in t.scored]

    def ks(self) -> list[int]:
        """1, the powers of two, and the most samples any task has."""
        most = max((len(t.scored) for t in self.tasks.values()), default=0)
        return sorted({k for k in (1, 2, 4, 8, 16, 32, 64, most) if 0 < k <= most})

    def pass_at(self, k: int) -> float | None:
        """pass@k averaged over the tasks with at least ``k`` scored samples."""
        values = [pass_at_k(len(t.scored), t.passed, k) for t in self.tasks.values() if len(t.scored) >= k]
        return sum(values) / len(values) if values else None

    def render(self) -> str:
        """The summary as lines of text."""
        if self.decisions:
            shown = ", ".join(f"{name} {count}" for name, count in sorted(self.decisions.items()))
            return f"decisions: {shown}; infra_error {self.infra} (retry them: rerun with --run-id)\n"
        rewards = self.rewards
        mean = f"{sum(rewards) / len(rewards):.3f} over {len(rewards)} scored episodes" if rewards else "none scored"
        wrong = sum(self.wrong.values())
        kinds = ", ".join(f"{name} {count}" for name, count in sorted(self.wrong.items()))
        lines = [
            f"{self.jobs} jobs; reward: mean {mean}",
            f"outcomes: {self.passed} passed, {wrong} wrong answers"
            + (f" ({kinds})" if kinds else "")
            + f"; {self.dead_policy} dead-policy jobs (the policy could not act: no reward); "
            f"{self.infra} infra_error (masked: never a reward)",
        ]
        ks = self.ks()
        overall = "  ".join(f"pass@{k} {value:.3f}" for k in ks if (value := self.pass_at(k)) is not None)
        if overall:
            lines.append(f"{overall}   (mean over tasks)")
        header = f"{'task':<32} {'n':>3} {'passed':>6} {'reward':>7} " + " ".join(f"{'pass@' + str(k):>7}" for k in ks)
        lines.append(header)
        ordered = sorted(self.tasks.items(), key=lambda item: (_mean(item[1].scored), item[0]))
        for task_id, task in ordered[:_SHOWN]:
            n = len(task.scored)
            cells = " ".join(f"{pass_at_k(n, task.passed, k):>7.3f}" if n >= k else f"{'-':>7}" for k in ks)
            extra = "".join(
                f"  ({count} {what})" for count, what in ((task.dead, "dead policy"), (task.infra, "infra")) if count
            )
            reward = f"{_mean(task.scored):>7.3f}" if n else f"{'-':>7}"
            lines.append(f"{task_id[:32]:<32} {n:>3} {task.passed:>6} {reward} {cells}{extra}")
        if len(ordered) > _SHOWN:
            lines.append(f"... and {len(ordered) - _SHOWN} more tasks (lowest reward first; all in episodes.parquet)")
        return "\n".join(lines) + "\n"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize(lines: Sequence[dict[str, Any]]) -> RunSummary:
    """The summary of a run's results-file lines."""
    summary = RunSummary(jobs=len(lines))
    for line in lines:
        task = summary.tasks.setdefault(str(line["task_id"]), _Task())
        status = line["status"]
        if status == "infra_error":
            summary.infra += 1
            task.infra += 1
        elif line["kind"] == "validate":
            summary.decisions[str(status)] = summary.decisions.get(str(status), 0) + 1
        elif line["state"] != "completed" or line["reward"] is None:
            summary.dead_policy += 1
            task.dead += 1
        else:
            task.scored.append(float(line["reward"]))
            if status == "passed":
                summary.passed += 1
                task.passed += 1
            else:
                summary.wrong[str(status)] = summary.wrong.get(str(status), 0) + 1
    return summary


def read_lines(results: Path) -> list[dict[str, Any]]:
    """The lines of a results file."""
    return [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_episodes(run_id: str, lines: Sequence[dict[str, Any]], directory: Path) -> Path:
    """``directory/episodes.parquet``: one row per episode job, the run's columns (:data:`RUN_COLUMNS`) then the
    trajectory's; a job without a trajectory (its policy could not act) keeps its task, status and reward.

    Raises:
        ImportError: pyarrow is not installed.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rollbox.env._trajectory_table import TRAJECTORY_SCHEMA, trajectory_row

    run_fields = [
        pa.field("run_id", pa.string()),
        pa.field("sample", pa.int64()),
        pa.field("job_id", pa.int64()),
        pa.field("state", pa.string()),
        pa.field("attempts", pa.int64()),
        pa.field("error", pa.string()),
    ]
    rows = []
    for line in lines:
        if line["kind"] != "episode":
            continue
        trajectory = _trajectory(directory, line.get("trajectory"))
        row = trajectory_row(trajectory) if trajectory is not None else {"task_id": line["task_id"]}
        row.update(status=line["status"], reward=line["reward"], run_id=run_id)
        row.update({name: line[name] for name in RUN_COLUMNS if name != "run_id"})
        rows.append(row)
    path = directory / "episodes.parquet"
    partial = path.with_name(".episodes.partial.parquet")
    pq.write_table(pa.Table.from_pylist(rows, schema=pa.schema([*run_fields, *TRAJECTORY_SCHEMA])), partial)
    partial.replace(path)
    return path


def _trajectory(directory: Path, name: str | None) -> Trajectory | None:
    if not name or not (directory / name).is_file():
        return None
    found = read_trajectories(directory / name)
    return found[0] if found else None
