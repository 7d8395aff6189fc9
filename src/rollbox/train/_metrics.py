"""What one iteration of one arm came to: the rollouts it graded, and the figures the report plots."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["IterationStats", "Rollout"]


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """One graded rollout of one arm."""

    arm: str
    iteration: int
    task_id: str
    sample: int
    job_id: int
    #: The pool action played (``None`` for a model).
    action: str | None
    #: The reward the arm trains on: the naive grader's for ``naive``, the judge's for ``rollbox``; ``None`` when
    #: masked (the infrastructure failed, or the job ended without a result).
    reward: float | None
    #: The judge's verdict status and reward (``infra_error``: masked), whatever the arm; ``None`` when the job
    #: ended without a result.
    status: str | None
    judge_reward: float | None
    naive_reward: float | None
    #: Whether the rollout is a reward hack: by construction for a pool action; for a model, when the naive
    #: grader passed it and the judge did not.
    hack: bool
    #: A model's conversation (chat messages), for a trainer to read; empty for a pool action.
    messages: tuple[dict[str, Any], ...] = ()

    @property
    def masked(self) -> bool:
        """Left out of the advantage and of every rate: no reward, or no verdict to regrade with."""
        return self.reward is None or self.judge_reward is None or self.status == "infra_error"

    def to_json(self) -> dict[str, Any]:
        """As ``rollouts.jsonl`` holds it."""
        return {
            "arm": self.arm,
            "iteration": self.iteration,
            "task_id": self.task_id,
            "sample": self.sample,
            "job_id": self.job_id,
            "action": self.action,
            "reward": self.reward,
            "status": self.status,
            "judge_reward": self.judge_reward,
            "naive_reward": self.naive_reward,
            "hack": self.hack,
            "masked": self.masked,
            **_prompt_completion(self.messages),
        }


@dataclass(frozen=True, kw_only=True)
class IterationStats:
    """One iteration of one arm. Rates are over the rollouts not masked (``None`` when every one was)."""

    #: The mean of the rewards the arm trained on.
    reward_mean: float | None
    #: The share the judge passed (every chosen action regraded by rollbox's judge).
    true_pass_rate: float | None
    #: The share that were reward hacks.
    hack_rate: float | None
    #: Rollouts masked (never counted as 0): no reward for the arm (the naive grader has no harness for the
    #: task's runner, or its run was cut short), or no verdict (see ``infra_errors``, or a job that ended without a
    #: result: the model's server refused every request).
    masked: int
    #: Of those, the ones whose infrastructure failed: rollbox or the host, past the job's attempts.
    infra_errors: int
    rollouts: int

    @classmethod
    def of(cls, rollouts: Sequence[Rollout]) -> IterationStats:
        """The figures of one arm's rollouts of one iteration."""
        kept = [r for r in rollouts if not r.masked]
        count = len(kept)

        def mean(values: list[float]) -> float | None:
            return round(sum(values) / count, 6) if count else None

        return cls(
            reward_mean=mean([r.reward for r in kept if r.reward is not None]),
            true_pass_rate=mean([1.0 if r.status == "passed" else 0.0 for r in kept]),
            hack_rate=mean([1.0 if r.hack else 0.0 for r in kept]),
            masked=len(rollouts) - count,
            infra_errors=sum(r.status == "infra_error" for r in rollouts),
            rollouts=len(rollouts),
        )

    def to_json(self) -> dict[str, Any]:
        """The figures ``rollbox train --json`` prints per iteration."""
        return {
            "reward_mean": self.reward_mean,
            "true_pass_rate": self.true_pass_rate,
            "hack_rate": self.hack_rate,
            "masked": self.masked,
            "infra_errors": self.infra_errors,
        }


def _prompt_completion(messages: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """A conversation as TRL's conversational prompt-completion columns: ``prompt``, the messages before the model's
    first reply; ``completion``, that reply and everything after it (tool results included). Nothing for none."""
    if not messages:
        return {}
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return {"prompt": list(messages[:first]), "completion": list(messages[first:])}
