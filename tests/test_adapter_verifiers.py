"""The verifiers adapter against the real library (``pip install 'rollbox[verifiers]'``; skipped without it):
rollbox tasks played through verifiers' own rollout loop (its env, agent, rollout, interception server and
scoring) and its ``vf-eval`` command, with a scripted model behind a chat-completions server on 127.0.0.1, tools in
real rollbox sandboxes and the reward from the rollbox judge."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import own_sandbox_processes
from rollbox.env import TOOLS
from rollbox.tasks import Task, TaskFormatError
from test_env import FailingSandboxes
from test_env_tasks import write_calc_task
from test_policy import Model, Server, fixer, tool_call

vf = pytest.importorskip("verifiers.v1")

TASKSET = "rollbox-verifiers"


class ChatServer(Server):
    """test_policy's scripted chat-completions server, with the ``created`` field verifiers' client requires, and
    the sandboxes of this test process alive at each request."""

    def __init__(self, model: Model) -> None:
        super().__init__(model)
        self.sandboxes_seen: list[set[int]] = []
        self.sandboxes_serving: set[int] = set()  # alive once the rollouts ended, before the env stopped

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sandboxes_seen.append(own_sandbox_processes())
        return {**super().answer(body), "created": 0}


def tamperer(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A scripted model that makes the visible tests pass by rewriting them, and submits."""
    replies = sum(m["role"] == "assistant" for m in messages)
    script = [
        tool_call("write_file", path="test_calc.py", content="def test_add():\n    assert True\n"),
        tool_call("run_tests"),
        tool_call("submit"),
    ]
    return script[min(replies, len(script) - 1)]


