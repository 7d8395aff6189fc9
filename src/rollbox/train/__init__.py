"""rollbox.train: the loop — a task stream, rollouts through the scheduler, rewards, an optimizer step, two arms.

    async with Scheduler(runs=["r1"]) as scheduler:
        result = await train(tasks, TrainConfig(run_id="r1"), scheduler=scheduler)
    print(result.to_json())

The learning policy is a softmax over a pool of candidate actions per task (the reference fix, wrong solutions,
reward hacks), carried out through the episode tools and updated by GRPO; each arm trains on its own grader's
rewards: the naive grader's (the test command's exit code in the agent's sandbox) or rollbox's judge's. Importing
this package registers the scheduler's ``rollout`` job kind. Imports :mod:`rollbox.scheduler`,
:mod:`rollbox.curate`, :mod:`rollbox.env`, :mod:`rollbox.judge` and :mod:`rollbox.tasks`.
"""

from rollbox.scheduler import register_kind

from ._actions import Action, ActionKind, action_pool
from ._loop import ARMS, Progress, TrainConfig, TrainResult, train
from ._metrics import IterationStats, Rollout
from ._naive import NaiveCheck, naive_check
from ._policy import PoolPolicy, Sample
from ._rollout import RolloutKind, rollout_payload

register_kind("rollout", "rollbox.train._rollout:RolloutKind")

__all__ = [
    "ARMS",
    "Action",
    "ActionKind",
    "IterationStats",
    "NaiveCheck",
    "PoolPolicy",
    "Progress",
    "Rollout",
    "RolloutKind",
    "Sample",
    "TrainConfig",
    "TrainResult",
    "action_pool",
    "naive_check",
    "rollout_payload",
    "train",
]
