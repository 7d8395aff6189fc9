"""Episodes over HTTP: reset and step a served task's episode from elsewhere, as a remote trainer would; the
reward is the judge's; episodes are their tenant's alone; their events say whose they were."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rollbox.server import ServerConfig, TenantStore
from serving import Running, double_task, running


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("home")
    store = TenantStore(home / "tenants.json")
    return home, {"a": store.add_key("team-a"), "b": store.add_key("team-b")}


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
