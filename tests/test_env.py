"""Episodes end to end on real tasks in real sandboxes: tools, the judge's reward, the agent's own failures."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

import rollbox
from rollbox import telemetry
from rollbox.env import EndReason, Episode, EpisodeState, EpisodeStateError, Observation, StepResult
from rollbox.judge import VerdictStatus
from rollbox.sandbox import Sandbox, SandboxConfig, SandboxError, Status
from rollbox.tasks import Task
from test_env_tasks import FIXED, VISIBLE, humaneval_task, write_calc_task


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


SUBMIT = call("submit")


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_calc_task(tmp_path_factory.mktemp("calc"))


async def play(task: Task, actions: list[Any], **options: Any) -> tuple[Episode, list[StepResult]]:
    """Reset an episode of ``task`` and take ``actions`` until it ends; the episode is closed."""
    results = []
    async with rollbox.make(task, **options) as env:
        await env.reset()
        for action in actions:
            results.append(await env.step(action))
            if results[-1].done:
                break
    return env, results


def test_the_fixer_gets_reward_one_from_the_judge(calc: Task) -> None:
    env, results = run(
        play(calc, [call("read_file", path="calc.py"), call("edit", path="calc.py", old="a - b", new="a + b"), SUBMIT])
    )
    assert results[0].observation.text.startswith("def add(a, b):")
    last = results[-1]
    assert last.done and last.reward == 1.0
    assert last.info["verdict"].status is VerdictStatus.PASSED and last.info.end_reason is EndReason.SUBMITTED
    assert [r.reward for r in results[:-1]] == [0.0, 0.0] and not any(r.done for r in results[:-1])
    assert env.state is EpisodeState.CLOSED and env.trajectory.reward == 1.0 and len(env.trajectory.turns) == 3


def test_the_first_observation_is_the_instruction_and_the_listing(calc: Task) -> None:
    async def first() -> Observation:
        async with rollbox.make(calc) as env:
            return await env.reset()

    obs = run(first())
    assert "calc.py subtracts" in obs.text and "calc.py\ntest_calc.py" in obs.text and obs.tool is None


@pytest.mark.parametrize(
    "cheat",
    [
        [call("write_file", path="test_calc.py", content="def test_add():\n    assert True\n")],
        [call("bash", command="rm test_calc.py")],
        [call("write_file", path="conftest.py", content="import calc\ncalc.add = lambda a, b: a + b\n")],
    ],
    ids=["edit-visible-tests", "delete-visible-tests", "conftest"],
)
def test_editing_or_deleting_the_tests_instead_earns_nothing(calc: Task, cheat: list[Any]) -> None:
    _env, results = run(play(calc, [*cheat, call("run_tests"), SUBMIT]))
    last = results[-1]
    assert last.done and last.reward is not None and last.reward <= 0
    assert last.info.verdict is not None and last.info.verdict.status is not VerdictStatus.INFRA_ERROR


def test_run_tests_runs_the_pristine_visible_tests_never_the_hidden_ones(calc: Task) -> None:
    edited = call("write_file", path="test_calc.py", content="def test_nothing():\n    pass\n")
    _env, results = run(
        play(calc, [call("run_tests"), edited, call("run_tests"), call("bash", command="ls /tmp/.rollbox-visible")])
    )
    before, _, after, listing = (r.observation for r in results)
    assert "1 failed, 1 passed" in before.text and before.status is Status.NONZERO_EXIT
    assert "1 failed, 1 passed" in after.text  # the agent's edit of its copy changes nothing
    assert "test_hidden" not in listing.text and "hidden" not in before.text


def test_apply_patch_fixes_the_bug(calc: Task) -> None:
    diff = "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    _env, results = run(play(calc, [call("apply_patch", unified_diff=diff), call("read_file", path="calc.py"), SUBMIT]))
    assert results[0].observation.text.startswith("Wrote calc.py") and not results[0].observation.error
    assert results[1].observation.text == FIXED and results[-1].reward == 1.0


def test_a_humaneval_task_with_the_reference_and_noop_policies(tmp_path_factory: pytest.TempPathFactory) -> None:
    from rollbox.env import policy_from_name, run_episode

    task = humaneval_task(tmp_path_factory.mktemp("humaneval"))
    reference = run(run_episode(rollbox.make(task), policy_from_name("reference")))
    noop = run(run_episode(rollbox.make(task), policy_from_name("noop")))
    assert reference.reward == 1.0 and reference.status == "passed" and reference.policy == "reference"
    assert noop.reward == 0.0 and noop.status in ("failed", "error")
    assert [t.action["name"] for t in reference.turns] == ["write_file", "submit"]


def test_a_fork_bomb_is_contained_and_the_episode_ends_cleanly(calc: Task) -> None:
    bomb = call("bash", command="b() { b | b & }; b; sleep 10")
    env, results = run(play(calc, [bomb, call("bash", command="echo alive"), SUBMIT]))
    assert results[0].observation.status is Status.PIDS_LIMIT and not results[0].done
    assert results[1].observation.text.startswith("alive")
    assert results[-1].info.verdict.status is VerdictStatus.FAILED and results[-1].reward == 0.0
    assert env.state is EpisodeState.CLOSED


def test_killing_its_own_shell_or_filling_its_disk_is_the_candidates_failure(calc: Task) -> None:
    actions = [
        call("bash", command="kill -9 $$"),
        call("bash", command="kill -9 -1; kill -9 1; echo still"),
        call("bash", command="head -c 64M /dev/zero > big"),
        call("write_file", path="more.txt", content="x" * 1_000_000),
        call("bash", command="rm -f big more.txt; echo ok"),
        SUBMIT,
    ]
    _env, results = run(play(calc, actions))
    statuses = [r.observation.status for r in results]
    assert statuses[0] is Status.SIGNALED and "signal 9" in results[0].observation.text
    assert statuses[2] is Status.DISK_LIMIT
    assert results[4].observation.text.startswith("ok")
    last = results[-1]
    assert last.done and last.info.verdict.status is VerdictStatus.FAILED and last.reward == 0.0
    assert all(s is not Status.INFRA_ERROR for s in statuses)


def test_a_full_disk_at_submission_is_graded_not_infra_error(calc: Task) -> None:
    _env, results = run(play(calc, [call("bash", command="head -c 64M /dev/zero > big; ls"), SUBMIT]))
    assert results[0].observation.status is Status.DISK_LIMIT
    assert results[-1].info.verdict.status is not VerdictStatus.INFRA_ERROR and results[-1].reward is not None


MALFORMED: list[tuple[Any, str]] = [
    ({"name": "rm_rf", "arguments": {}}, "unknown tool 'rm_rf'"),
    ({"arguments": {}}, "no tool call"),
    ("bash ls", "an action is a tool call"),
    (None, "an action is a tool call"),
    ({"name": "bash", "arguments": "{not json"}, "not valid JSON"),
    ({"name": "bash", "arguments": "[1, 2]"}, "must be a JSON object"),
    ({"name": "bash", "arguments": {}}, "missing the argument 'command'"),
    ({"name": "bash", "arguments": {"command": "ls", "sudo": True}}, "unknown argument 'sudo'"),
    ({"name": "bash", "arguments": {"command": 42}}, "'command' must be a string"),
    ({"name": "read_file", "arguments": {"path": "calc.py", "start": True}}, "'start' must be an integer"),
    ({"name": "read_file", "arguments": {"path": "../../etc/passwd"}}, "does not name a file inside /workspace"),
    ({"name": "read_file", "arguments": {"path": "/etc/passwd"}}, "outside /workspace"),
    ({"name": "write_file", "arguments": {"path": "/workspace", "content": ""}}, "does not name a file"),
    ({"name": "write_file", "arguments": {"path": "a/../../x", "content": ""}}, "does not name a file"),
    ({"name": "write_file", "arguments": {"path": "x.bin", "content": "a\0b"}}, "NUL character"),
    ({"name": "write_file", "arguments": {"path": "x.txt", "content": "\ud800"}}, "lone surrogate"),
    ({"name": "read_file", "arguments": {"path": "missing.py"}}, "no such file"),
    ({"name": "read_file", "arguments": {"path": "link"}}, "symbolic link"),
    ({"name": "read_file", "arguments": {"path": "blob"}}, "binary file of 3 bytes"),
    ({"name": "read_file", "arguments": {"path": "calc.py", "start": 5, "end": 2}}, "1 <= start <= end"),
    ({"name": "edit", "arguments": {"path": "calc.py", "old": "nowhere", "new": ""}}, "does not occur"),
    ({"name": "edit", "arguments": {"path": "calc.py", "old": "return", "new": "yield"}}, "occurs 2 times"),
    ({"name": "edit", "arguments": {"path": "calc.py", "old": "", "new": "x"}}, "must not be empty"),
    ({"name": "apply_patch", "arguments": {"unified_diff": "please fix it"}}, "no file header"),
    (
        {
            "name": "apply_patch",
            "arguments": {"unified_diff": "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-nope\n+x\n"},
        },
        "does not apply",
    ),
    (
        {"name": "apply_patch", "arguments": {"unified_diff": "--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n"}},
        "inside /workspace",
    ),
]


def test_every_kind_of_malformed_action_is_an_error_observation_that_counts_a_turn(calc: Task) -> None:
    setup = call("bash", command="ln -s /etc/passwd link; printf '\\377\\376\\0' > blob")
    actions = [setup, *(a for a, _ in MALFORMED), SUBMIT]
    env, results = run(play(calc, actions))
    for (action, expected), result in zip(MALFORMED, results[1:-1], strict=True):
        assert result.observation.error and expected in result.observation.text, (action, result.observation.text)
        assert not result.done and result.reward == 0.0
    assert results[-1].done and results[-1].info.turn == len(MALFORMED) + 2
    assert results[-1].info.verdict.status is VerdictStatus.FAILED  # nothing malformed changed the workspace
    assert len(env.trajectory.turns) == len(MALFORMED) + 2


def test_budgets_end_the_episode_and_it_is_judged_as_it_stands(calc: Task) -> None:
    fix = call("edit", path="calc.py", old="a - b", new="a + b")
    _env, turns = run(play(calc, [fix, call("bash", command="true"), SUBMIT], max_turns=2))
    assert len(turns) == 2 and turns[-1].done and turns[-1].info.end_reason is EndReason.MAX_TURNS
    assert turns[-1].reward == 1.0 and turns[-1].info.truncated  # the fix made before the end counts

    _env, turns = run(play(calc, [call("bash", command="sleep 30"), SUBMIT], wall_s=1.5))
    assert turns[0].done and turns[0].info.end_reason is EndReason.WALL_TIME
    assert turns[0].observation.status is Status.TIMEOUT and turns[0].info.wall_s < 15

    _env, turns = run(play(calc, [call("bash", command="sleep 30"), SUBMIT], command_timeout_s=0.5))
    assert (
        turns[0].observation.status is Status.TIMEOUT and not turns[0].done and "timed out" in turns[0].observation.text
    )

    printer = call("bash", command="seq 1 100000")
    _env, turns = run(play(calc, [printer, printer, printer, SUBMIT], observation_bytes=2000, output_bytes=5000))
    first = turns[0].observation
    assert first.truncated and first.full_bytes == len("".join(f"{i}\n" for i in range(1, 100001))) + len(
        "[exit code 0]"
    )
    assert f"of {first.full_bytes} bytes not shown" in first.text and len(first.text.encode()) < 2200
    assert first.text.rstrip().endswith("[exit code 0]")  # the end of the output, where the status is, stays
    assert len(turns) == 3 and turns[-1].info.end_reason is EndReason.OUTPUT and turns[-1].reward == 0.0


def test_the_task_sets_its_budget_and_overrides_win(tmp_path: Path) -> None:
    task = write_calc_task(
        tmp_path / "t", toml_extra='\n[metadata.episode]\nmax_turns = 7\nwall_time = "2m"\noutput = "64K"\n'
    )
    env = rollbox.make(task)
    assert (env.budget.max_turns, env.budget.wall_s, env.budget.output_bytes) == (7, 120.0, 65536)
    assert env.budget.command_timeout_s == 20.0
    assert rollbox.make(task, max_turns=3).budget.max_turns == 3
    with pytest.raises(ValueError, match="unknown budget"):
        rollbox.make(task, turns=3)
    with pytest.raises(ValueError, match="positive"):
        rollbox.make(task, max_turns=0)


def test_an_episode_is_used_in_order_and_closes_idempotently(calc: Task) -> None:
    async def scenario() -> None:
        env = rollbox.make(calc)
        with pytest.raises(EpisodeStateError, match=r"call 'await env.reset\(\)' first"):
            await env.step(SUBMIT)
        await env.reset()
        with pytest.raises(EpisodeStateError, match=r"reset already"):
            await env.reset()
        _obs, _reward, done, _info = await env.step(SUBMIT)
        assert done and env.state is EpisodeState.DONE
        with pytest.raises(EpisodeStateError, match="ended"):
            await env.step(SUBMIT)
        await env.close()
        await env.close()
        assert env.state is EpisodeState.CLOSED

    run(scenario())


def test_a_frozen_workspace_is_what_the_judge_grades_whatever_later_steps_change(calc: Task) -> None:
    async def scenario() -> tuple[list[StepResult], Observation]:
        env = rollbox.make(calc)
        with pytest.raises(EpisodeStateError, match=r"cannot freeze the workspace.*reset"):
            await env.freeze_workspace()
        async with env:
            await env.reset()
            fixed = await env.step(call("edit", path="calc.py", old="a - b", new="a + b"))
            await env.freeze_workspace()
            with pytest.raises(EpisodeStateError, match="frozen already"):
                await env.freeze_workspace()
            after = [
                await env.step(call("bash", command="sed -i 's/a + b/a - b/' calc.py && grep -c 'a - b' calc.py")),
                await env.step(call("write_file", path="extra.py", content="x = 1\n")),
                await env.step(SUBMIT),
            ]
        return after, fixed.observation

    after, fixed = run(scenario())
    assert not fixed.error and after[0].observation.text.startswith("1\n"), after[0]  # the sandbox's changed
    assert after[-1].done and after[-1].reward == 1.0, after[-1].info["verdict"]  # the frozen workspace was graded


def test_shaped_rewards_are_the_judges_visible_pass_rate_changes(calc: Task) -> None:
    fix = call("edit", path="calc.py", old="a - b", new="a + b")
    _env, turns = run(play(calc, [call("run_tests"), fix, call("run_tests"), SUBMIT], shaped_rewards=True))
    assert [t.info.shaped_reward for t in turns[:3]] == [0.0, 0.0, 0.5]
    assert [t.reward for t in turns] == [0.0, 0.0, 0.5, 1.0]
    # Cheating on the visible tests in its own sandbox earns no shaped reward: the judge grades pristine copies.
    cheat = call("write_file", path="test_calc.py", content=VISIBLE.replace("== 3", "== -1"))
    _env, turns = run(play(calc, [cheat, call("run_tests"), SUBMIT], shaped_rewards=True))
    assert turns[1].info.shaped_reward == 0.0 and "1 failed" in turns[1].observation.text


class FailingSandboxes:
    """A sandbox source on a host that cannot make sandboxes any more (what the judge sees when the host fails)."""

    @contextlib.asynccontextmanager
    async def sandbox(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        raise SandboxError("cannot start a sandbox: the host is out of memory")
        yield  # pragma: no cover

    def sandboxes(
        self, count: int, config: SandboxConfig, **kw: Any
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        raise SandboxError("cannot start a sandbox: the host is out of memory")


def test_an_infrastructure_failure_ends_with_infra_error_and_no_reward(calc: Task) -> None:
    _env, turns = run(play(calc, [SUBMIT], judge_sandboxes=FailingSandboxes()))
    assert turns[-1].done and turns[-1].reward is None
    assert turns[-1].info["status"] is VerdictStatus.INFRA_ERROR and "out of memory" in turns[-1].info.verdict.error

    # The agent's sandbox could not be started: the first observation says so, and the episode ends as
    # infra_error (masked), never as an exception in the trainer's rollout.
    _env, turns = run(play(calc, [call("bash", command="true"), SUBMIT], sandboxes=FailingSandboxes()))
    assert turns[-1].done and turns[-1].reward is None and len(turns) == 1, turns
    assert turns[-1].info["status"] is VerdictStatus.INFRA_ERROR and "out of memory" in turns[-1].info.verdict.error

    async def first_observation() -> Observation:
        async with rollbox.make(calc, sandboxes=FailingSandboxes()) as env:
            return await env.reset()

    observation = run(first_observation())
    assert observation.status is Status.INFRA_ERROR and "could not be started" in observation.text, observation


def test_every_turn_and_the_end_are_reported_to_telemetry(calc: Task) -> None:
    events: list[telemetry.Event] = []

    class Sink:
        def write(self, event: telemetry.Event) -> None:
            events.append(event)

    with telemetry.recording(Sink()):
        env, _ = run(play(calc, [call("bash", command="true"), SUBMIT]))
    kinds = [(e.kind, e.fields.get("turn")) for e in events if e.kind.startswith("episode.")]
    assert kinds == [("episode.turn", 1), ("episode.turn", 2), ("episode.end", None)]
    end = next(e for e in events if e.kind == "episode.end")
    assert end.fields["episode_id"] == env.trajectory.episode_id and end.fields["reward"] == 0.0


def test_steps_that_come_together_are_taken_one_at_a_time_and_each_counts(calc: Task) -> None:
    """Four steps at once with max_turns=2: two run, one after the other, and the episode ends on the second; the
    others find it ended. Two submits at once: one is graded, once."""
    events: list[telemetry.Event] = []

    class Sink:
        def write(self, event: telemetry.Event) -> None:
            events.append(event)

    async def together(env: Episode, actions: list[Any]) -> list[StepResult | BaseException]:
        await env.reset()
        return await asyncio.gather(*(env.step(a) for a in actions), return_exceptions=True)

    slow = call("bash", command="echo start >> log; sleep 0.3; echo end >> log; cat log")
    with telemetry.recording(Sink()):
        env = rollbox.make(calc, max_turns=2)
        outcomes = run(together(env, [slow] * 4))
        run(env.close())
    ran = [o for o in outcomes if isinstance(o, StepResult)]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(ran) == 2 and len(refused) == 2 and len(env.trajectory.turns) == 2
    assert all(isinstance(e, EpisodeStateError) and "ended" in str(e) for e in refused)
    assert [r.info.turn for r in ran] == [1, 2] and ran[1].done and ran[1].info.end_reason is EndReason.MAX_TURNS
    # One after the other: the second command saw the first one's whole run in the log.
    assert ran[1].observation.text.startswith("start\nend\nstart\nend\n")
    first, second = env.trajectory.turns
    assert second.started_s >= first.started_s + first.wall_s

    with telemetry.recording(Sink()):
        env = rollbox.make(calc)
        outcomes = run(together(env, [SUBMIT, SUBMIT]))
        run(env.close())
    graded = [o for o in outcomes if isinstance(o, StepResult)]
    assert len(graded) == 1 and graded[0].done and isinstance(outcomes[1], EpisodeStateError)
    ends = [e for e in events if e.kind == "episode.end" and e.fields["episode_id"] == env.trajectory.episode_id]
    assert len(ends) == 1 and len(env.trajectory.turns) == 1


def test_end_called_while_a_step_runs_waits_for_it_then_judges_what_it_did(calc: Task) -> None:
    async def scenario() -> None:
        async with rollbox.make(calc) as env:
            await env.reset()
            fix = call("bash", command="sleep 0.3; sed -i 's/a - b/a + b/' calc.py; echo fixed")
            stepping = asyncio.ensure_future(env.step(fix))
            await asyncio.sleep(0.05)
            verdict = await env.end()  # waits for the step, then judges the workspace the fix left
            result = await stepping
            assert result.observation.text.startswith("fixed") and not result.done
            assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0
            assert env.trajectory.end_reason == "stopped" and len(env.trajectory.turns) == 1

    run(scenario())


def _adding(count: int) -> str:
    return "".join(f"--- /dev/null\n+++ b/new/f{i}.txt\n@@ -0,0 +1 @@\n+line {i}\n" for i in range(count))


def test_a_patch_of_thousands_of_files_is_written_in_batches_within_the_wall_budget(calc: Task) -> None:
    """2,500 new files in one apply_patch: no process per file (it took 20-25 s), and the call ends by the wall
    budget whatever it holds."""
    begin = time.monotonic()
    _env, turns = run(play(calc, [call("apply_patch", unified_diff=_adding(2500)), SUBMIT], wall_s=1))
    took = time.monotonic() - begin
    patch = turns[0]
    assert took < 8, took  # reset, the step and the judge's grading together
    assert patch.info.wall_s < 2.5, patch.info.wall_s
    if patch.done:  # the wall time ran out during it
        assert patch.info.end_reason is EndReason.WALL_TIME
    else:
        assert (
            patch.observation.text.startswith("Wrote new/f0.txt (7 bytes)")
            and "and 2450 more" in patch.observation.text
        )

    _env, turns = run(
        play(calc, [call("apply_patch", unified_diff=_adding(2500)), call("bash", command="ls new | wc -l")])
    )
    assert turns[1].observation.text.startswith("2500\n")


def test_a_patch_that_computes_past_the_wall_budget_is_stopped_there(calc: Task) -> None:
    """A 3.9 MB file named 1,200 times, each hunk found far from where its header says: the call ends with the wall
    budget (it ran 8-19 s on the event loop), changing nothing, and the episode ends there."""
    make = call("bash", command="seq 1 580000 > big.txt")
    diff = "--- a/big.txt\n+++ b/big.txt\n@@ -1,1 +1,1 @@\n-579990\n+579990\n" * 1200
    _env, turns = run(play(calc, [make, call("apply_patch", unified_diff=diff), SUBMIT], wall_s=3))
    patch = turns[1]
    assert patch.done and patch.info.end_reason is EndReason.WALL_TIME, patch.observation.text
    assert "ran out of time" in patch.observation.text and "nothing changed" in patch.observation.text
    assert patch.observation.status is Status.TIMEOUT and patch.info.wall_s < 4, patch.info.wall_s
    assert patch.reward == 0.0 and patch.info.verdict is not None


def test_writes_keep_a_files_mode_refuse_links_and_fill_the_disk_as_the_agents_own(calc: Task) -> None:
    actions = [
        call("bash", command="printf '#!/bin/sh\\necho one\\n' > run.sh && chmod 755 run.sh && ln -s calc.py link"),
        call("edit", path="run.sh", old="one", new="two"),
        call("bash", command="./run.sh && stat -c %a run.sh"),
        call("write_file", path="link", content="x"),
        call("write_file", path="calc.py/inside", content="x"),
        call("bash", command="head -c 20M /dev/zero > big; true"),
        call("write_file", path="more.txt", content="y" * 1_000_000),
        call("write_file", path="huge.txt", content="z" * 17_000_000),
        call("bash", command="rm big; cat calc.py | head -2"),
        SUBMIT,
    ]
    _env, turns = run(play(calc, actions))
    assert turns[2].observation.text.startswith("two\n755\n")  # edited in place: still executable
    assert turns[3].observation.error and "symbolic link" in turns[3].observation.text
    assert turns[4].observation.error and "not a directory" in turns[4].observation.text
    full = turns[6].observation
    assert full.error and full.status is Status.DISK_LIMIT and "disk is full" in full.text, full.text
    assert turns[7].observation.status is Status.DISK_LIMIT and "file size limit" in turns[7].observation.text
    assert turns[8].observation.text.startswith("def add(a, b):")  # the link was never followed
    assert all(t.observation.status is not Status.INFRA_ERROR for t in turns)


def test_a_tree_deeper_than_the_judge_takes_is_the_agents_failure(calc: Task) -> None:
    """A workspace holding a path 2,100 directories deep (4,200 bytes, past PATH_MAX) is refused at submission,
    reward 0.0: the export crashed on it with RecursionError (and would have been infra_error)."""
    deep = "import os\nfor _ in range(2100):\n    os.mkdir('x')\n    os.chdir('x')\nopen('f', 'w').write('hi')\n"
    actions = [call("write_file", path="deep.py", content=deep), call("bash", command="python3 deep.py"), SUBMIT]
    _env, turns = run(play(calc, actions))
    last = turns[-1]
    assert last.done and last.reward == 0.0 and last.info.verdict.status is VerdictStatus.ERROR
    (flag,) = last.info.verdict.flags
    assert flag["code"] == "workspace_refused" and "deeper than 256 directories" in flag["detail"]
