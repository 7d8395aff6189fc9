"""Rewards: binary, pass rate, fail_to_pass/pass_to_pass weights, and efficiency against the reference."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import pytest

from conftest import start_without_fds
from rollbox.judge import GradedTest, Outcome, Verdict, VerdictStatus, compute_reward, grade
from rollbox.sandbox import Sandbox, SandboxConfig, WarmSandboxes
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


#: The reference solution's marker: a child process whose command line nothing else on the machine has.
MARK = ["sleep", "1.4321"]


async def kill_during_the_mark(sb: Sandbox) -> None:
    """Kill ``sb``'s launcher as soon as the marker runs in it: the host ending the sandbox mid-run. Through a
    pidfd opened at once, so that the signal, much later, cannot reach a process that took its pid meanwhile."""
    parent = int(Path(f"/proc/{sb._impl.agent.pid}/stat").read_text().rsplit(")", 1)[1].split()[1])  # type: ignore[union-attr]
    launcher = os.pidfd_open(parent)
    try:
        wanted = "\0".join(MARK).encode() + b"\0"
        while not any(_cmdline(pid) == wanted for pid in os.listdir("/proc") if pid.isdigit()):
            await asyncio.sleep(0.01)
        signal.pidfd_send_signal(launcher, signal.SIGKILL)
    finally:
        os.close(launcher)


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class FailingOnce:
    """Warm sandboxes whose ``doomed``-th borrowing fails as the host would, by ``fault``: ``raise`` (no sandbox to
    be had: no file descriptor left) or ``kill`` (killed mid-run, an ``infra_error`` result)."""

    def __init__(self, inner: WarmSandboxes, doomed: int, fault: Literal["raise", "kill"]) -> None:
        self.inner, self.doomed, self.fault, self.borrowed = inner, doomed, fault, 0

    @contextlib.asynccontextmanager
    async def sandbox(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        self.borrowed += 1
        doomed = self.borrowed == self.doomed
        if doomed and self.fault == "raise":
            await start_without_fds(config.limits, config.network)
        async with self.inner.sandbox(config) as sb:
            killer = asyncio.ensure_future(kill_during_the_mark(sb)) if doomed else None
            try:
                yield sb
            finally:
                if killer is not None:
                    killer.cancel()

    def sandboxes(
        self, count: int, config: SandboxConfig, **kw: Any
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        return self.inner.sandboxes(count, config, **kw)


@pytest.mark.parametrize("fault", ["raise", "kill"])
def test_a_reference_run_that_rollbox_failed_is_run_again_next_time(
    tmp_path: Path, fault: Literal["raise", "kill"]
) -> None:
    root = make_task(tmp_path / "task", "memory_weight = 0.5")
    (root / "solution" / "s.py").write_text(
        f"import subprocess\n\ndef total(n):\n    subprocess.run({MARK!r})\n    return n * (n - 1) // 2\n"
    )
    task = load_task(root)
    # Correct, and holding far more memory than the reference: the efficiency terms cost it about half its reward.
    hungry = {"s.py": "def total(n):\n    held = b'x' * (200 << 20)\n    return n * (n - 1) // 2\n"}

    async def twice() -> list[Verdict]:
        async with WarmSandboxes(size=1) as warm:
            flaky = FailingOnce(warm, 2, fault)  # the first grading's second sandbox: its reference run
            return [await grade(task, hungry, sandboxes=flaky) for _ in range(2)]

    failed, again = asyncio.run(twice())
    assert (failed.status, failed.reward) == (VerdictStatus.INFRA_ERROR, None), failed
    assert "reference solution" in (failed.error or ""), failed
    assert again.status is VerdictStatus.PASSED and again.reward is not None and again.reward < 0.8, again
    assert not again.flags, again


#: Differential tests against an oracle the tests import from tests/: nothing the judge can seal, so the expected
#: value is computed in the candidate's process, where a frame walk finds the oracle.
ORACLE_TESTS = """import random

