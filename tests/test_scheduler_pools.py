"""Elastic warm pools: a pool's size follows the queue, a burst from nothing to a thousand jobs ramps up without
refusing admitted work, and idle sandboxes are reclaimed after the grace period. Pools are keyed by the whole
configuration: the episodes of one task reuse its pool's sandboxes, reset to its pristine workspace, and two tasks
never see each other's files."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from rollbox import telemetry
from rollbox.env import Observation, Trajectory, Turn, read_trajectories, write_trajectories
from rollbox.sandbox import Limits, SandboxConfig
from rollbox.scheduler import (
    Capacity,
    ElasticSandboxes,
    JobSpec,
    JobStore,
    LocalWorker,
    Scheduler,
    episode_payload,
    exec_payload,
)
from scheduler_helpers import sync
from test_validate_planted import SIGN, healthy_function


class Sizes:
    """The ``pool.resize`` events seen."""

    def __init__(self) -> None:
        self.events: list[dict[str, object]] = []

    def write(self, event: telemetry.Event) -> None:
        if event.kind == "pool.resize":
            self.events.append(dict(event.fields))

    def largest(self) -> int:
        return max((int(e["size"]) for e in self.events), default=0)  # type: ignore[call-overload]


@pytest.mark.slow
@sync
async def test_a_burst_ramps_the_pool_up_admits_everything_and_the_pool_is_reclaimed_after(tmp_path: Path) -> None:
    worker = LocalWorker(capacity=Capacity(cpus=4, memory_bytes=4 * 2**30), max_pool=8, grace_s=0.5)
    limits = Limits(timeout_s=10, memory_bytes=64 * 2**20)
    job = JobSpec(kind="exec", payload=exec_payload(["true"], limits=limits))
    sizes = Sizes()
    with telemetry.recording(sizes):
        async with Scheduler(JobStore(tmp_path / "jobs.db"), workers=[worker], home=tmp_path, max_queued=1000) as s:
            s.submit([job] * 2)
            await s.run()
            trickle = sizes.largest()
            await asyncio.sleep(1.5)  # past the grace period: the idle pool is closed
            assert sizes.events[-1]["change"] == "closed" and worker.sandboxes.sizes() == {}
            sizes.events.clear()

            s.submit([job] * 1000)  # a burst, all of it admitted at once: the queue's bound is 1000
            await s.run()
            burst = sizes.largest()
            counts = s.store.counts()
            await asyncio.sleep(3)  # shrinks after the grace period, then closes after another
    assert counts == {"completed": 1002, "infra_error": 0}
    assert {r.status for _, r in s.store.results()} == {"ok"}
    assert trickle <= 4 < burst == 8  # two jobs never needed the whole pool; a thousand did
    grew = [e for e in sizes.events if e["change"] == "grew"]
    assert any(int(e["queued"]) > 8 for e in grew)  # type: ignore[call-overload]  # the queue drove it, not only borrows
    assert sizes.events[-1]["change"] == "closed"  # reclaimed after the burst


def _replay(path: Path, tasks: list[str]) -> Path:
    """Each task's recorded episode: list /workspace, leave a file in it, write the solution, submit."""
    actions = [
        {"name": "bash", "arguments": {"command": "ls /workspace"}},
        {"name": "write_file", "arguments": {"path": "left-by-an-earlier-episode.txt", "content": "x"}},
        {"name": "write_file", "arguments": {"path": "sol.py", "content": SIGN}},
        {"name": "submit", "arguments": {}},
    ]
    turns = [
        Turn(turn=i + 1, action=action, observation=Observation(text=""), started_s=0.0, wall_s=0.0)
        for i, action in enumerate(actions)
    ]
    recorded = [Trajectory(episode_id="recorded", task_id=task, task_path="", turns=turns) for task in tasks]
    return write_trajectories(path, recorded)


@pytest.mark.slow
@sync
async def test_episodes_of_one_task_reuse_its_pool_and_two_tasks_never_share_one(tmp_path: Path) -> None:
    tasks = {}
    for name in ("alpha", "beta"):
        task = shutil.copytree(healthy_function(tmp_path / "made"), tmp_path / name)
        (task / "task.toml").write_text(f'id = "{name}"\n' + (task / "task.toml").read_text())
        (task / "workspace" / f"only-in-{name}.txt").write_text(name)
        tasks[name] = task
    replay = _replay(tmp_path / "recorded.jsonl", list(tasks))
    worker = LocalWorker(capacity=Capacity(cpus=2, memory_bytes=8 * 2**30))
    # Room for all three pools at their largest, kept however slowly the run goes: none is closed (to make room,
    # or for having been idle) and opened again, which would be right but is not what is counted here.
    worker.sandboxes = ElasticSandboxes(max_size=2, max_total=6, grace_s=3600, warm_python=False)
    sizes = Sizes()
    samples = 6
    with telemetry.recording(sizes):
        async with Scheduler(JobStore(tmp_path / "jobs.db"), workers=[worker], home=tmp_path) as s:
            s.submit(
                [
                    JobSpec(kind="episode", payload=episode_payload(task, f"replay:{replay}"))
                    for task in tasks.values()
                    for _ in range(samples)
                ]
            )
            await s.run()
            pools = worker.sandboxes.sizes()
    results = s.store.results()
    assert [(r.status, r.reward) for _, r in results] == [("passed", 1.0)] * 2 * samples
    for job, result in results:
        (trajectory,) = read_trajectories(tmp_path / "runs" / "default" / result.output["trajectory"])
        listing = [name for name in trajectory.turns[0].observation.text.split() if name.endswith((".txt", ".py"))]
        # Its own task's pristine workspace: nothing of the other task's, nothing an earlier episode left.
        assert sorted(listing) == ["only-in-" + trajectory.task_id + ".txt", "sol.py"], (job.id, listing)
    # Each task's agent sandboxes came from a pool of its own (named by its workspace), opened once and never
    # larger than two, for six episodes each: warm sandboxes were reused, not made per episode.
    for task in tasks.values():
        own = [e for e in sizes.events if str(task / "workspace") in str(e["pool"])]
        assert [e["change"] for e in own].count("opened") == 1, own
        assert max(int(e["size"]) for e in own) <= 2  # type: ignore[call-overload]
        assert sum(str(task / "workspace") in key for key in pools) == 1, pools
    assert len(pools) == 3  # the two agents' pools, and the judge's one (no workspace: the files are written in)


