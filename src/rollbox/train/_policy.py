"""The candidate-pool policy: a softmax over each task's actions, learned by a group-relative policy gradient.

It is not a language model. Its parameters are one logit per (task, action) and one shared preference per action
family (the same hack, or any mutant, across tasks), so what it learns on one task carries to the others — as a
model that learns "return an always-equal object" learns it for every task. The probability of action ``a`` of
task ``t`` is ``softmax(theta[t] + w[family])[a]``.

GRPO: for each task, K actions are sampled; the rewards of those not masked (an infrastructure failure gives none)
are normalised within the group, ``A_i = (r_i - mean) / (std + 1e-6)`` (all zero when the rewards are equal),
and each parameter moves by ``learning_rate`` times the mean over the group of ``A_i * d log pi(a_i) / d param``.
Everything is computed in a fixed order, so the same seed gives the same numbers.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["PoolPolicy", "Sample"]


@dataclass(frozen=True)
class Sample:
    """One graded sample of a group: the index of the action taken and its reward (``None``: masked)."""

    action: int
    reward: float | None


class PoolPolicy:
    """The policy over ``pools`` (task id -> the family of each of its actions), all logits zero at first."""

    def __init__(self, pools: Mapping[str, Sequence[str]], *, learning_rate: float = 1.0) -> None:
        if not learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {learning_rate}")
        self.families = {task: list(families) for task, families in pools.items()}
        self.theta = {task: [0.0] * len(families) for task, families in self.families.items()}
        self.shared: dict[str, float] = {f: 0.0 for families in self.families.values() for f in families}
        self.learning_rate = learning_rate

    def probabilities(self, task: str) -> list[float]:
        """The distribution over ``task``'s actions."""
        logits = [t + self.shared[f] for t, f in zip(self.theta[task], self.families[task], strict=True)]
        top = max(logits)
        weights = [math.exp(x - top) for x in logits]
        total = sum(weights)
        return [w / total for w in weights]

    def sample(self, task: str, count: int, rng: random.Random) -> list[int]:
        """``count`` action indices drawn independently from ``task``'s distribution."""
        probabilities = self.probabilities(task)
        return rng.choices(range(len(probabilities)), weights=probabilities, k=count)

    def update(self, groups: Mapping[str, Sequence[Sample]]) -> None:
        """One GRPO step from every task's group (tasks in sorted order; see the module)."""
        theta_step = {task: [0.0] * len(self.theta[task]) for task in groups}
        shared_step = dict.fromkeys(self.shared, 0.0)
        for task in sorted(groups):
            graded = [s for s in groups[task] if s.reward is not None]
            if len(graded) < 2:
                continue
            rewards = [s.reward for s in graded if s.reward is not None]
            mean = sum(rewards) / len(rewards)
            std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
            if std == 0.0:
                continue
            probabilities = self.probabilities(task)
            families = self.families[task]
            for sample in graded:
                assert sample.reward is not None
                advantage = (sample.reward - mean) / (std + 1e-6) / len(graded)
                for index, p in enumerate(probabilities):
                    gradient = advantage * ((index == sample.action) - p)
                    theta_step[task][index] += gradient
                    shared_step[families[index]] += gradient
        for task, step in theta_step.items():
            self.theta[task] = [t + self.learning_rate * s for t, s in zip(self.theta[task], step, strict=True)]
        scale = self.learning_rate / max(len(groups), 1)
        for family, change in shared_step.items():
            self.shared[family] += scale * change
