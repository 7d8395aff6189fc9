"""``rollbox serve --workers 2`` as a user starts it: every endpoint answers, whichever worker a connection lands
on; a sandbox or an episode is served by the worker that holds it across many requests; a worker killed with
SIGKILL ends exactly its own sandboxes and episodes, each answering an error that says so at once, while the other
worker's keep working and a new worker takes the dead one's place. The first worker (the scheduler, the figures)
dies too: jobs complete exactly once.

Each test pins a connection to one worker by stopping the others (SIGSTOP, then SIGCONT) while it connects: the
kernel hands a connection to whichever worker accepts first.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rollbox.server import ServerConfig
from rollbox.server._peers import Owner, new_id, owner_of, valid_node
from serving import descendants, double_task, process_state, running, serving_process

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SOLVED = "def double(x):\n    return 2 * x\n"


def _exec(http: httpx.Client, sandbox: str, *argv: str) -> httpx.Response:
    return http.post(f"/v1/sandboxes/{sandbox}/exec", json={"argv": list(argv)})


def _step(http: httpx.Client, episode: str, command: str) -> httpx.Response:
    action = {"name": "bash", "arguments": {"command": command}}
    return http.post(f"/v1/episodes/{episode}/step", json={"action": action})


def _worker_of(entry_id: str) -> str:
    owner = owner_of(entry_id)
    assert owner is not None, entry_id
    return str(owner)


def test_every_endpoint_on_two_workers_and_a_killed_worker_ends_only_its_own(tmp_path: Path, reap: None) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tasks = double_task(tmp_path)
    with serving_process(home, "--pool-size", "1", "--tasks-dir", str(tasks)) as served:
        held: dict[str, tuple[list[str], str]] = {}
        for worker in ("0.0", "1.0"):
            with served.pinned(worker) as http:
                made = [http.post("/v1/sandboxes", json={}) for _ in range(2)]
                episode = http.post("/v1/episodes", json={"task": "double"})
            assert [r.status_code for r in made] == [201, 201] and episode.status_code == 201, episode.text
            held[worker] = ([r.json()["id"] for r in made], episode.json()["id"])
            assert {_worker_of(i) for i in [*held[worker][0], held[worker][1]]} == {worker}
        sandboxes = [s for ids, _ in held.values() for s in ids]
        episodes = [e for _, e in held.values()]

        with served.pinned("0.0") as on0, served.pinned("1.0") as on1:
            for turn in range(4):  # each sandbox used over both workers' connections, many requests each
                for http in (on0, on1):
                    for sandbox in sandboxes:
                        text = f"{sandbox} {turn} {http is on0}"
                        wrote = http.put(f"/v1/sandboxes/{sandbox}/files", json={"path": "f.txt", "content": text})
                        assert wrote.status_code == 204, wrote.text
                        assert _exec(http, sandbox, "cat", "f.txt").json()["stdout"] == text
                        read = http.get(f"/v1/sandboxes/{sandbox}/files", params={"path": "f.txt"})
                        assert read.json()["size"] == len(text)
            for http in (on0, on1):
                assert {s["id"] for s in http.get("/v1/sandboxes").json()} == set(sandboxes)
                assert {e["id"] for e in http.get("/v1/episodes").json()} == set(episodes)
                assert {http.get(f"/v1/sandboxes/{s}").json()["id"] for s in sandboxes} == set(sandboxes)
            for episode in episodes:
                stepped = _step(on1 if _worker_of(episode) == "0.0" else on0, episode, "cat solution.py")
                assert stepped.status_code == 200 and "NotImplementedError" in stepped.json()["observation"]["text"]
            for http in (on0, on1):  # the stateless endpoints, and the jobs of the one scheduler
                ran = http.post("/run_code", json={"code": "print(6 * 7)", "language": "python"}).json()
                assert ran["run_result"]["stdout"] == "42\n"
                graded = http.post("/v1/grade", json={"task": "double", "files": {"solution.py": SOLVED}})
                assert graded.json()["status"] == "passed", graded.text
                assert http.get("/v1/tasks").json() == ["double"]
            job = on1.post("/v1/jobs", json={"jobs": [{"kind": "exec", "payload": {"argv": ["echo", "job"]}}]})
            assert job.status_code == 201, job.text
            job_id = job.json()[0]["id"]
            deadline = time.monotonic() + 120
            while (found := on0.get(f"/v1/jobs/{job_id}").json())["result"] is None:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert found["result"]["output"]["stdout"] == "job\n"

        victim = served.workers()["1.0"]
        its_processes = descendants(victim)  # its sandboxes' launchers and agents among them
        assert its_processes
        os.kill(victim, signal.SIGKILL)
        with served.pinned("0.0") as on0:
            began = time.monotonic()
            for sandbox in held["1.0"][0]:
                gone = _exec(on0, sandbox, "true")
                assert gone.status_code == 410, gone.text
                assert "died" in gone.json()["detail"] and "SIGKILL" in gone.json()["detail"], gone.text
            gone = _step(on0, held["1.0"][1], "ls")
            assert gone.status_code == 410 and "died" in gone.json()["detail"], gone.text
            assert time.monotonic() - began < 30  # an answer at once, never a wait for a worker that is gone
            for sandbox in held["0.0"][0]:  # the other worker's keep working
                assert _exec(on0, sandbox, "echo", "alive").json()["stdout"] == "alive\n"
            assert _step(on0, held["0.0"][1], "echo alive").json()["observation"]["text"].startswith("alive")
        deadline = time.monotonic() + 30
        while any(process_state(pid) not in "-Z" for pid in its_processes):  # its sandboxes died with it
            assert time.monotonic() < deadline, [p for p in its_processes if process_state(p) not in "-Z"]
            time.sleep(0.1)

        served.wait_for("1.1")  # a new worker in its place
        with served.pinned("1.1") as on1:
            fresh = on1.post("/v1/sandboxes", json={}).json()["id"]
            assert _worker_of(fresh) == "1.1"
            assert _exec(on1, fresh, "echo", "new").json()["stdout"] == "new\n"
            assert _exec(on1, held["1.0"][0][0], "true").status_code == 410
            assert {s["id"] for s in on1.get("/v1/sandboxes").json()} == {*held["0.0"][0], fresh}
    assert "worker 1.0 (pid" in served.log.read_text() and "died (killed by SIGKILL)" in served.log.read_text()


def test_a_retry_is_answered_by_the_worker_that_ran_it_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with serving_process(home, "--pool-size", "1") as served, served.pinned("0.0") as on0, served.pinned("1.0") as on1:
        code = {"code": "import os; print(os.urandom(8).hex())", "language": "python"}
        for n in range(4):  # whichever worker each attempt reaches, the program runs once
            headers = {"Idempotency-Key": f"run-{n}"}
            first = on0.post("/run_code", json=code, headers=headers).json()
            again = on1.post("/run_code", json=code, headers=headers).json()
            assert first["run_result"]["stdout"] == again["run_result"]["stdout"]
        headers = {"Idempotency-Key": "open-one"}
        opened = [http.post("/v1/sandboxes", json={}, headers=headers).json()["id"] for http in (on0, on1, on0)]
        assert len(set(opened)) == 1 and [s["id"] for s in on1.get("/v1/sandboxes").json()] == opened[:1]


def test_the_figures_are_the_whole_services(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with serving_process(home, "--pool-size", "1") as served, served.pinned("0.0") as on0, served.pinned("1.0") as on1:
        for http in (on0, on1):
            for n in range(3):
                ran = http.post("/run_code", json={"code": f"print({n})", "language": "python"}).json()
                assert ran["status"] == "Success"
            http.post("/v1/sandboxes", json={})
        deadline = time.monotonic() + 30
        while True:  # each worker's events and gauges reach the figures within a tick or two
            stats = on1.get("/v1/stats").json()
            if sum(stats["executions"].values()) == 6 and stats["gauges"].get("sandboxes_open") == 2:
                break
            assert time.monotonic() < deadline, stats
            time.sleep(0.3)
        metrics = on0.get("/metrics").text
        executed = [line for line in metrics.splitlines() if line.startswith('rollbox_executions_total{status="ok"')]
        assert sum(float(line.split()[-1]) for line in executed) == 6, executed
        assert 'rollbox_sandboxes_open{tenant=""} 2.0' in metrics


def _job_results(home: Path) -> Counter[int]:
    found: Counter[int] = Counter()
    for log in (home / "runs").glob("*/events.jsonl"):
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["kind"] == "job.result":
                found[event["job_id"]] += 1
    return found


def test_the_first_worker_killed_mid_run_every_job_completes_once(tmp_path: Path, reap: None) -> None:
    home = tmp_path / "home"
    home.mkdir()
    jobs = 24
    with serving_process(home, "--pool-size", "1") as served:
        with served.pinned("1.0") as on1:
            sandbox = on1.post("/v1/sandboxes", json={}).json()["id"]
            specs = [{"kind": "exec", "payload": {"argv": ["sh", "-c", f"sleep 0.3; echo {n}"]}} for n in range(jobs)]
            submitted = on1.post("/v1/jobs", json={"jobs": specs, "run": "r"})
            assert submitted.status_code == 201, submitted.text
            ids = [j["id"] for j in submitted.json()]
            deadline = time.monotonic() + 120
            while not any(j["state"] == "completed" for j in on1.get("/v1/jobs", params={"run": "r"}).json()):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            os.kill(served.workers()["0.0"], signal.SIGKILL)
            restarting = on1.get("/v1/jobs", params={"run": "r"})
            assert restarting.status_code in (200, 503), restarting.text  # 503 (retry) until the new one serves
            assert _exec(on1, sandbox, "echo", "alive").json()["stdout"] == "alive\n"
        served.wait_for("0.1")
        with served.pinned("1.0") as on1:
            deadline = time.monotonic() + 300
            while {j["state"] for j in on1.get("/v1/jobs", params={"run": "r"}).json()} != {"completed"}:
                assert time.monotonic() < deadline
                time.sleep(0.3)
            results = [on1.get(f"/v1/jobs/{i}").json()["result"] for i in ids]
            assert sorted(int(r["output"]["stdout"]) for r in results) == list(range(jobs))
            time.sleep(2.5)  # the new first worker reports what the dead one had not
    reported = _job_results(home)
    assert set(reported) == set(ids)
    assert sum(reported.values()) <= jobs + 1  # at most the one the dead worker reported as it was killed


def test_a_node_name_is_in_every_id_and_another_nodes_id_is_misdirected(tmp_path: Path) -> None:
    config = ServerConfig(home=tmp_path, node="a", pool_size=1, archive_url="")
    with running(config) as served, httpx.Client(base_url=served.url, timeout=60) as http:
        made = http.post("/v1/sandboxes", json={}).json()["id"]
        assert made.startswith("sb_a.0.0_") and http.get("/healthz").json()["worker"] == "a.0.0"
        elsewhere = _exec(http, made.replace("_a.", "_b.", 1), "true")
        assert elsewhere.status_code == 421 and "node 'b'" in elsewhere.json()["detail"]
        assert _exec(http, made.replace("_a.0.0_", "_a.0.0_x", 1), "true").status_code == 404
        assert http.delete(f"/v1/sandboxes/{made}").status_code == 204


@pytest.mark.parametrize("node", ["A", "a_b", "-a", "a-", "a.b", "", "x" * 33])
def test_a_node_name_that_a_proxy_could_not_route_by_is_refused(node: str) -> None:
    with pytest.raises(ValueError, match="node"):
        ServerConfig(node=node)


_NODES = st.one_of(st.none(), st.from_regex(r"[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?", fullmatch=True))


@given(
    kind=st.sampled_from(["sb", "ep"]),
    node=_NODES,
    slot=st.integers(0, 1023),
    generation=st.integers(0, 10**9 - 1),
)
def test_an_id_names_the_worker_that_made_it(kind: str, node: str | None, slot: int, generation: int) -> None:
    owner = Owner(node, slot, generation)
    assert owner_of(new_id(kind, owner)) == owner
    assert node is None or valid_node(node)


@given(st.text())
def test_any_text_is_an_id_of_some_worker_or_of_none(text: str) -> None:
    found = owner_of(text)
    assert found is None or owner_of(new_id("sb", found)) == found