@sync
async def test_pools_differ_by_workspace_and_variables_and_idle_ones_make_room_least_recently_used_first(
    tmp_path: Path,
) -> None:
    limits = Limits(timeout_s=10, memory_bytes=64 * 2**20)
    spaces = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.txt").write_text(name)
        spaces.append(tmp_path / name)
    sizes = Sizes()
    seen = []
    pools = ElasticSandboxes(max_size=1, max_total=2, grace_s=60, warm_python=False)
    with telemetry.recording(sizes):
        # Held throughout: a busy pool is never closed to make room.
        async with pools, pools.sandbox(SandboxConfig(limits=limits, workspace=spaces[0])) as held:
            for env in ({"X": "1"}, {"X": "2"}, {"X": "1"}):
                async with pools.sandbox(SandboxConfig(limits=limits, workspace=spaces[1], env=env)) as sb:
                    seen.append((await sb.exec(["sh", "-c", "ls /workspace; echo $X"])).stdout.decode().split())
            assert (await held.exec(["ls", "/workspace"])).stdout == b"a.txt\n"
            keys = pools.sizes()
    assert seen == [["b.txt", "1"], ["b.txt", "2"], ["b.txt", "1"]]

    def named(change: str) -> list[tuple[str, str | None]]:
        configs = [json.loads(str(e["pool"])) for e in sizes.events if e["change"] == change]
        return [(Path(c["workspace"]).name, c.get("env", {}).get("X")) for c in configs]

    assert named("opened") == [("a", None), ("b", "1"), ("b", "2"), ("b", "1")]
    # Two sandboxes at most: opening X=2 closed the idle X=1 pool (never the busy one), and X=1 again closed X=2.
    assert named("closed")[:2] == [("b", "1"), ("b", "2")]
    assert len(keys) == 2 and sum(keys.values()) == 2


@sync
async def test_growth_ahead_of_the_queue_stays_within_max_total_across_pools(tmp_path: Path) -> None:
    limits = Limits(timeout_s=10, memory_bytes=64 * 2**20)
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    async with ElasticSandboxes(max_size=3, max_total=4, grace_s=60, warm_python=False, interval_s=0.05) as pools:
        for name in ("a", "b"):
            async with pools.sandbox(SandboxConfig(limits=limits, workspace=tmp_path / name)):
                pass
        for _ in range(20):  # the scheduler repeats its word every second; here, faster
            pools.expect({key: 10 for key in pools.sizes()})  # ten jobs queued for each: each pool's target is 3
            await asyncio.sleep(0.05)
        sizes = sorted(pools.sizes().values())
    assert sum(sizes) == 4 and max(sizes) <= 3, sizes


@sync
async def test_a_pool_opening_holds_back_neither_other_pools_borrowers_nor_opens_twice(tmp_path: Path) -> None:
    limits = Limits(timeout_s=10, memory_bytes=64 * 2**20)
    for name in ("warm", "c", "d", "e"):
        (tmp_path / name).mkdir()
    sizes = Sizes()

    async def use(pools: ElasticSandboxes, name: str) -> None:
        async with pools.sandbox(SandboxConfig(limits=limits, workspace=tmp_path / name)) as sb:
            await sb.exec(["true"])

    with telemetry.recording(sizes):
        async with ElasticSandboxes(max_size=2, max_total=16, grace_s=60, warm_python=False) as pools:
            await use(pools, "warm")
            await asyncio.sleep(0.5)  # its sandbox is reset and idle again
            # Three new pools opening (one of them wanted twice at once), then a borrow from the warm one.
            opening = [asyncio.create_task(use(pools, name)) for name in ("c", "c", "d", "e")]
            await asyncio.sleep(0)
            async with pools.sandbox(SandboxConfig(limits=limits, workspace=tmp_path / "warm")):
                meanwhile = sum(e["change"] == "opened" for e in sizes.events) - 1
            await asyncio.gather(*opening)
    assert meanwhile < 3  # the warm pool's borrower did not wait for every other pool to open
    opened = [json.loads(str(e["pool"]))["workspace"] for e in sizes.events if e["change"] == "opened"]
    # Each opened once ("c" for its two borrowers), and none closed before its borrowers came.
    assert sorted(Path(w).name for w in opened) == ["c", "d", "e", "warm"]