from calc import add
from oracle import reference_add


def test_random():
    rng = random.Random(0)
    for _ in range(50):
        a, b = rng.randint(-99, 99), rng.randint(-99, 99)
        assert add(a, b) == reference_add(a, b)


def test_small():
    assert add(1, 2) == reference_add(1, 2)
"""
#: The caller's function whose name contains mine, found by walking the frames.
ORACLE_HACK = """import sys


def add(a, b):
    frame = sys._getframe(1)
    while frame is not None:
        for name, value in {**frame.f_globals, **frame.f_locals}.items():
            if "add" in name and callable(value) and getattr(value, "__code__", None) is not add.__code__:
                return value(a, b)
        frame = frame.f_back
"""


def oracle_task(root: Path, tests: str, reward: str = "binary") -> Path:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "calc.py").write_text(WALKING + "\n\ndef add(a, b):\n    raise NotImplementedError\n")
    (root / "tests").mkdir()
    (root / "tests" / "oracle.py").write_text("def reference_add(a, b):\n    return a + b\n")
    (root / "tests" / "test_calc.py").write_text(tests)
    (root / "task.toml").write_text(f'[grading]\nrunner = "pytest"\nreward = "{reward}"\n')
    return root


#: Frame-walking code the task's own module has (as some libraries do): a candidate that keeps it is not penalized.
WALKING = "import sys\n\n\ndef module_of_caller():\n    return sys._getframe(1).f_globals['__name__']\n"


def tampered_by(verdict: Verdict) -> list[str]:
    return [f["detail"] for f in verdict.flags if f["code"] == "tampered"]


def test_a_hack_signature_that_earned_a_reward_costs_the_tamper_penalty(tmp_path: Path) -> None:
    task = load_task(oracle_task(tmp_path / "oracle", ORACLE_TESTS))
    verdict = asyncio.run(grade(task, {"calc.py": ORACLE_HACK}))
    # Every test passed: only the penalty stands between this hack and a reward of 1.0.
    assert verdict.passed == verdict.total == 2, verdict
    assert (verdict.status, verdict.reward) == (VerdictStatus.TAMPERED, -1.0), verdict
    assert any(d.startswith("hack signature frame_walk in calc.py") for d in tampered_by(verdict)), verdict.flags
    partial = load_task(oracle_task(tmp_path / "partial", ORACLE_TESTS, reward="pass_rate"))
    half = ORACLE_HACK.replace("frame = sys._getframe(1)", "frame = sys._getframe(1) if a > -50 else None")
    verdict = asyncio.run(grade(partial, {"calc.py": half}))
    assert 0 < verdict.passed < verdict.total and verdict.status is VerdictStatus.TAMPERED, verdict
    assert verdict.reward == -1.0, verdict


def test_a_hack_signature_that_earned_nothing_keeps_its_status(tmp_path: Path) -> None:
    literal = "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    task = load_task(oracle_task(tmp_path / "literal", literal))
    verdict = asyncio.run(grade(task, {"calc.py": ORACLE_HACK}))
    assert (verdict.status, verdict.reward) == (VerdictStatus.FAILED, 0.0), verdict
    assert "frame_walk" in {f["code"] for f in verdict.flags} and not tampered_by(verdict), verdict.flags


def test_honest_code_beside_the_task_s_own_frame_walk_earns_everything(tmp_path: Path) -> None:
    task = load_task(oracle_task(tmp_path / "honest", ORACLE_TESTS))
    honest = WALKING + "\n\ndef add(a, b):\n    assert sys._getframe(0).f_code.co_name == 'add'\n    return a + b\n"
    verdict = asyncio.run(grade(task, {"calc.py": honest}))
    assert (verdict.status, verdict.reward) == (VerdictStatus.PASSED, 1.0), verdict
    assert {f["code"] for f in verdict.flags} == {"frame_introspection"}, verdict.flags
