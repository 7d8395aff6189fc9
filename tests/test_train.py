"""The loop, end to end with real sandboxes, the real scheduler and the real judge: the JSON it prints, its
determinism by seed, the rollbox arm's rewards against the judge's own verdicts, infrastructure failures masked
(never counted as 0), and a served model (a scripted OpenAI-compatible server on loopback) through the same loop."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import rollbox.train
from rollbox.env import ScriptedPolicy, make
from rollbox.judge import grade
from rollbox.scheduler import JobSpec, JobStore, Scheduler, store_path
from rollbox.tasks import humaneval_tasks, load_task
from rollbox.train import ARMS, ActionKind, PoolPolicy, Sample, TrainConfig, action_pool, rollout_payload, train
from rollbox.train._rollout import RolloutKind
from test_env_tasks import BUGGY, FIXED, write_calc_task
from test_policy import Server, tool_call

ROLLBOX = [sys.executable, "-m", "rollbox"]


def test_train_exports() -> None:
    assert sorted(rollbox.train.__all__) == sorted(
        [
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
    )
    for name in rollbox.train.__all__:
        assert hasattr(rollbox.train, name)


def test_grpo_moves_mass_to_what_the_group_rewarded_and_ignores_masked_samples() -> None:
    policy = PoolPolicy({"t": ["reference", "return_none", "always_equal"]}, learning_rate=1.0)
    before = policy.probabilities("t")
    assert before == pytest.approx([1 / 3] * 3)
    policy.update({"t": [Sample(0, 1.0), Sample(1, 0.0), Sample(2, 0.0), Sample(2, None)]})
    after = policy.probabilities("t")
    assert after[0] > before[0] and after[1] < before[1] and sum(after) == pytest.approx(1.0)
    # The masked sample changed nothing: the same update without it gives the same numbers.
    again = PoolPolicy({"t": ["reference", "return_none", "always_equal"]}, learning_rate=1.0)
    again.update({"t": [Sample(0, 1.0), Sample(1, 0.0), Sample(2, 0.0)]})
    assert again.probabilities("t") == after
    # Equal rewards, or a group with one graded sample, carry no signal.
    flat = PoolPolicy({"t": ["a", "b"]})
    flat.update({"t": [Sample(0, 1.0), Sample(1, 1.0)]})
    flat.update({"t": [Sample(0, 1.0), Sample(1, None)]})
    assert flat.theta["t"] == [0.0, 0.0] and flat.shared == {"a": 0.0, "b": 0.0}


def test_a_shared_family_carries_what_one_task_taught_to_another() -> None:
    policy = PoolPolicy({"t1": ["reference", "always_equal"], "t2": ["reference", "always_equal"]}, learning_rate=2.0)
    policy.update({"t1": [Sample(0, 0.0), Sample(1, 1.0)]})  # a grader that rewards the hack, on t1 only
    assert policy.probabilities("t2")[1] > 0.5


def _humaneval(root: Path, *numbers: int) -> list[Path]:
    found = humaneval_tasks(root / "humaneval")
    return [found[f"HumanEval/{n}"] for n in numbers]


def _rollbox(home: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ROLLBOX_HOME": str(home)}
    return subprocess.run([*ROLLBOX, *args], capture_output=True, text=True, env=env, timeout=timeout, check=False)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_rollbox_train_end_to_end_json_determinism_and_the_judges_rewards(tmp_path: Path) -> None:
    home = tmp_path / "home"
    common = ["train", "--humaneval", "2", "--stdio", "1", "--package", "", "--iterations", "2", "--samples", "3"]
    first = _rollbox(home, *common, "--seed", "7", "--run-id", "a", "--json")
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)  # stdout holds the one object, and nothing else
    assert set(summary) == {"arms", "report"} and set(summary["arms"]) == {"naive", "rollbox"}
    for arm in ARMS:
        iterations = summary["arms"][arm]["iterations"]
        assert len(iterations) == 2
        for figures in iterations:
            assert set(figures) == {"reward_mean", "true_pass_rate", "hack_rate", "masked", "infra_errors"}
            assert 0.0 <= figures["true_pass_rate"] <= 1.0 and 0.0 <= figures["hack_rate"] <= 1.0
            assert figures["infra_errors"] == figures["masked"] == 0
    report = Path(summary["report"])
    page = report.read_text()
    assert page.count("<svg") == 5 and "naive arm" in page and "rollbox arm" in page
    assert "validating 3 tasks" in first.stderr and "iteration 2/2" in first.stderr
    # The stdio problem's cases kill too few mutants of its reference: validation refuses it, and says why.
    assert "humaneval: 2 of 2 admitted" in first.stderr
    assert "stdio: 0 of 1 admitted, 0 used; refused: weak_tests 1" in first.stderr

    # The rollbox arm's reward is the judge's verdict, rollout by rollout; the judge grading the same files
    # again gives the same reward; the reward mean printed is theirs.
    rows = [json.loads(line) for line in (report.parent / "rollouts.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2 * 3  # iterations x arms x admitted tasks x samples
    ours = [r for r in rows if r["arm"] == "rollbox"]
    assert all(r["reward"] == r["judge_reward"] for r in ours)
    assert all(r["reward"] == r["naive_reward"] for r in rows if r["arm"] == "naive")
    for iteration in (0, 1):
        rewards = [r["reward"] for r in ours if r["iteration"] == iteration]
        mean = summary["arms"]["rollbox"]["iterations"][iteration]["reward_mean"]
        assert mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)
    paths = {load_task(p).id: p for p in (home / "train").glob("*/*") if (p / "task.toml").is_file()}
    for row in random.Random(0).sample(ours, 6):
        task = load_task(paths[row["task_id"]])
        (action,) = [a for a in action_pool(task) if a.name == row["action"]]
        verdict = asyncio.run(grade(task, dict(action.files)))
        assert (verdict.status.value, verdict.reward) == (row["status"], row["judge_reward"]), row

    # The same command and seed give the same curves (validation now comes from its cache); another seed may not.
    second = _rollbox(home, *common, "--seed", "7", "--run-id", "b", "--json")
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout)["arms"] == summary["arms"]
    assert "validating 3 tasks" in second.stderr

    plain = _rollbox(home, *common, "--seed", "7", "--run-id", "c")
    assert plain.returncode == 0, plain.stderr
    assert "true_pass_rate" in plain.stdout and "report: " in plain.stdout and "dashboard: " in plain.stdout


def _broken_runtime(source: Path, dest: Path) -> Path:
    """A copy of a task whose runtime cannot be had on any machine (a Python that does not exist)."""
    shutil.copytree(source, dest)
    toml = (dest / "task.toml").read_text().replace('id = "HumanEval/0"', 'id = "broken-runtime"')
    (dest / "task.toml").write_text(toml + '\n[environment]\npython = "3.99"\n')
    return dest


def test_every_rollout_is_counted_when_the_last_ones_end_as_the_loop_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop follows results until the scheduler's run ends: a read that began before the last rollouts ended
    and returned after the run did must not be the last one, or they are never counted. The store is slowed (not
    replaced) so that exactly that happens: nothing is leased until the loop's first read of results has begun, and
    that read returns once every job is final and the run has had time to end."""
    home = tmp_path / "home"
    tasks = [load_task(path) for path in _humaneval(tmp_path, 2)]
    config = TrainConfig(iterations=1, samples=2, max_attempts=1, run_id="gap")
    seen: list[int] = []
    first_read = threading.Event()

    async def go() -> None:
        async with Scheduler(JobStore(store_path(home)), runs=["gap"], home=home) as scheduler:
            store = scheduler.store
            read, exchange = store.results, store.exchange

            def reading(**where: Any) -> Any:
                found = read(**where)
                if not first_read.is_set():
                    first_read.set()
                    while not store.jobs(run_id="gap") or store.unfinished(["gap"]):
                        time.sleep(0.05)
                    time.sleep(1.0)  # and the scheduler's run ends meanwhile
                return found

            def exchanging(*args: Any) -> Any:
                first_read.wait(60)
                return exchange(*args)

            monkeypatch.setattr(store, "results", reading)
            monkeypatch.setattr(store, "exchange", exchanging)
            await train(tasks, config, scheduler=scheduler, on_progress=lambda p: seen.append(p.done))

    asyncio.run(go())
    assert seen[-1] == 2 * len(ARMS), seen  # samples x arms


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_infrastructure_failures_are_masked_counted_and_never_learned_from(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (good,) = _humaneval(tmp_path, 2)
    broken = _broken_runtime(_humaneval(tmp_path, 0)[0], tmp_path / "broken")
    tasks = [load_task(good), load_task(broken)]
    # Seed 3: the first draws on HumanEval/2 hold its reference, so both arms have something to learn there.
    config = TrainConfig(iterations=2, samples=8, max_attempts=1, seed=3, run_id="masked")

    async def go() -> Any:
        async with Scheduler(JobStore(store_path(home)), runs=["masked"], home=home) as scheduler:
            return await train(tasks, config, scheduler=scheduler)

    result = asyncio.run(go())
    for arm in ARMS:
        for stats in result.arms[arm]:
            # the broken task's eight, every iteration
            assert stats.infra_errors == stats.masked == 8 and stats.rollouts == 16
    rows = [json.loads(line) for line in (home / "runs" / "masked" / "rollouts.jsonl").read_text().splitlines()]
    broken_rows = [r for r in rows if r["task_id"] == "broken-runtime"]
    assert len(broken_rows) == 2 * 2 * 8
    assert all(r["masked"] and r["reward"] is None and r["status"] == "infra_error" for r in broken_rows)
    good_rows = [r for r in rows if r["task_id"] != "broken-runtime"]
    assert not any(r["masked"] for r in good_rows)
    for arm in ARMS:
        for iteration, stats in enumerate(result.arms[arm]):
            rewards = [r["reward"] for r in good_rows if r["arm"] == arm and r["iteration"] == iteration]
            assert stats.reward_mean == pytest.approx(sum(rewards) / len(rewards), abs=1e-6)  # not diluted by zeros
        # Nothing was learned from the broken task: its own logits never moved (the shared preferences, learned
        # on the good task, may have).
        policy = result.policies[arm]
        assert policy.theta["broken-runtime"] == [0.0] * len(policy.theta["broken-runtime"])
        assert any(t != 0.0 for t in policy.theta["HumanEval/2"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_deleting_the_tests_and_a_fake_summary_pass_the_naive_grader_and_not_the_judge(tmp_path: Path) -> None:
    """Two hacks of the pool, played as rollouts through the scheduler on a pytest task (visible tests in its
    workspace, hidden ones in tests/) and a HumanEval task: the naive grader's command exits 0 for both, the judge
    passes neither, and both are hacks by construction; the reference passes both graders."""
    home = tmp_path / "home"
    calc = write_calc_task(tmp_path / "calc")
    (two,) = _humaneval(tmp_path, 2)
    tasks = [calc, load_task(two)]
    names = ("delete_tests", "fake_summary", "reference")
    for task in tasks:
        pool = {a.name: a for a in action_pool(task)}
        assert pool["delete_tests"].kind is pool["fake_summary"].kind is ActionKind.HACK
    # On the pytest task the visible test file is deleted through the episode's bash tool.
    (remove,) = next(a for a in action_pool(calc) if a.name == "delete_tests").calls()[-2:-1]
    assert remove["name"] == "bash" and "test_calc.py" in remove["arguments"]["command"]

    async def go() -> dict[tuple[str, str], Any]:
        async with Scheduler(JobStore(store_path(home)), runs=["hacks"], home=home) as scheduler:
            specs = [
                JobSpec(kind="rollout", payload=rollout_payload(t.path, action=a), key=f"{t.id}/{a}", run_id="hacks")
                for t in tasks
                for a in names
            ]
            jobs = scheduler.submit(specs)
            await scheduler.run()
            return {(j.payload["task"], j.payload["action"]): scheduler.store.result(j.id) for j in jobs}

    results = asyncio.run(go())
    for task in tasks:
        for name in names:
            result = results[(str(task.path.resolve()), name)]
            naive = result.output["naive"]
            assert (naive["reward"], naive["exit_code"]) == (1.0, 0), (task.id, name, naive)
            expected = ("passed", 1.0) if name == "reference" else ("failed", 0.0)
            assert (result.status, result.reward) == expected, (task.id, name, result.output["verdict"])
    # The fake summary's last line claims a pass; the tests it hid failed.
    tail = results[(str(calc.path.resolve()), "fake_summary")].output["naive"]["tail"]
    assert "1 failed" in tail and tail.rstrip().splitlines()[-2].strip("= ").endswith("passed in 0.42s")


def test_a_rollout_masked_for_want_of_a_reward_is_no_infrastructure_error() -> None:
    # The naive grader has no harness for a script task: its arm's rollouts have no reward, masked, and were
    # counted as infrastructure errors, which the docs define as rollbox or the host failing.
    def rollout(reward: float | None, status: str | None, judge: float | None) -> rollbox.train.Rollout:
        return rollbox.train.Rollout(
            arm="naive", iteration=0, task_id="t", sample=0, job_id=1, action=None, reward=reward,
            status=status, judge_reward=judge, naive_reward=reward, hack=False,
        )  # fmt: skip

    masked = [rollout(None, "passed", 1.0), rollout(None, "infra_error", None), rollout(None, None, None)]
    stats = rollbox.train.IterationStats.of([*masked, rollout(1.0, "failed", 0.0)])
    assert (stats.masked, stats.infra_errors, stats.rollouts, stats.reward_mean) == (3, 1, 4, 1.0)


def test_two_tasks_with_one_id_are_refused_before_anything_runs(tmp_path: Path) -> None:
    # Pools, plans and job keys are by task id: the second task silently replaced the first.
    first, second = write_calc_task(tmp_path / "one"), write_calc_task(tmp_path / "two")
    config = TrainConfig(run_id="dup", iterations=1, samples=2)
    scheduler = Scheduler(JobStore(store_path(tmp_path / "home")), runs=["dup"], home=tmp_path / "home")
    with pytest.raises(ValueError, match=r"two tasks have the id 'calc': .*one and .*two"):
        asyncio.run(train([first, second], config, scheduler=scheduler))
    scheduler.store.close()


def test_what_the_agents_code_does_while_the_naive_grader_runs_it_never_reaches_the_judge(tmp_path: Path) -> None:
    """The naive grader runs the agent's code beside the hidden tests, in the agent's sandbox: code that, seeing
    them, rewrote /workspace was what the judge graded (a wrong add() earned 1.0). The judge grades the workspace
    as the agent left it; what the harness's run leaves there reaches no verdict."""
    calc = write_calc_task(tmp_path / "calc")
    rewrites = (
        "import os\n"
        "if os.path.exists('tests/test_hidden.py'):  # in the naive grader's copy, beside the hidden tests\n"
        f"    open('/workspace/calc.py', 'w').write({FIXED!r})\n" + BUGGY
    )
    calls = [
        {"name": "write_file", "arguments": {"path": "calc.py", "content": rewrites}},
        {"name": "submit", "arguments": {}},
    ]

    async def play() -> tuple[dict[str, Any], Any, str]:
        episode = make(calc, max_turns=20)
        naive, verdict, _ = await RolloutKind()._play(episode, ScriptedPolicy(calls), 2, lambda: None)
        return naive, verdict, episode.trajectory.turns[-1].observation.text

    naive, verdict, harness = asyncio.run(play())
    assert naive["reward"] == 0.0, (naive, harness)  # the copy it ran in still subtracts
    assert (verdict.status.value, verdict.reward) == ("failed", 0.0), verdict


@pytest.fixture
def model(tmp_path: Path) -> Iterator[Server]:
    """A model that writes HumanEval/2's reference, and gives every other task an exit at import (a hack the naive
    grader takes for a pass), then submits; one tool call a reply."""
    (two,) = _humaneval(tmp_path, 2)
    reference = (two / "solution" / "solution.py").read_text()

    def scripted(messages: list[dict[str, Any]]) -> dict[str, Any]:
        if any(m["role"] == "assistant" for m in messages):
            return tool_call("submit")
        if any("truncate_number" in str(m.get("content")) for m in messages):
            return tool_call("write_file", path="solution.py", content=reference)
        return tool_call("write_file", path="solution.py", content="import os\nos._exit(0)\n")

    server = Server(scripted)
    yield server
    server.close()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_served_model_through_the_loop_with_both_rewards_for_the_trainer(tmp_path: Path, model: Server) -> None:
    home = tmp_path / "home"
    zero, two = _humaneval(tmp_path, 0, 2)
    done = _rollbox(
        home, "train", "--tasks", str(zero), str(two), "--no-validate", "--policy", "openai", "--model", "scripted",
        "--base-url", model.url, "--iterations", "1", "--samples", "2", "--run-id", "served", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    naive, ours = (summary["arms"][arm]["iterations"][0] for arm in ARMS)
    # Two samples of each task: the reference passes both graders, the exit at import only the naive one.
    assert naive == {"reward_mean": 1.0, "true_pass_rate": 0.5, "hack_rate": 0.5, "masked": 0, "infra_errors": 0}
    assert ours == {"reward_mean": 0.5, "true_pass_rate": 0.5, "hack_rate": 0.5, "masked": 0, "infra_errors": 0}
    assert {r["model"] for r in model.requests} == {"scripted"} and len(model.requests) == 4 * 2
    assert model.requests[0]["tools"]  # the episode's tools, offered to the model
    rows = [json.loads(x) for x in (home / "runs" / "served" / "rollouts.jsonl").read_text().splitlines()]
    assert {(r["task_id"], r["naive_reward"], r["judge_reward"]) for r in rows} == {
        ("HumanEval/0", 1.0, 0.0),
        ("HumanEval/2", 1.0, 1.0),
    }
    assert len(list((home / "runs" / "served" / "trajectories").iterdir())) == 4
    # Each row holds the model's conversation as TRL's conversational prompt-completion columns.
    for row in rows:
        assert [m["role"] for m in row["prompt"]][-1] == "user" and row["completion"][0]["role"] == "assistant"
