"""Episode jobs: ``rollbox run`` with every policy over real tasks (HumanEval problems, and a repository task with
visible pytest tests): one result per (task, sample) with the verdict's reward, trajectories readable beside the
results, resumption that redoes nothing; a policy that cannot act; a model behind a real server on loopback; an
episode whose sandbox is killed from outside is retried, while the agent's own failures are results."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rollbox.env import Observation, Trajectory, Turn, read_trajectories, write_trajectories
from rollbox.scheduler import (
    Capacity,
    JobSpec,
    JobState,
    JobStore,
    LocalWorker,
    RetryPolicy,
    Scheduler,
    episode_payload,
)
from scheduler_helpers import HUMANEVAL, launchers, real_tasks, sandboxed, sync, wait_for
from test_policy import fixer
from test_scheduler_cli import lines, rollbox


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return real_tasks(tmp_path_factory)


def _by_task(results: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(x["task_id"], x["sample"], x["state"], x["status"], x["reward"], x["attempts"]) for x in results]


@pytest.mark.slow
def test_reference_and_noop_over_real_tasks_each_result_once_with_its_trajectory(tasks: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = rollbox(home, "run", str(tasks), "--policy", "reference", "--samples", "3", "--run-id", "ref")
    assert done.returncode == 0, done.stderr
    got = lines(home, "ref")
    ids = sorted([*HUMANEVAL, "calc"])
    assert _by_task(got) == [(t, s, "completed", "passed", 1.0, 1) for t in ids for s in range(3)]
    assert len({x["job_id"] for x in got}) == 12
    for line in got:
        (trajectory,) = read_trajectories(home / "runs" / "ref" / str(line["trajectory"]))
        assert (trajectory.task_id, trajectory.policy, trajectory.reward) == (line["task_id"], "reference", 1.0)
        assert trajectory.end_reason == "submitted" and trajectory.status == "passed"
        tools = [turn.action["name"] for turn in trajectory.turns]
        # The calc task has visible tests, which the reference policy runs before it submits.
        assert tools == (
            ["write_file", "run_tests", "submit"] if line["task_id"] == "calc" else ["write_file", "submit"]
        )
    events = [json.loads(e) for e in (home / "runs" / "ref" / "events.jsonl").read_text().splitlines()]
    moves = [(e["job_id"], e["target"]) for e in events if e["kind"] == "job.transition"]
    assert len(moves) == 12 * 5 and sum(target == "grading" for _, target in moves) == 12
    assert sum(e["kind"] == "episode.end" for e in events) == 12  # the episodes' own events, in the run's file

    again = rollbox(home, "run", str(tasks), "--policy", "reference", "--samples", "3", "--run-id", "ref")
    assert again.returncode == 0 and "12/12" in again.stderr
    assert lines(home, "ref") == got  # nothing was run again
    with sqlite3.connect(home / "jobs.db") as db:
        assert db.execute("SELECT COUNT(*), MAX(attempts) FROM jobs").fetchone() == (12, 1)

    noop = rollbox(home, "run", str(tasks), "--policy", "noop", "--run-id", "noop")
    assert noop.returncode == 0, noop.stderr  # the model's failures are results: the run itself succeeded
    assert "failed 4" in noop.stderr and "infra 0" in noop.stderr
    # The untouched workspaces fail the hidden tests: reward 0.0, not retried, never masked as infra_error.
    with sqlite3.connect(home / "jobs.db") as db:  # what an attempt that was retried ended with, if one was
        retried = db.execute("SELECT job_id, number, outcome, error FROM attempts WHERE error IS NOT NULL").fetchall()
    assert _by_task(lines(home, "noop")) == [(t, 0, "completed", "failed", 0.0, 1) for t in ids], retried

    # The run's report, from its own events (no service archived it): each failed episode says why it ended and
    # how many of the hidden tests passed.
    report = rollbox(home, "report", "noop", "-o", str(tmp_path / "noop.html"))
    assert report.returncode == 0, report.stderr
    page = (tmp_path / "noop.html").read_text()
    assert "<h1>rollbox run <code>noop</code></h1>" in page
    assert page.count("ended: submitted; tests passed: ") == 4, page


class _Model:
    """A chat-completions server on 127.0.0.1 playing the scripted fixer model, recording each request's bearer."""

    def __init__(self) -> None:
        self.authorizations: list[str | None] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.authorizations.append(self.headers.get("Authorization"))
                choice = {"index": 0, "message": fixer(body["messages"]), "finish_reason": "tool_calls"}
                data = json.dumps({"id": "1", "object": "chat.completion", "choices": [choice]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def model() -> Iterator[_Model]:
    server = _Model()
    yield server
    server.close()


@pytest.mark.slow
def test_a_model_server_and_a_replay_as_policies_and_a_policy_that_cannot_act(
    tasks: Path, tmp_path: Path, model: _Model
) -> None:
    home, key = tmp_path / "home", "sk-test-not-stored-0451"
    assert "ROLLBOX_API_KEY" not in os.environ  # the key comes from --api-key
    served = rollbox(
        home, "run", str(tasks / "calc"), "--policy", "openai:fixer", "--base-url", model.url, "--api-key", key,
        "--samples", "2", "--run-id", "model",
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    got = lines(home, "model")
    assert _by_task(got) == [("calc", s, "completed", "passed", 1.0, 1) for s in range(2)]
    assert len(model.authorizations) == 2 * 4 and set(model.authorizations) == {f"Bearer {key}"}
    assert key.encode() not in (home / "jobs.db").read_bytes()  # the key never reaches the store
    (trajectory,) = read_trajectories(home / "runs" / "model" / str(got[0]["trajectory"]))
    assert trajectory.policy == "openai:fixer" and [t.action["name"] for t in trajectory.turns] == [
        "read_file", "edit", "run_tests", "submit",
    ]  # fmt: skip

    # Replay what the model did; a task the recording does not hold cannot be played: failed, no reward, not retried.
    recorded = tmp_path / "recorded.jsonl"
    write_trajectories(recorded, [trajectory])
    replayed = rollbox(
        home, "run", str(tasks / "calc"), str(tasks / "HumanEval_0"), "--policy", f"replay:{recorded}",
        "--run-id", "replay",
    )  # fmt: skip
    assert replayed.returncode == 1, replayed.stderr  # a job failed
    by_task = {x["task_id"]: x for x in lines(home, "replay")}
    calc, humaneval = by_task["calc"], by_task["HumanEval/0"]
    assert (calc["task_id"], calc["status"], calc["reward"]) == ("calc", "passed", 1.0)
    assert (humaneval["state"], humaneval["status"], humaneval["reward"], humaneval["attempts"]) == (
        "failed", None, None, 1,
    )  # fmt: skip
    assert "could not act on task HumanEval/0" in str(humaneval["error"])
    assert "holds no trajectory of task 'HumanEval/0'" in str(humaneval["error"])

    missing = rollbox(home, "run", str(tasks / "calc"), "--policy", f"replay:{tmp_path / 'nothing.jsonl'}")
    assert missing.returncode == 2 and "no such trajectory file" in missing.stderr


def _launcher_of(pid: int) -> int:
    """The launcher (the supervisor outside the sandbox) of the sandbox that runs ``pid``."""
    ours = set(launchers())
    while pid not in ours:
        assert pid > 1, "no launcher above the sandboxed process"
        pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return pid


def _replay_file(path: Path, task_id: str, actions: list[dict[str, Any]]) -> Path:
    turns = [
        Turn(turn=i + 1, action=action, observation=Observation(text=""), started_s=0.0, wall_s=0.0)
        for i, action in enumerate(actions)
    ]
    write_trajectories(path, [Trajectory(episode_id="recorded", task_id=task_id, task_path="", turns=turns)])
    return path


@pytest.mark.slow
@pytest.mark.parametrize("where", ["agent", "judge"])
@sync
async def test_an_episode_whose_sandbox_is_killed_from_outside_is_retried(
    tasks: Path, tmp_path: Path, where: str
) -> None:
    """The supervisor of the agent's sandbox (while a tool's command runs), or of the judge's (while the hidden
    tests run), is killed from outside the sandbox: the host's fault, never the agent's; the episode runs again."""
    task = tmp_path / "slow"
    shutil.copytree(tasks / "calc", task)
    if where == "judge":
        with (task / "tests" / "test_hidden.py").open("a") as hidden:
            hidden.write("\n\ndef test_slowly():\n    import subprocess\n\n    subprocess.run(['sleep', '4'])\n")
    fix = (task / "solution" / "calc.py").read_text()
    actions = [
        {"name": "write_file", "arguments": {"path": "calc.py", "content": fix}},
        {"name": "bash", "arguments": {"command": "sleep 4; echo slept" if where == "agent" else "echo slept"}},
        {"name": "submit", "arguments": {}},
    ]
    replay = _replay_file(tmp_path / "slow.jsonl", "calc", actions)
    worker = LocalWorker(capacity=Capacity(cpus=1, memory_bytes=4 * 2**30), max_pool=2, grace_s=1)
    store = JobStore(tmp_path / "jobs.db")
    retry = RetryPolicy(base_s=0.1, max_s=0.2)
    async with Scheduler(store, workers=[worker], home=tmp_path, retry=retry) as s:
        (job,) = s.submit(JobSpec(kind="episode", payload=episode_payload(task, f"replay:{replay}")))
        running = asyncio.create_task(s.run())
        sleeping: list[int] = []
        await wait_for(lambda: sleeping.extend(sandboxed(b"sleep")) or sleeping, 60)
        launcher = _launcher_of(sleeping[0])
        assert store.job(job.id).state is (JobState.RUNNING if where == "agent" else JobState.GRADING)
        os.kill(launcher, signal.SIGKILL)
        await asyncio.wait_for(running, 120)
    result = store.result(job.id)
    assert result is not None and (result.state, result.status, result.reward) == (JobState.COMPLETED, "passed", 1.0)
    attempts = store.attempts(job.id)
    assert [a.outcome for a in attempts] == ["infra_error", "ok"]
    (trajectory,) = read_trajectories(tmp_path / "runs" / "default" / result.output["trajectory"])
    assert trajectory.reward == 1.0 and trajectory.turns[1].observation.text.startswith("slept")
    store.close()
