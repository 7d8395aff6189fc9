"""rollbox never draws from the `random` module's own state: that state belongs to the program using rollbox (a
trainer seeded with ``random.seed`` must draw the same numbers whether or not sandboxes ran in between), and a
thread of rollbox drawing from it makes Hypothesis, for one, see its strategies change under it."""

from __future__ import annotations

import ast
import asyncio
import random
from pathlib import Path

from rollbox.judge import VerdictStatus, grade
from rollbox.sandbox import Limits, Sandbox
from rollbox.scheduler import RetryPolicy
from rollbox.tasks import load_task
from serving import double_task

SOURCE = Path(__file__).resolve().parents[1] / "src" / "rollbox"
#: What may be taken from the module: generators with a state of their own.
OWN_STATE = {"Random", "SystemRandom"}


def _global_draws(path: Path) -> list[str]:
    """Each use, in ``path``, of a `random` function that draws from the module's shared generator."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    attribute_bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "random":
            drawn = [a.name for a in node.names if a.name not in OWN_STATE]
            found += [f"{path}:{node.lineno}: from random import {name}" for name in drawn]
        elif "random" not in aliases:
            continue
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "random":
            if node.attr not in OWN_STATE:
                found.append(f"{path}:{node.lineno}: random.{node.attr}")
        elif isinstance(node, ast.Name) and node.id == "random" and id(node) not in attribute_bases:
            # the module passed along as a generator (``rng or random``) draws from the shared state too
            found.append(f"{path}:{node.lineno}: the random module used as a generator")
    return found


def test_no_module_of_rollbox_draws_from_the_random_modules_shared_state() -> None:
    modules = sorted(SOURCE.rglob("*.py"))
    assert len(modules) > 100
    assert [line for path in modules for line in _global_draws(path)] == []


def test_the_scan_finds_each_way_of_drawing_from_the_shared_state(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import random\nfrom random import choice\n"
        "def f(rng=None):\n    random.randrange(3)\n    return (rng or random).random()\n"
        "def g():\n    return random.Random(1).random(), random.SystemRandom().random()\n"
    )
    assert [line.split(": ", 1)[1] for line in _global_draws(module)] == [
        "from random import choice",
        "random.randrange",
        "the random module used as a generator",
    ]


def test_sandboxes_retries_and_grading_leave_the_shared_state_alone(tmp_path: Path) -> None:
    task = load_task(double_task(tmp_path) / "double")

    async def work() -> VerdictStatus:
        async with Sandbox(limits=Limits(timeout_s=5, cpu_time_s=2)) as sandbox:
            await sandbox.exec(["true"])
        RetryPolicy().delay_s(3)
        verdict = await grade(task, {"solution.py": "def double(x):\n    return 2 * x\n"})
        return verdict.status

    random.seed(2026)
    before = random.getstate()
    assert asyncio.run(work()) == VerdictStatus.PASSED
    assert random.getstate() == before
