"""The steady runs' hash seeds: a test that pins a set's order which seeds 1 and 2 (the first runs') keep and a
later seed of the steady runs' few breaks is ``hash_seed_dependent`` (naming that seed), not flaky."""

from __future__ import annotations

import ast
import asyncio
import itertools
from pathlib import Path

import pytest

from rollbox import Limits, Sandbox
from rollbox.curate import Decision, ReasonCode, ValidateOptions, validate
from rollbox.curate._reference_runs import STEADY_SEEDS
from rollbox.tasks import load_task

#: Thirty gradings of a pytest task and the candidates: slow on a loaded machine.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WORDS = ("pear", "apple", "fig", "plum", "kiwi", "lime", "date", "yuzu", "sloe", "nut")
PAIRS = [" ".join(pair) for pair in itertools.combinations(WORDS, 2)]


def orders(seeds: range) -> dict[int, list[list[str]]]:
    """``list(set(pair.split()))`` for every pair, as a graded process computes it under each hash seed."""

    async def run() -> dict[int, list[list[str]]]:
        script = f"print(repr([list(set(p.split())) for p in {PAIRS!r}]))"
        found = {}
        async with Sandbox(limits=Limits(timeout_s=30)) as sb:
            for seed in seeds:
                result = await sb.exec(["python3", "-c", script], env={"PYTHONHASHSEED": str(seed)})
                found[seed] = ast.literal_eval(result.stdout_text)
        return found

    return asyncio.run(run())


def test_a_seed_only_the_steady_runs_take_is_caught(tmp_path: Path) -> None:
    by_seed = orders(range(STEADY_SEEDS + 1))
    # A pair seeds 1 and 2 iterate as the judge's seed 0 does, and some later seed does not.
    index = next(
        i
        for i in range(len(PAIRS))
        if by_seed[1][i] == by_seed[2][i] == by_seed[0][i]
        and any(by_seed[s][i] != by_seed[0][i] for s in range(3, STEADY_SEEDS + 1))
    )
    breaking = [s for s in range(3, STEADY_SEEDS + 1) if by_seed[s][index] != by_seed[0][index]]
    root = tmp_path / "pinned"
    for relative, text in {
        "workspace/words.py": "def distinct(text):\n    raise NotImplementedError\n",
        "solution/words.py": "def distinct(text):\n    return list(set(text.split()))\n",
        "tests/test_words.py": "from words import distinct\n\n\ndef test_distinct():\n"
        f"    assert distinct({PAIRS[index]!r}) == {by_seed[0][index]!r}\n",
        "task.toml": '[grading]\nrunner = "pytest"\n',
    }.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)
    options = ValidateOptions(pressure=False, max_mutants=0, generate=False, candidates="essential", clock=False)
    (report,) = asyncio.run(validate([load_task(root)], options=options, workers=2))
    assert report.decision is Decision.REJECT
    assert report.codes() == {ReasonCode.HASH_SEED_DEPENDENT}, report.reasons
    (reason,) = report.reasons
    assert any(f"PYTHONHASHSEED={s} " in reason.detail for s in breaking), (reason.detail, breaking)
    assert not report.flaky_tests
