"""256 concurrent episodes with a scripted policy, and no cross-talk: no episode ever sees another's files,
processes or output."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import rollbox
from rollbox.env import ScriptedPolicy, run_episode
from rollbox.sandbox import WarmSandboxes
from rollbox.tasks import Task, load_task

EPISODES = 256


def _tiny_task(root: Path) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "workspace" / "note.txt").write_text("start\n")
    (root / "tests" / "cases.jsonl").write_text('{"input": "", "output": "ok"}\n')
    (root / "task.toml").write_text(
        '[grading]\nrunner = "stdio"\ncommand = "sh run.sh"\n[limits]\ntimeout = "10s"\nmemory = "64M"\npids = 16\n'
    )
    return load_task(root)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_256_concurrent_episodes_without_cross_talk(tmp_path: Path) -> None:
    task = _tiny_task(tmp_path / "tiny")

    def script(env: rollbox.env.Episode) -> list[dict[str, object]]:
        me = env.trajectory.episode_id
        look = "cat secret-*; ls /tmp /workspace; ps -e -o comm= | grep -cx sleep; echo end"
        return [
            {"name": "write_file", "arguments": {"path": f"secret-{me}", "content": me}},
            {"name": "write_file", "arguments": {"path": "run.sh", "content": f"echo ok # {me}\n"}},
            {"name": "bash", "arguments": {"command": f"echo {me} > /tmp/mine; (sleep 30 &) ; true"}},
            {"name": "bash", "arguments": {"command": look}},
            {"name": "submit", "arguments": {}},
        ]

    async def everything() -> list[rollbox.env.Trajectory]:
        limit = asyncio.Semaphore(64)  # 256 open at once would be fine; 2 cores grade 64 at a time
        async with WarmSandboxes(size=8, warm_python=False) as judges:

            async def one(i: int) -> rollbox.env.Trajectory:
                async with limit:
                    env = rollbox.make(task, judge_sandboxes=judges, episode_id=f"ep{i:03d}")
                    return await run_episode(env, ScriptedPolicy(name="isolation", script=script))

            return await asyncio.gather(*(one(i) for i in range(EPISODES)))

    trajectories = asyncio.run(everything())
    assert len({t.episode_id for t in trajectories}) == EPISODES
    for t in trajectories:
        me = t.episode_id
        seen = t.turns[3].observation.text
        assert t.reward == 1.0 and t.status == "passed", (me, t.verdict)
        assert seen.startswith(f"{me}") and "secret-ep" in seen
        others = [f"ep{i:03d}" for i in range(EPISODES) if f"ep{i:03d}" != me]
        leaked = [o for o in others if o in seen or any(o in turn.observation.text for turn in t.turns)]
        assert not leaked, (me, leaked[:3])
        # the sleep this episode's previous command left died with it; no other episode's is visible either
        assert seen.rstrip().splitlines()[-3:] == ["0", "end", "[exit code 0]"], seen