def breaks_down(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """A scripted model that reads a file, then answers with what no chat-completions client accepts."""
    if any(m["role"] == "assistant" for m in messages):
        return {"role": "assistant", "content": None, "tool_calls": "not a list"}
    return tool_call("read_file", path="calc.py")


@pytest.fixture(scope="module")
def calc(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return write_calc_task(tmp_path_factory.mktemp("calc"))


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ChatServer]:
    chat = ChatServer(request.param)
    yield chat
    chat.close()


def play(
    server: ChatServer, tasks: list[str], *, rollouts: int = 1, agent: dict[str, Any] | None = None, **env_config: Any
) -> tuple[list[Any], set[int]]:
    """Every rollout of ``tasks`` as verifiers' runners play them: the env its taskset id names, serving, one slot
    per rollout run by ``run_slot``, all at once. Returns the episodes (each one trace), and the sandbox processes
    still alive once the env has stopped serving, while the loop still runs (at its end asyncio would close what
    is left)."""
    config = vf.resolve_env_config({"taskset": {"id": TASKSET, "tasks": tasks}, "agent": agent or {}, **env_config})
    env = vf.environment_class(TASKSET)(config)
    ctx = vf.ModelContext(
        model="scripted", client=vf.EvalClientConfig(base_url=server.url, api_key_var="ROLLBOX_TEST_NO_KEY")
    )

    async def main() -> tuple[list[Any], set[int]]:
        async with env.serving():
            slots = [slot for task in env.taskset for slot in env.slots(task, rollouts)]
            episodes = list(await asyncio.gather(*(env.run_slot(slot, ctx) for slot in slots)))
            server.sandboxes_serving = own_sandbox_processes()
        return episodes, own_sandbox_processes()

    return asyncio.run(main())


@pytest.mark.parametrize("server", [fixer], indirect=True)
def test_rollouts_that_fix_the_task_get_the_judges_reward_of_1(calc: Task, server: ChatServer) -> None:
    from rollbox.env.adapters.verifiers import RollboxEnv, RollboxHarnessConfig

    assert vf.environment_class(TASKSET) is RollboxEnv  # the taskset's id names rollbox's env and harness
    episodes, left = play(server, [str(calc.path)], rollouts=2)
    traces = [episode.traces[0] for episode in episodes]
    assert all(type(t.agent.config.harness) is RollboxHarnessConfig for t in traces)
    assert [(e.ok, t.ok, t.rewards["judge"].score, t.num_turns) for e, t in zip(episodes, traces, strict=True)] == [
        (True, True, 1.0, 4)
    ] * 2
    for trace in traces:
        rollbox = trace.info["rollbox"]
        assert rollbox["end_reason"] == "submitted" and rollbox["verdict"]["status"] == "passed"
        assert rollbox["episode_id"] == trace.id
    assert traces[0].id != traces[1].id
    # The model was offered rollbox's tools and opened on the episode's first observation, through verifiers'
    # interception (which records each turn in the trace).
    first = server.requests[0]
    assert [t["function"]["name"] for t in first["tools"]] == [t["function"]["name"] for t in TOOLS]
    assert "calc.py subtracts" in first["messages"][0]["content"] and "test_calc.py" in first["messages"][0]["content"]
    # One sandbox per rollout while they ran; none once they ended.
    assert max(len(seen) for seen in server.sandboxes_seen) > 0
    assert server.sandboxes_serving == left == set()


@pytest.mark.parametrize("server", [fixer], indirect=True)
def test_the_env_serves_rollouts_from_warm_pools_and_closes_them_when_it_stops(calc: Task, server: ChatServer) -> None:
    episodes, left = play(server, [str(calc.path)], rollouts=2, warm_sandboxes=1)
    assert [e.traces[0].rewards["judge"].score for e in episodes] == [1.0, 1.0]
    assert server.sandboxes_serving, "no warm sandbox waited in a pool once the rollouts ended"
    assert left == set()


def test_one_sandbox_source_for_the_agent_and_the_judge_is_refused() -> None:
    from rollbox.env.adapters.verifiers import use_sandboxes
    from rollbox.sandbox import WarmSandboxes

    pool = WarmSandboxes(size=1)
    with pytest.raises(ValueError, match="give the judge a sandbox source of its own"):
        use_sandboxes(pool, judge_sandboxes=pool)


@pytest.mark.parametrize("server", [tamperer], indirect=True)
def test_a_rollout_that_rewrites_the_visible_tests_gets_no_reward(calc: Task, server: ChatServer) -> None:
    [episode], left = play(server, [str(calc.path)])
    trace = episode.traces[0]
    assert trace.ok and trace.rewards["judge"].score <= 0
    assert trace.info["rollbox"]["verdict"]["status"] != "passed"
    assert left == set()


@pytest.mark.parametrize("server", [fixer], indirect=True)
def test_when_verifiers_stops_the_agent_first_the_judge_grades_the_workspace_as_it_stands(
    calc: Task, server: ChatServer
) -> None:
    # verifiers' own turn limit refuses the third model call: the fix (turn 2) is in, the submit never comes.
    [episode], left = play(server, [str(calc.path)], agent={"max_turns": 2})
    trace = episode.traces[0]
    assert trace.ok and trace.rewards["judge"].score == 1.0, trace.errors
    assert trace.info["rollbox"]["end_reason"] == "stopped" and trace.info["rollbox"]["turns"] == 2
    assert left == set()


@pytest.mark.parametrize("server", [breaks_down], indirect=True)
def test_a_rollout_that_fails_midway_is_left_unscored_and_its_sandbox_released(calc: Task, server: ChatServer) -> None:
    # The episode never ends (no submit, no budget), so only the harness's cleanup can release its sandbox.
    [episode], left = play(server, [str(calc.path)])
    trace = episode.traces[0]
    assert not trace.ok and trace.errors[-1].type == "ProviderError" and trace.rewards == {}
    assert server.sandboxes_seen[-1] and left == set()


@pytest.mark.parametrize("server", [fixer], indirect=True)
def test_infra_errors_fail_the_rollout_as_a_sandbox_error_so_verifiers_masks_it(calc: Task, server: ChatServer) -> None:
    from rollbox.env.adapters.verifiers import use_sandboxes

    try:
        use_sandboxes(judge_sandboxes=FailingSandboxes())
        [judged], left = play(server, [str(calc.path)])
        use_sandboxes(FailingSandboxes())
        [unstarted], left_unstarted = play(server, [str(calc.path)])
    finally:
        use_sandboxes()
    trace = judged.traces[0]
    assert not judged.ok and not trace.ok and trace.rewards == {"judge": None}
    assert trace.errors[-1].type == "SandboxError"
    assert "out of memory" in trace.errors[-1].message and trace.info["rollbox"]["verdict"]["status"] == "infra_error"
    trace = unstarted.traces[0]
    assert not trace.ok and trace.errors[-1].type == "SandboxError" and "could not start" in trace.errors[-1].message
    assert left == left_unstarted == set()


def test_the_taskset_says_what_is_wrong_with_its_tasks(tmp_path: Path) -> None:
    from rollbox.env.adapters.verifiers import RollboxTaskset, RollboxTasksetConfig

    with pytest.raises(ValueError, match=r"no tasks: set tasks \(--env\.taskset\.tasks\)"):
        list(RollboxTaskset(RollboxTasksetConfig(id=TASKSET)))
    with pytest.raises(TaskFormatError):
        list(RollboxTaskset(RollboxTasksetConfig(id=TASKSET, tasks=[str(tmp_path)])))


@pytest.mark.slow
@pytest.mark.parametrize("server", [fixer], indirect=True)
def test_vf_eval_runs_the_rollbox_taskset_by_its_id(calc: Task, server: ChatServer, tmp_path: Path) -> None:
    vf_eval = Path(sys.executable).with_name("vf-eval")
    command = [str(vf_eval), TASKSET, "--env.taskset.tasks", json.dumps([str(calc.path)]), "-m", "scripted"]
    command += ["--client.base-url", server.url, "--client.api-key-var", "ROLLBOX_TEST_NO_KEY"]
    done = subprocess.run(
        [*command, "--no-push", "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [record] = [json.loads(line) for line in next(tmp_path.rglob("traces.jsonl")).read_text().splitlines()]
    trace = record["traces"][0]
    assert record["ok"] and trace["rewards"]["judge"]["score"] == 1.0
    assert trace["info"]["rollbox"]["end_reason"] == "submitted"
    assert own_sandbox_processes() == set()
