"""Validation's warm sandboxes: a pool per configuration, as large as its borrowers ask at once (and a spare) and
no larger; one pool per hash seed, shared by every task, and a few seeds for every run."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from rollbox.curate._grader import Grader, Measured
from rollbox.curate._reference import Reference
from rollbox.curate._reference_runs import STEADY_SEEDS, Item, ReferenceRuns
from rollbox.curate._sandboxes import DemandSandboxes
from rollbox.curate._variants import ordered
from rollbox.sandbox import Limits, Sandbox, SandboxConfig
from rollbox.tasks import Task, load_task

CONFIG = SandboxConfig(limits=Limits(timeout_s=5))
SEEDED = SandboxConfig(limits=Limits(timeout_s=5), interpreter_env={"PYTHONHASHSEED": "7"})


async def _hold(source: DemandSandboxes, config: SandboxConfig, seen: list[Sandbox], release: asyncio.Event) -> None:
    async with source.sandbox(config) as sb:
        seen.append(sb)
        await release.wait()


def test_one_borrower_at_a_time_is_served_by_one_sandbox_and_a_spare() -> None:
    """A grader's pools start no sandbox that no borrower needs: one borrower at a time is served by one sandbox
    and a spare (ready while the other is reset) for the task's own configuration, and by one alone for a
    configuration whose zygote started under another hash seed (one such pool for each seed validation varies)."""

    async def main() -> tuple[set[int], set[int], list[str]]:
        grader = Grader(workers=2)
        try:
            plain, seeded, outputs = set(), set(), []
            for _ in range(6):
                async with grader.sandboxes.sandbox(CONFIG) as sb:
                    plain.add(id(sb))
                    await sb.write_file("/tmp/left", "x")
                async with grader.sandboxes.sandbox(SEEDED) as sb:
                    seeded.add(id(sb))
                    result = await sb.exec(["python3", "-c", "import os; print(os.path.exists('/tmp/left'))"])
                    outputs.append(result.stdout_text.strip())
            return plain, seeded, outputs
        finally:
            await grader.close()

    plain, seeded, outputs = asyncio.run(main())
    assert len(plain) == 2 and len(seeded) == 1
    assert outputs == ["False"] * 6  # the seeded pool is its own: nothing the plain one's borrowers wrote


def test_a_pool_grows_to_the_borrowers_at_once_up_to_its_size() -> None:
    async def main() -> tuple[int, int, int]:
        source = DemandSandboxes(max_size=3)
        try:
            seen: list[Sandbox] = []
            release = asyncio.Event()
            holders = [asyncio.create_task(_hold(source, CONFIG, seen, release)) for _ in range(3)]
            for _ in range(1000):  # ten seconds at most: without growth the third would wait for ever
                if len(seen) == 3:
                    break
                await asyncio.sleep(0.01)
            release.set()
            await asyncio.gather(*holders)
            at_once = len({id(sb) for sb in seen})
            for _ in range(4):  # one at a time again: served by those three
                async with source.sandbox(CONFIG) as sb:
                    seen.append(sb)
            async with source.sandboxes(5, CONFIG) as five:  # beyond the size: new ones, closed after
                more = len({id(sb) for sb in five})
            return at_once, len({id(sb) for sb in seen}), more
        finally:
            await source.close()

    at_once, total, more = asyncio.run(main())
    assert at_once == 3 and total == 3 and more == 5


def _function_task(root: Path, name: str) -> Task:
    path = root / name
    for relative, text in {
        "workspace/sol.py": "def f(x):\n    raise NotImplementedError\n",
        "solution/sol.py": "def f(x):\n    return 2 * x\n",
        "tests/cases.jsonl": '{"args": [2], "expected": 4}\n{"args": [3], "expected": 6}\n',
        "task.toml": f'id = "{name}"\n[grading]\nrunner = "function"\nmodule = "sol.py"\nentry_point = "f"\n',
    }.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    return load_task(path)


def test_every_task_cycles_over_the_same_few_hash_seeds_in_an_order_of_its_own(tmp_path: Path) -> None:
    """The steady runs take the hash seeds 1 to STEADY_SEEDS, each once before any twice, then again and again: the
    same seeds for every task (one sandbox per seed serves them all, so a few sandboxes serve any number of runs),
    each task in an order of its own, so that tasks validated together do not queue for one seed's sandbox. Every
    run under a seed taken before is recorded as another run of that seed (each run counts towards the bound)."""

    async def seeds(tasks: list[Task]) -> list[list[int]]:
        grader = Grader(workers=2)
        try:
            found = []
            for task in tasks:
                reference = Reference.of(task)
                assert reference is not None
                variants = [ordered(task, k, tmp_path / task.id) for k in range(2)]
                taken: list[int] = []

                async def measure(items: Sequence[Item], taken: list[int] = taken) -> list[Measured]:
                    taken += [int(env["PYTHONHASHSEED"]) for _, _, env in items if env and "PYTHONHASHSEED" in env]
                    return await grader.measure_all(items)

                runs = ReferenceRuns(
                    task,
                    reference,
                    variants,
                    measure,
                    workers=2,
                    steady_runs=24,
                    reruns=1,
                    hash_seeds=2,
                    clock=False,
                )
                await runs.finish(await measure(runs.first()))
                assert runs.steady is not None and runs.count == 24
                by_seed = {c.hash_seed: len(seen) for c, seen in runs.runs.items() if c.hash_seed}
                assert by_seed == {seed: taken.count(seed) for seed in set(taken)} and sum(by_seed.values()) == 22
                found.append(taken)
            return found
        finally:
            await grader.close()

    taken = asyncio.run(seeds([_function_task(tmp_path, f"task-{n}") for n in range(3)]))
    every = list(range(1, STEADY_SEEDS + 1))
    for order in taken:
        # 2 orders, then 22 runs under seeds: 1 and 2, the other six, then two rounds of all eight in between.
        assert order[:2] == [1, 2] and sorted(order[:STEADY_SEEDS]) == every
        assert sorted(order[STEADY_SEEDS : 2 * STEADY_SEEDS]) == every and set(order) == set(every)
    assert len({tuple(order) for order in taken}) == 3
