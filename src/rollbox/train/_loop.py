"""The loop: sample K rollouts per task from each arm's policy, run them as jobs through the scheduler, take each
arm's rewards, make one GRPO step per arm, and go on to the next iteration.

Both arms see the same tasks with the same seed: at each iteration, each task's draws come from a random stream
named by (seed, iteration, task), so both arms start from the same rollouts and part only as their policies do.
Jobs carry keys named by (run, iteration, arm, task, sample): a run started again with its run id finds the jobs
it finished and runs only the rest, with the same draws.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollbox.scheduler import Job, JobResult, JobSpec, Scheduler, run_dir
from rollbox.tasks import Task

from ._actions import Action, ActionKind, pool_for
from ._metrics import IterationStats, Rollout
from ._policy import PoolPolicy, Sample
from ._rollout import rollout_payload

__all__ = ["ARMS", "Progress", "TrainConfig", "TrainResult", "train"]

#: The two arms: the naive grader's rewards, and rollbox's judge's.
ARMS = ("naive", "rollbox")


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """How the loop runs."""

    iterations: int = 8
    #: Rollouts per task per iteration (GRPO's group size).
    samples: int = 4
    seed: int = 0
    learning_rate: float = 3.0
    #: Mutants of the reference in each task's pool.
    max_mutants: int = 3
    #: ``pool`` (the candidate-pool policy, learned) or ``openai:MODEL`` (a served model, not updated here).
    policy: str = "pool"
    base_url: str | None = None
    max_attempts: int = 3
    run_id: str = "train"

    def __post_init__(self) -> None:
        for name in ("iterations", "samples", "max_attempts"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainConfig.{name} must be at least 1, got {getattr(self, name)}")
        if self.samples < 2 and self.policy == "pool":
            raise ValueError("TrainConfig.samples must be at least 2: GRPO compares the samples of a group")
        if self.policy != "pool" and not (self.policy.startswith("openai:") and self.policy != "openai:"):
            raise ValueError(f"TrainConfig.policy is 'pool' or 'openai:MODEL', got {self.policy!r}")


@dataclass
class Progress:
    """Where the loop is, for a live display."""

    iteration: int
    iterations: int
    jobs: int
    done: int = 0
    failed: int = 0
    infra: int = 0
    #: The mean reward and the hack rate of the rollouts graded so far in this iteration (every arm).
    reward_sum: float = 0.0
    rewarded: int = 0
    hacks: int = 0
    started: float = field(default_factory=time.monotonic)
    #: Seconds each finished iteration took.
    walls: list[float] = field(default_factory=list)

    @property
    def reward_mean(self) -> float | None:
        return self.reward_sum / self.rewarded if self.rewarded else None

    @property
    def hack_rate(self) -> float | None:
        return self.hacks / self.done if self.done else None

    def eta_s(self) -> float | None:
        """Seconds left, from the pace of the iterations so far (and of this one)."""
        elapsed = time.monotonic() - self.started
        if self.walls:
            pace = sum(self.walls) / len(self.walls)
            left = max(pace - elapsed, 0.0) + pace * (self.iterations - self.iteration - 1)
            return left
        if self.done:
            return elapsed / self.done * (self.jobs - self.done) * self.iterations
        return None


@dataclass
class TrainResult:
    """Every arm's figures per iteration, where the run wrote its files, and how long its parts took."""

    run_id: str
    arms: dict[str, list[IterationStats]]
    #: Per iteration: seconds in all, running the jobs, and the loop's own work (sampling, submitting, reading
    #: results, the optimizer step, writes).
    timings: list[dict[str, float]]
    #: Per arm: each task's final distribution over its actions (name -> probability); empty for a model.
    final: dict[str, dict[str, dict[str, float]]]
    #: Per arm: the learned policy (empty for a model).
    policies: dict[str, PoolPolicy] = field(default_factory=dict)
    report: Path | None = None

    def to_json(self) -> dict[str, Any]:
        """What ``rollbox train --json`` prints."""
        return {
            "arms": {arm: {"iterations": [s.to_json() for s in stats]} for arm, stats in self.arms.items()},
            "report": str(self.report) if self.report else None,
        }


@dataclass(frozen=True)
class _Planned:
    arms: tuple[str, ...]
    task: Task
    sample: int
    action: Action | None


