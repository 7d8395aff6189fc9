"""Rewards: binary, pass rate, fail_to_pass/pass_to_pass weights, and efficiency against the reference."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import GradedTest, Outcome, VerdictStatus, compute_reward, grade
from rollbox.tasks import RewardKind, RewardSpec, TaskFormatError, load_task

P, F = Outcome.PASSED, Outcome.FAILED
TESTS = [GradedTest("a", P), GradedTest("b", P), GradedTest("c", F), GradedTest("d", Outcome.SKIPPED)]


def test_reward_kinds() -> None:
    assert compute_reward(RewardSpec(), TESTS) == 0.0
    assert compute_reward(RewardSpec(), TESTS[:2]) == 1.0
    assert compute_reward(RewardSpec(kind=RewardKind.PASS_RATE), TESTS) == 0.5
    f2p = RewardSpec(kind=RewardKind.F2P_P2P, f2p_weight=0.75)
    assert compute_reward(f2p, TESTS, fail_to_pass=["a", "c"]) == pytest.approx(0.75 * 0.5 + 0.25 * 0.5)
    assert compute_reward(f2p, TESTS, fail_to_pass=["a", "b"]) == pytest.approx(0.75 * 1 + 0.25 * 0)
    assert compute_reward(RewardSpec(), []) == 0.0


def test_efficiency_scales_correctness_and_never_rescues_a_wrong_answer() -> None:
    spec = RewardSpec(cpu_weight=0.4, memory_weight=0.2)
    assert compute_reward(spec, TESTS[:2], efficiency=(1.0, 1.0)) == 1.0
    assert compute_reward(spec, TESTS[:2], efficiency=(0.5, 0.25)) == pytest.approx(0.4 + 0.4 * 0.5 + 0.2 * 0.25)
    assert compute_reward(spec, TESTS, efficiency=(1.0, 1.0)) == 0.0


def make_task(root: Path, weights: str, *, solution: bool = True) -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "s.py").write_text("def total(n):\n    raise NotImplementedError\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text('{"args": [1000], "kwargs": {}, "expected": 499500}\n')
    if solution:
        (root / "solution").mkdir()
        (root / "solution" / "s.py").write_text("def total(n):\n    return n * (n - 1) // 2\n")
    (root / "task.toml").write_text(
        '[grading]\nrunner = "function"\nmodule = "s.py"\nentry_point = "total"\n'
        f'{weights}\n[limits]\ncpu_time = "10s"\n'
    )
    return root


def test_efficiency_needs_a_reference_and_sane_weights(tmp_path: Path) -> None:
    with pytest.raises(TaskFormatError, match="solution/, which is missing"):
        load_task(make_task(tmp_path / "a", "cpu_weight = 0.5", solution=False))
    with pytest.raises(TaskFormatError, match="at most 1"):
        load_task(make_task(tmp_path / "b", "cpu_weight = 0.7\nmemory_weight = 0.7"))


def test_a_slower_correct_candidate_earns_less_than_a_fast_one(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path / "task", "cpu_weight = 0.5"))
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for directory, body in (
        (fast, "return n * (n - 1) // 2"),
        (
            slow,
            "import time\n    t = time.process_time()\n"
            "    while time.process_time() - t < 1.5:\n        pass\n    return sum(range(n))",
        ),
    ):
        directory.mkdir()
        (directory / "s.py").write_text(f"def total(n):\n    {body}\n")

    async def both() -> tuple[float | None, float | None]:
        return (await grade(task, fast)).reward, (await grade(task, slow)).reward

    fast_reward, slow_reward = asyncio.run(both())
    assert fast_reward is not None and slow_reward is not None
    # Python's start-up dominates the fast runs, so their CPU ratio to the reference is noisy, near 1; the slow
    # candidate burns 1.5 s more CPU, so its ratio is near 0 and its reward near 1 - cpu_weight.
    assert fast_reward >= 0.75
    assert 0.5 <= slow_reward <= 0.6


def test_a_reference_that_fails_turns_efficiency_off_and_says_so(tmp_path: Path) -> None:
    root = make_task(tmp_path / "task", "memory_weight = 0.5")
    (root / "solution" / "s.py").write_text("def total(n):\n    return -1\n")
    candidate = tmp_path / "c"
    candidate.mkdir()
    (candidate / "s.py").write_text(
        textwrap.dedent("""
        def total(n):
            return n * (n - 1) // 2
    """)
    )
    verdict = asyncio.run(grade(load_task(root), candidate))
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0
    assert [f["code"] for f in verdict.flags] == ["reference_failed"]
