"""Episodes over HTTP: reset and step a served task's episode from elsewhere, as a remote trainer would; the
reward is the judge's; episodes are their tenant's alone; their events say whose they were. Whatever a step's
action holds is the model's turn (never a 4xx or a 5xx); steps that come together are taken one at a time; a
hostile step holds up no other tenant."""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollbox.server import ServerConfig, TenantStore
from serving import Running, double_task, running
from test_env_fuzz import ACTIONS, DEEP, nested


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("home")
    store = TenantStore(home / "tenants.json")
    # The fuzzing tenant steps faster than the default rate limit allows.
    fuzz = store.add_key("team-fuzz", rate_per_s=1e6, burst=10**6)
    return home, {"a": store.add_key("team-a"), "b": store.add_key("team-b"), "fuzz": fuzz}


@pytest.fixture(scope="module")
def server(keys: tuple[Path, dict[str, str]]) -> Iterator[Running]:
    home = keys[0]
    with running(ServerConfig(home=home, auth=True, tasks_dir=double_task(home), pool_size=2, run="ep-run")) as r:
        yield r


def _client(server: Running, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {key}"})


def test_an_episode_over_http(server: Running, keys: tuple[Path, dict[str, str]]) -> None:
    home, made = keys
    with _client(server, made["a"]) as a, _client(server, made["b"]) as b:
        created = a.post("/v1/episodes", json={"task": "double", "max_turns": 5})
        assert created.status_code == 201, created.text
        episode = created.json()
        eid = episode["id"]
        assert episode["state"] == "running" and "solution.py" in episode["observation"]["text"]
        assert {t["function"]["name"] for t in episode["tools"]} >= {"bash", "write_file", "submit"}
        # Another tenant finds nothing.
        assert b.post(f"/v1/episodes/{eid}/step", json={"action": {"name": "submit"}}).status_code == 404
        assert b.get(f"/v1/episodes/{eid}/trajectory").status_code == 404 and b.get("/v1/episodes").json() == []
        # A malformed action is the agent's error: an error observation, a turn, never a 4xx.
        bad = a.post(f"/v1/episodes/{eid}/step", json={"action": {"name": "no_such_tool"}}).json()
        assert bad["observation"]["error"] is True and bad["done"] is False and bad["reward"] == 0.0
        write = {
            "name": "write_file",
            "arguments": {"path": "solution.py", "content": "def double(x):\n    return 2 * x\n"},
        }
        assert a.post(f"/v1/episodes/{eid}/step", json={"action": write}).json()["done"] is False
        ran = a.post(
            f"/v1/episodes/{eid}/step", json={"action": {"name": "bash", "arguments": {"command": "cat solution.py"}}}
        )
        assert "return 2 * x" in ran.json()["observation"]["text"]
        done = a.post(f"/v1/episodes/{eid}/step", json={"action": {"name": "submit", "arguments": {}}}).json()
        assert done["done"] is True and done["reward"] == 1.0
        assert done["info"]["verdict"]["status"] == "passed" and done["info"]["end_reason"] == "submitted"
        again = a.post(f"/v1/episodes/{eid}/step", json={"action": {"name": "submit"}})
        assert again.status_code == 409 and "ended" in again.json()["detail"]
        trajectory = a.get(f"/v1/episodes/{eid}/trajectory").json()
        assert len(trajectory["turns"]) == 4 and trajectory["reward"] == 1.0
        assert trajectory["task_id"] == "double" and "task_path" not in trajectory  # no path of the server's host
        assert a.get(f"/v1/episodes/{eid}").json()["state"] == "done"
        assert a.delete(f"/v1/episodes/{eid}").status_code == 204
        assert a.get(f"/v1/episodes/{eid}").status_code == 404
        assert a.post("/v1/episodes", json={"task": "absent"}).status_code == 404
        assert a.post("/v1/episodes", json={"task": "double", "max_turns": 0}).status_code == 422
    # The episode's own events (emitted by rollbox.env, which knows no tenant) carry the tenant and the run.
    events = [json.loads(line) for line in (home / "runs" / "ep-run" / "events.jsonl").read_text().splitlines()]
    turns = [e for e in events if e["kind"] == "episode.turn" and e.get("episode_id") == eid]
    assert len(turns) == 4 and {(e["tenant"], e["run"]) for e in turns} == {("team-a", "ep-run")}
    end = next(e for e in events if e["kind"] == "episode.end" and e.get("episode_id") == eid)
    assert end["reward"] == 1.0 and end["tenant"] == "team-a"
    with _client(server, made["a"]) as a:
        stats = a.get("/v1/stats").json()
        assert stats["verdicts"].get("passed", 0) >= 1 and "episode" in stats["latency"]


def _body(action: Any) -> bytes:
    """A step's body holding ``action`` as JSON (NaN and Infinity as Python writes them; other objects as their
    text); an action nested past Python's writer, as the text a trainer in another language would send."""
    try:
        return json.dumps({"action": action}, default=repr).encode()
    except (RecursionError, ValueError):
        return b'{"action": {"name": "bash", "arguments": {"command": ' + b"[" * 5000 + b"]" * 5000 + b"}}}"


ACTION_BODIES = ACTIONS.map(_body) | DEEP.map(_body)
#: Bodies that are no step at all: the caller's error (422), never a 5xx.
BROKEN_BODIES = st.binary(max_size=40) | st.sampled_from(
    [b"", b"{", b"[]", b"{}", b'{"action": 1, "x": 2}', b'{"action": "\xff"', b'\xff\xfe{"action": 1}', b"null"]
)


class Stepper:
    """Steps of one episode over HTTP; a new episode when one ends."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.episode: str | None = None

    def post(self, body: bytes) -> tuple[httpx.Response, int]:
        if self.episode is None:
            created = self.client.post("/v1/episodes", json={"task": "double", "max_turns": 10_000, "wall_s": 3600})
            assert created.status_code == 201, created.text
            self.episode = created.json()["id"]
        before = self.client.get(f"/v1/episodes/{self.episode}").json()["turns"]
        response = self.client.post(
            f"/v1/episodes/{self.episode}/step", content=body, headers={"content-type": "application/json"}
        )
        if response.status_code == 200 and response.json()["done"]:
            self.episode = None
        return response, before


@pytest.mark.timeout(900)
def test_any_action_over_http_is_a_turn_and_no_body_gets_a_server_error(
    server: Running, keys: tuple[Path, dict[str, str]]
) -> None:
    with _client(server, keys[1]["fuzz"]) as a:
        stepper = Stepper(a)

        @settings(
            max_examples=120, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(ACTION_BODIES)
        def action(body: bytes) -> None:
            response, before = stepper.post(body)
            assert response.status_code == 200, response.text[:500]
            answer = response.json()
            assert answer["info"]["turn"] == before + 1 and answer["reward"] is not None
            assert answer["observation"]["status"] != "infra_error" and answer["info"]["status"] != "infra_error"

        @settings(
            max_examples=60, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(BROKEN_BODIES)
        def broken(body: bytes) -> None:
            response, _before = stepper.post(body)
            assert response.status_code < 500, response.text[:500]
            if response.status_code != 200:  # some bytes happen to be a step ('{"action": 1}')
                assert response.status_code == 422 and "the body" in response.json()["detail"]

        action()
        broken()
        if stepper.episode is not None:
            trajectory = a.get(f"/v1/episodes/{stepper.episode}/trajectory")
            assert trajectory.status_code == 200  # every recorded action is strict JSON
            a.delete(f"/v1/episodes/{stepper.episode}")


def test_the_reported_bodies_are_turns_over_http(server: Running, keys: tuple[Path, dict[str, str]]) -> None:
    deep = {"name": "bash", "arguments": {"command": nested(900, "dict")}}
    bodies = [
        json.dumps({"action": deep}).encode(),
        b'{"action": {"name": "bash", "arguments": ' + b"[" * 1000 + b"]" * 1000 + b"}}",
        json.dumps({"action": {"name": "bash", "arguments": {"command": "x" * 2_000_000}}}).encode(),
        b'{"action": {"name": "read_file", "arguments": {"path": "x", "start": ' + b"9" * 5000 + b"}}}",
    ]
    expected = ["must be a string", "nested too deeply", "a command line holds at most", "more than 4,300 digits"]
    with _client(server, keys[1]["fuzz"]) as a:
        stepper = Stepper(a)
        for body, text in zip(bodies, expected, strict=True):
            response, before = stepper.post(body)
            assert response.status_code == 200, response.text[:300]
            answer = response.json()
            assert answer["observation"]["error"] and text in answer["observation"]["text"]
            assert answer["info"]["turn"] == before + 1
        assert a.get(f"/v1/episodes/{stepper.episode}/trajectory").status_code == 200
        a.delete(f"/v1/episodes/{stepper.episode}")


def test_steps_sent_together_over_http_are_taken_one_at_a_time(
    server: Running, keys: tuple[Path, dict[str, str]]
) -> None:
    headers = {"Authorization": f"Bearer {keys[1]['a']}"}
    slow = {"name": "bash", "arguments": {"command": "echo start >> log; sleep 0.3; echo end >> log"}}

    async def together(max_turns: int, actions: list[Any]) -> tuple[str, list[httpx.Response]]:
        async with httpx.AsyncClient(base_url=server.url, timeout=120, headers=headers) as client:
            created = await client.post("/v1/episodes", json={"task": "double", "max_turns": max_turns})
            eid = created.json()["id"]
            steps = [client.post(f"/v1/episodes/{eid}/step", json={"action": a}) for a in actions]
            return eid, list(await asyncio.gather(*steps))

    eid, answers = asyncio.run(together(2, [slow] * 4))
    assert sorted(r.status_code for r in answers) == [200, 200, 409, 409]
    taken = [r.json() for r in answers if r.status_code == 200]
    assert sorted(t["info"]["turn"] for t in taken) == [1, 2]
    assert [t["done"] for t in sorted(taken, key=lambda t: t["info"]["turn"])] == [False, True]
    assert all("ended" in r.json()["detail"] for r in answers if r.status_code == 409)
    with _client(server, keys[1]["a"]) as a:
        trajectory = a.get(f"/v1/episodes/{eid}/trajectory").json()
        assert len(trajectory["turns"]) == 2 and trajectory["end_reason"] == "max_turns"
        first, second = trajectory["turns"]
        assert second["started_s"] >= first["started_s"] + first["wall_s"]
        a.delete(f"/v1/episodes/{eid}")

    submit = {"name": "submit", "arguments": {}}
    eid, answers = asyncio.run(together(10, [submit, submit]))
    assert sorted(r.status_code for r in answers) == [200, 409]
    with _client(server, keys[1]["a"]) as a:
        assert len(a.get(f"/v1/episodes/{eid}/trajectory").json()["turns"]) == 1
        a.delete(f"/v1/episodes/{eid}")


def _far_patch() -> str:
    """A 3.9 MB file named 1,200 times, each hunk found far from where its header says: seconds of work."""
    return "--- a/big.txt\n+++ b/big.txt\n@@ -1,1 +1,1 @@\n-579990\n+579990\n" * 1200


def _adding(count: int) -> str:
    return "".join(f"--- /dev/null\n+++ b/new/f{i}.txt\n@@ -0,0 +1 @@\n+line {i}\n" for i in range(count))


def _deep(count: int, depth: int) -> str:
    """A diff adding ``count`` files ``depth`` directories down: a tree whose grading cost grows with depth."""
    return "".join(f"--- /dev/null\n+++ b/{'d/' * depth}f{i}.txt\n@@ -0,0 +1 @@\n+x\n" for i in range(count))


_BIG_FILE = {"name": "bash", "arguments": {"command": "seq 1 580000 > big.txt"}}
_DEEP_TREE = {"name": "apply_patch", "arguments": {"unified_diff": _deep(300, 200)}}


@pytest.mark.parametrize(
    ("before", "hostile", "budget"),
    [
        (_BIG_FILE, {"name": "apply_patch", "arguments": {"unified_diff": _far_patch()}}, {"command_timeout_s": 6}),
        (_BIG_FILE, {"name": "apply_patch", "arguments": {"unified_diff": _adding(2500)}}, {"wall_s": 1}),
        (_DEEP_TREE, {"name": "submit", "arguments": {}}, {}),
    ],
    ids=["4MB-file-named-1200-times", "2500-files-wall-1s", "submit-300-files-200-deep"],
)
def test_a_hostile_step_holds_up_no_other_tenant(
    server: Running,
    keys: tuple[Path, dict[str, str]],
    before: dict[str, Any],
    hostile: dict[str, Any],
    budget: dict[str, Any],
) -> None:
    """While one tenant's step works as hard as a tool call (or the judging of what it wrote) can, another
    tenant's requests are answered at once (p99 under 1 s; a patch stalled them 8-19 s, the judging of a deep tree
    7 s), and a tool call ends within its budget."""
    with _client(server, keys[1]["a"]) as a, _client(server, keys[1]["b"]) as b:
        eid = a.post("/v1/episodes", json={"task": "double", **budget}).json()["id"]
        made = a.post(f"/v1/episodes/{eid}/step", json={"action": before})
        assert made.status_code == 200 and not made.json()["observation"]["error"], made.text[:300]
        answer: dict[str, Any] = {}

        def step() -> None:
            begin = time.monotonic()
            answer["response"] = a.post(f"/v1/episodes/{eid}/step", json={"action": hostile})
            answer["wall_s"] = time.monotonic() - begin

        stepping = threading.Thread(target=step)
        stepping.start()
        latencies = []
        while stepping.is_alive() or len(latencies) < 20:
            begin = time.monotonic()
            assert b.get("/v1/episodes").status_code == 200
            latencies.append(time.monotonic() - begin)
            time.sleep(0.01)
        stepping.join()
        response = answer["response"]
        assert response.status_code == 200, response.text[:300]
        p99 = statistics.quantiles(latencies, n=100)[98]
        assert p99 < 1.0, (p99, max(latencies), len(latencies))
        limit = budget.get("command_timeout_s") or budget.get("wall_s")
        if limit is not None:
            assert answer["wall_s"] < limit + 2.0, (answer["wall_s"], response.json()["observation"]["text"][:200])
        else:
            assert response.json()["done"] and response.json()["reward"] == 0.0, response.text[:300]
        a.delete(f"/v1/episodes/{eid}")
