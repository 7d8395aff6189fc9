"""Episodes in the task's runtime: the agent's commands, ``run_tests`` and the judge all get the task's layer and
variables; a layer that cannot be built ends the episode ``infra_error``, unjudged.

The fast tests install from a local directory of wheels (``test_layers``' fixture); the slow one takes a real
package from the package index, as ``test_runtime_judge`` does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import rollbox
from rollbox.env import EndReason, policy_from_name, run_episode
from rollbox.judge import VerdictStatus
from rollbox.sandbox import Status, WarmSandboxes
from rollbox.sandbox.runtime import LayerStore
from rollbox.tasks import Task, load_task
from test_layers import wheels  # noqa: F401  (the fixture)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


PROBE = "import os, sys, rbx_greet; print(rbx_greet.WORD, os.environ.get('GREETING_STYLE'), sys.prefix)"


def greet_task(root: Path, requirement: str = "rbx-greet==1.0", word: str = "hello one") -> Task:
    """A function task whose solution needs the package rbx-greet (from the layer) and the variable GREETING_STYLE
    (from ``[environment] env``) to pass."""
    for part in ("workspace", "tests", "solution"):
        (root / part).mkdir(parents=True)
    (root / "workspace" / "greet.py").write_text("def greet():\n    return None\n")
    (root / "solution" / "greet.py").write_text(
        "import os, rbx_greet\n\ndef greet():\n    return [rbx_greet.WORD, os.environ['GREETING_STYLE']]\n"
    )
    (root / "tests" / "cases.jsonl").write_text(json.dumps({"args": [], "expected": [word, "plain"]}) + "\n")
    (root / "task.toml").write_text(
        f'id = "{root.name}"\n[grading]\nrunner = "function"\nmodule = "greet.py"\nentry_point = "greet"\n'
        f'[environment]\nrequirements = ["{requirement}"]\nenv = {{ GREETING_STYLE = "plain" }}\n'
    )
    return load_task(root)


def test_the_agents_commands_and_the_judge_run_in_the_tasks_layer(wheels: Path, tmp_path: Path) -> None:  # noqa: F811
    one = greet_task(tmp_path / "one")
    two = greet_task(tmp_path / "two", "rbx-greet==2.0", "hello two")

    async def probe(task: Task, **options: Any) -> str:
        async with rollbox.make(task, **options) as env:
            await env.reset()
            result = await env.step(call("bash", command=f'python3 -c "{PROBE}"'))
        assert result.observation.status is Status.OK, result.observation.text
        return result.observation.text.splitlines()[0]

    async def main() -> tuple[list[str], list[float | None]]:
        # One warm pool source for every episode: each task's sandboxes come from a pool of its own runtime.
        async with WarmSandboxes(size=1) as agents, WarmSandboxes(size=1) as judges:
            seen = [
                await probe(one, sandboxes=agents),
                await probe(two, sandboxes=agents),
                await probe(one, sandboxes=agents),
                await probe(one),  # a fresh sandbox
            ]
            rewards = [
                (await run_episode(rollbox.make(task, sandboxes=agents, judge_sandboxes=judges), reference)).reward
                for task in (one, two)
            ]
        return seen, rewards

    reference = policy_from_name("reference")
    seen, rewards = asyncio.run(main())
    assert seen == [
        "hello one plain /opt/rollbox/env",
        "hello two plain /opt/rollbox/env",
        "hello one plain /opt/rollbox/env",
        "hello one plain /opt/rollbox/env",
    ]
    assert rewards == [1.0, 1.0]
    assert len(LayerStore().layers()) == 2  # one layer a task, built at its first use, shared by agent and judge


def test_a_layer_that_cannot_be_built_ends_the_episode_unjudged(wheels: Path, tmp_path: Path) -> None:  # noqa: F811
    task = greet_task(tmp_path / "broken", "rbx-greet==9.9")

    async def main() -> None:
        async with rollbox.make(task) as env:
            first = await env.reset()
            assert first.status is Status.INFRA_ERROR and first.error and "rbx-greet" in first.text, first
            assert env.workspace_mode is None
            obs, reward, done, info = await env.step(call("bash", command="echo ran"))
        assert done and reward is None and info.end_reason is EndReason.INFRA_ERROR
        assert info.verdict is not None and info.verdict.status is VerdictStatus.INFRA_ERROR
        assert "rbx-greet" in (info.verdict.error or "") and "ran" not in obs.text and obs.error
        assert env.trajectory.reward is None and env.trajectory.end_reason == "infra_error"

        # A trainer that ends it itself gets the same; run_episode asks no policy at all.
        async with rollbox.make(task) as env:
            await env.reset()
            verdict = await env.end()
        assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None
        trajectory = await run_episode(rollbox.make(task), policy_from_name("reference"))
        assert trajectory.status == "infra_error" and trajectory.reward is None and trajectory.turns == []
        assert trajectory.end_reason == "infra_error"

    asyncio.run(main())
    assert LayerStore().layers() == []


@pytest.mark.slow
def test_an_episode_on_a_task_needing_a_package_from_the_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A pytest task whose visible and hidden tests import a real package from the package index (small, pure
    # Python, not installed with rollbox): in the agent's sandbox python3 imports it and run_tests runs with it.
    monkeypatch.setenv("ROLLBOX_HOME", str(tmp_path / "home"))
    root = tmp_path / "task"
    for part in ("workspace", "tests", "solution"):
        (root / part).mkdir(parents=True)
    (root / "workspace" / "wrap.py").write_text("def wrap(text, width):\n    return [text]\n")
    (root / "workspace" / "test_wrap.py").write_text(
        "import more_itertools\nfrom wrap import wrap\n\n"
        "def test_wrap():\n    assert wrap('abcd', 2) == ['ab', 'cd']\n\n"
        "def test_package_is_the_layers():\n    assert more_itertools.__version__ == '10.5.0'\n"
    )
    (root / "solution" / "wrap.py").write_text(
        "import more_itertools\n\ndef wrap(text, width):\n"
        "    return [''.join(c) for c in more_itertools.chunked(text, width)]\n"
    )
    (root / "tests" / "test_hidden.py").write_text(
        "from wrap import wrap\n\ndef test_wrap():\n    assert wrap('abcdefg', 3) == ['abc', 'def', 'g']\n"
    )
    (root / "task.toml").write_text(
        '[grading]\nrunner = "pytest"\n[limits]\ntimeout = "60s"\n'
        '[environment]\nrequirements = ["more-itertools==10.5.0"]\n'
    )
    task = load_task(root)

    async def main() -> tuple[list[Any], float | None, list[Any]]:
        async with rollbox.make(task) as env:
            await env.reset()
            steps = [
                await env.step(
                    call("bash", command="python3 -c 'import more_itertools; print(more_itertools.__file__)'")
                ),
                await env.step(call("run_tests")),
            ]
        reference = await run_episode(rollbox.make(task), policy_from_name("reference"))
        return steps, reference.reward, reference.turns

    steps, reward, turns = asyncio.run(main())
    imported, tests = (s.observation for s in steps)
    assert imported.status is Status.OK and imported.text.startswith("/opt/rollbox/env/"), imported.text
    assert "1 failed, 1 passed" in tests.text, tests.text  # the package is there; the bug is the agent's to fix
    run_tests = next(t for t in turns if t.action["name"] == "run_tests")
    assert "2 passed" in run_tests.observation.text, run_tests.observation.text
    assert reward == 1.0