def _rollouts(planned: _Planned, iteration: int, job: Job, result: JobResult) -> list[Rollout]:
    """The job's result as a rollout of each arm that planned it."""
    completed = result.state.value == "completed"
    output = result.output if completed else {}
    # A job that ended without a result (its payload could not be played: a model server that refused every
    # request) has no verdict; infra_error is rollbox's or the host's failure past the job's attempts.
    status = result.status if completed else None
    naive = (output.get("naive") or {}).get("reward")
    judge = result.reward if status not in (None, "infra_error") else None
    # A pool action is a hack by construction; a model's rollout, when the naive grader passed what the judge did not.
    hack = planned.action.kind is ActionKind.HACK if planned.action else naive == 1.0 and status != "passed"
    return [
        Rollout(
            arm=arm,
            iteration=iteration,
            task_id=planned.task.id,
            sample=planned.sample,
            job_id=job.id,
            action=planned.action.name if planned.action else None,
            reward=naive if arm == "naive" else judge,
            status=status,
            judge_reward=judge,
            naive_reward=naive,
            hack=hack,
            messages=tuple(output.get("messages") or ()),
        )
        for arm in planned.arms
    ]


class _Loop:
    def __init__(
        self,
        tasks: Sequence[Task],
        config: TrainConfig,
        scheduler: Scheduler,
        on_progress: Callable[[Progress], None] | None,
    ) -> None:
        self.tasks = sorted(tasks, key=lambda t: t.id)
        self.config, self.scheduler, self.on_progress = config, scheduler, on_progress
        self.pools = {
            t.id: pool_for(str(t.path.resolve()), config.max_mutants) if config.policy == "pool" else () for t in tasks
        }
        families = {task: [a.family for a in pool] for task, pool in self.pools.items()}
        self.policies = {arm: PoolPolicy(families, learning_rate=config.learning_rate) for arm in ARMS}
        self.directory = run_dir(config.run_id, scheduler.home)

    def plan(self, iteration: int) -> dict[str, _Planned]:
        """Each job of the iteration by its key."""
        config, plans = self.config, {}
        for task in self.tasks:
            if config.policy != "pool":  # a model's rollouts serve both arms; only the reward read differs
                for sample in range(config.samples):
                    plans[f"{config.run_id}/{iteration}/model/{task.id}/{sample}"] = _Planned(ARMS, task, sample, None)
                continue
            for arm in ARMS:
                rng = random.Random(f"{config.seed}/{iteration}/{task.id}")
                drawn = self.policies[arm].sample(task.id, config.samples, rng)
                for sample, index in enumerate(drawn):
                    action = self.pools[task.id][index]
                    plans[f"{config.run_id}/{iteration}/{arm}/{task.id}/{sample}"] = _Planned(
                        (arm,), task, sample, action
                    )
        return plans

    def spec(self, key: str, planned: _Planned) -> JobSpec:
        config = self.config
        if planned.action is not None:
            payload = rollout_payload(planned.task.path, action=planned.action.name, max_mutants=config.max_mutants)
        else:
            payload = rollout_payload(planned.task.path, policy=config.policy, base_url=config.base_url)
        return JobSpec(kind="rollout", payload=payload, key=key, run_id=config.run_id, max_attempts=config.max_attempts)

    async def iteration(self, iteration: int, progress: Progress) -> tuple[list[Rollout], dict[str, float]]:
        began = time.monotonic()
        plans = self.plan(iteration)
        jobs = self.scheduler.submit([self.spec(key, planned) for key, planned in plans.items()])
        by_id = {job.id: plans[job.key] for job in jobs if job.key is not None}
        submitted = time.monotonic()
        store, seen, results = self.scheduler.store, 0, {}
        running = asyncio.create_task(self.scheduler.run())
        while True:
            await asyncio.wait([running], timeout=0.25)
            ended = running.done()  # before the read: a read after the end holds every result
            fresh = await asyncio.to_thread(store.results, run_id=self.config.run_id, after=seen)
            for job, result in fresh:
                seen = max(seen, result.seq)
                if job.id in by_id and job.id not in results:
                    results[job.id] = (job, result)
                    self._count(progress, by_id[job.id], job, result, iteration)
            if self.on_progress:
                self.on_progress(progress)
            if ended:
                await running
                break
        ran = time.monotonic()
        missing = [job_id for job_id in by_id if job_id not in results]
        for job_id in missing:  # results committed before this iteration's first read (a resumed run)
            late = store.result(job_id)
            if late is not None:
                results[job_id] = (store.job(job_id), late)
        rollouts = [
            rollout for job_id in sorted(results) for rollout in _rollouts(by_id[job_id], iteration, *results[job_id])
        ]
        rollouts.sort(key=lambda r: (r.arm, r.task_id, r.sample))
        if self.config.policy == "pool":
            for arm in ARMS:
                groups: dict[str, list[Sample]] = {}
                for r in rollouts:
                    if r.arm == arm:
                        index = next(i for i, a in enumerate(self.pools[r.task_id]) if a.name == r.action)
                        groups.setdefault(r.task_id, []).append(Sample(index, None if r.masked else r.reward))
                self.policies[arm].update(groups)
        self._write(iteration, rollouts)
        end = time.monotonic()
        return rollouts, {"wall_s": end - began, "jobs_s": ran - submitted, "loop_s": (submitted - began) + (end - ran)}

    def _count(self, progress: Progress, planned: _Planned, job: Job, result: JobResult, iteration: int) -> None:
        progress.done += 1
        for rollout in _rollouts(planned, iteration, job, result)[:1]:
            if rollout.status == "infra_error":
                progress.infra += 1
            elif result.state.value != "completed":
                progress.failed += 1
            if rollout.reward is not None:
                progress.reward_sum += rollout.reward
                progress.rewarded += 1
            progress.hacks += rollout.hack

    def _write(self, iteration: int, rollouts: list[Rollout]) -> None:
        """Append the iteration's rollouts to ``rollouts.jsonl`` in the run's directory (with the judge's and the
        naive grader's rewards, for a trainer to read)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with (self.directory / "rollouts.jsonl").open("a", encoding="utf-8") as out:
            for rollout in rollouts:
                out.write(json.dumps(rollout.to_json()) + "\n")

    def final(self) -> dict[str, dict[str, dict[str, float]]]:
        if self.config.policy != "pool":
            return {}
        return {
            arm: {
                task: {a.name: round(p, 6) for a, p in zip(pool, self.policies[arm].probabilities(task), strict=True)}
                for task, pool in self.pools.items()
            }
            for arm in ARMS
        }


async def train(
    tasks: Sequence[Task],
    config: TrainConfig,
    *,
    scheduler: Scheduler,
    on_progress: Callable[[Progress], None] | None = None,
) -> TrainResult:
    """Run the loop over ``tasks`` with ``scheduler`` (open, its ``runs`` including ``config.run_id``).

    Raises:
        ValueError: no tasks, two tasks with one id, or a task without a reference (the pool policy needs one).
        PayloadError, Unplaceable, QueueFull, IdempotencyConflict: as :meth:`Scheduler.submit` (a run id reused
            with other tasks or settings conflicts).
    """
    if not tasks:
        raise ValueError("no tasks to train on")
    first: dict[str, Task] = {}
    for task in tasks:  # everything the loop keeps (pools, plans, job keys) is by task id
        if first.setdefault(task.id, task).path.resolve() != task.path.resolve():
            raise ValueError(f"two tasks have the id {task.id!r}: {first[task.id].path} and {task.path}")
    if config.policy == "pool" and (missing := [t.id for t in tasks if t.solution is None]):
        raise ValueError(f"the candidate-pool policy needs each task's solution/; missing in {', '.join(missing[:5])}")
    loop = _Loop(tasks, config, scheduler, on_progress)
    (loop.directory / "rollouts.jsonl").unlink(missing_ok=True)
    arms: dict[str, list[IterationStats]] = {arm: [] for arm in ARMS}
    timings: list[dict[str, float]] = []
    walls: list[float] = []
    for iteration in range(config.iterations):
        jobs = len(tasks) * config.samples * (len(ARMS) if config.policy == "pool" else 1)
        progress = Progress(iteration, config.iterations, jobs, walls=walls)
        rollouts, timing = await loop.iteration(iteration, progress)
        walls.append(timing["wall_s"])
        timings.append(timing)
        for arm in ARMS:
            arms[arm].append(IterationStats.of([r for r in rollouts if r.arm == arm]))
    policies = loop.policies if config.policy == "pool" else {}
    return TrainResult(run_id=config.run_id, arms=arms, timings=timings, final=loop.final(), policies=policies)
