"""Jobs over HTTP on the service's durable scheduler: submit (idempotent), follow, stream a run's results, cancel;
one tenant never sees another's jobs; each result is a ``job.result`` event the figures and metrics count."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rollbox import Client
from rollbox.server import ServerConfig, TenantStore
from serving import Running, double_task, running


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("home")
    store = TenantStore(home / "tenants.json")
    keys = {
        "a": store.add_key("team-a"),
        "b": store.add_key("team-b"),
        "c": store.add_key("team-c", max_running_jobs=1),
    }
    return home, keys


@pytest.fixture(scope="module")
def server(keys: tuple[Path, dict[str, str]]) -> Iterator[Running]:
    home = keys[0]
    config = ServerConfig(home=home, auth=True, tasks_dir=double_task(home), pool_size=2, run="jobs-run", tick_s=0.2)
    with running(config) as r:
        yield r


def _client(server: Running, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=120, headers={"Authorization": f"Bearer {key}"})


def _exec(code: str) -> dict[str, object]:
    return {"kind": "exec", "payload": {"argv": ["python3", "-c", code], "limits": {"timeout_s": 5}}}


def test_jobs_over_http(server: Running, keys: tuple[Path, dict[str, str]]) -> None:
    home, made = keys
    solution = {"solution.py": "def double(x):\n    return 2 * x\n"}
    jobs = [
        {**_exec("print(6 * 7)"), "key": "answer"},
        _exec("import sys; sys.exit('job-failure-log')"),
        {"kind": "grade", "payload": {"task": "double", "files": solution}},
        {"kind": "grade", "payload": {"task": "double", "files": {"solution.py": "def double(x):\n    return x\n"}}},
    ]
    with _client(server, made["a"]) as a, _client(server, made["b"]) as b:
        submitted = a.post("/v1/jobs", json={"jobs": jobs, "run": "r-http"})
        assert submitted.status_code == 201, submitted.text
        ids = [j["id"] for j in submitted.json()]
        assert all(j["tenant"] == "team-a" and j["run_id"] == "r-http" for j in submitted.json())
        again = a.post("/v1/jobs", json={"jobs": [jobs[0]], "run": "r-http"}).json()
        assert again[0]["id"] == ids[0]  # the same key: the same job, nothing added
        # The run's results, streamed until every job is final.
        with a.stream("GET", "/v1/runs/r-http/results") as stream:
            lines = [json.loads(line) for line in stream.iter_lines() if line]
        by_id = {line["job"]["id"]: line["result"] for line in lines}
        assert sorted(by_id) == sorted(ids)
        assert by_id[ids[0]]["status"] == "ok" and by_id[ids[0]]["output"]["stdout"] == "42\n"
        assert by_id[ids[1]]["status"] == "nonzero_exit"
        assert by_id[ids[2]]["status"] == "passed" and by_id[ids[2]]["reward"] == 1.0
        assert by_id[ids[3]]["status"] == "failed" and by_id[ids[3]]["reward"] == 0.0
        detail = a.get(f"/v1/jobs/{ids[2]}").json()
        assert detail["state"] == "completed" and [t["target"] for t in detail["transitions"]][-1] == "completed"
        assert {j["id"] for j in a.get("/v1/jobs", params={"run": "r-http"}).json()} == set(ids)
        assert any(r["id"] == "r-http" for r in a.get("/v1/runs").json())
        # Tenant b sees none of it.
        assert b.get(f"/v1/jobs/{ids[0]}").status_code == 404 and b.get("/v1/jobs").json() == []
        assert b.post(f"/v1/jobs/{ids[0]}/cancel").status_code == 404
        assert not any(r["id"] == "r-http" for r in b.get("/v1/runs").json())
        with b.stream("GET", "/v1/runs/r-http/results", params={"follow": "false"}) as stream:
            assert [line for line in stream.iter_lines() if line] == []
        # What an HTTP job may not reach.
        for bad, status in [
            ({"kind": "grade", "payload": {"task": "/etc", "files": {}}}, 404),
            ({"kind": "grade", "payload": {"task": "double", "workspace": "/root"}}, 400),
            ({"kind": "episode", "payload": {}}, 422),
            ({**_exec("1"), "payload": {"argv": ["true"], "limits": {"memory_bytes": 2**50}}}, 400),
            ({"kind": "exec", "payload": {"argv": 5}}, 400),
        ]:
            r = a.post("/v1/jobs", json={"jobs": [bad]})
            assert r.status_code == status, (bad, r.text)
        # Cancel one still waiting: a job whose deadline is far, behind a slow one.
        slow = a.post("/v1/jobs", json={"jobs": [_exec("import time; time.sleep(3)")] * 3 + [_exec("print(1)")]}).json()
        cancelled = a.post(f"/v1/jobs/{slow[-1]['id']}/cancel").json()
        final = a.get(f"/v1/jobs/{slow[-1]['id']}").json()
        assert cancelled["cancelled"] is False or final["state"] == "cancelled"
    # Each result was reported as one job.result event, with its tenant, task and timing.
    deadline = time.monotonic() + 30
    while True:
        events = [json.loads(line) for line in (home / "runs" / "jobs-run" / "events.jsonl").read_text().splitlines()]
        reported = {e["job_id"]: e for e in events if e["kind"] == "job.result" and e["run_id"] == "r-http"}
        if len(reported) == 4 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(reported) == sorted(ids)
    graded = reported[ids[2]]
    assert graded["tenant"] == "team-a" and graded["task"] == "double" and graded["reward"] == 1.0
    assert graded["queue_wait_s"] is not None and graded["run_s"] is not None
    assert "job-failure-log" in reported[ids[1]]["stderr"]
    with _client(server, made["a"]) as a:
        stats = a.get("/v1/stats").json()
        assert stats["verdicts"]["passed"] >= 1 and "r-http" in stats["rewards"]
        assert stats["jobs"]["finished"].get("completed", 0) >= 4
        metrics = a.get("/metrics").text
        assert 'rollbox_job_transitions_total{state="completed"}' in metrics
        assert 'rollbox_verdicts_total{status="passed",tenant="team-a"}' in metrics
        assert 'rollbox_scheduler_pool_sandboxes{pool="' in metrics  # the scheduler's warm pools, from pool.resize


def test_each_move_of_a_job_of_the_services_run_is_in_its_events_once(
    server: Running, keys: tuple[Path, dict[str, str]]
) -> None:
    """The scheduler records its jobs' moves in their run's events.jsonl; the service's own log of that run leaves
    them to it (written by both, rollbox report counted every job twice)."""
    home, made = keys
    with _client(server, made["a"]) as a:
        ids = [j["id"] for j in a.post("/v1/jobs", json={"jobs": [_exec("print(1)")] * 2}).json()]
        with a.stream("GET", "/v1/runs/jobs-run/results") as stream:
            assert len([line for line in stream.iter_lines() if line]) >= 2
    deadline = time.monotonic() + 30
    while True:  # the scheduler writes its records out every tick
        moves = Counter(
            (e["job_id"], e["target"])
            for e in map(json.loads, (home / "runs" / "jobs-run" / "events.jsonl").read_text().splitlines())
            if e["kind"] == "job.transition" and e["job_id"] in ids
        )
        if {(job, "completed") for job in ids} <= set(moves) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert {(job, "completed") for job in ids} <= set(moves) and set(moves.values()) == {1}, moves


@pytest.mark.parametrize(
    ("kind", "payload", "named"),
    [
        ("exec", {"argv": "ls"}, "Program.argv"),
        ("exec", {"argv": ["ls"], "stdin": 5}, "Program.stdin"),
        ("exec", {"argv": ["ls"], "files": {"../x": "a"}}, "'../x'"),
        ("exec", {"argv": ["ls"], "files": {"/etc/x": "a"}}, "'/etc/x'"),
        ("exec", {"argv": ["ls"], "warm_python": "yes"}, "Program.warm_python"),
        ("exec", {"argv": ["ls"], "limits": {"pids": 10**9}}, "limits.pids"),
        ("grade", {"task": "double", "files": {"../x": "a"}}, "files: '../x'"),
        ("grade", {"task": "double", "files": {"/etc/x": "a"}}, "files: '/etc/x'"),
        ("grade", {"task": "double", "files": {"a//b.py": "a"}}, "files: 'a//b.py'"),
        ("grade", {"task": "double", "files": {"solution.py": 5}}, "'files'"),
        ("grade", {"task": "double", "workspace": "/etc"}, "workspace"),
        ("grade", {"task": "nope", "reference": True}, "no task 'nope'"),
    ],
)
def test_a_job_that_could_never_run_is_refused_when_submitted_naming_it_in_its_batch(
    server: Running, keys: tuple[Path, dict[str, str]], kind: str, payload: dict[str, object], named: str
) -> None:
    """Checked as it would run (an exec job not accepted, then run and retried as an infra error that fires the
    alert; a grade job's file outside the workspace not graded as the candidate's error), and named by its place in
    the batch: nothing of the batch is added."""
    with _client(server, keys[1]["b"]) as b:
        good = {"kind": "exec", "payload": {"argv": ["true"]}}
        jobs = [good, good, {"kind": kind, "payload": payload}]
        r = b.post("/v1/jobs", json={"jobs": jobs, "run": "never-run"})
        assert r.status_code in (400, 404) and r.json()["detail"].startswith("jobs[2]: "), r.text
        assert named in r.json()["detail"], r.text
        assert b.get("/v1/jobs", params={"run": "never-run"}).json() == []


def test_a_tenants_running_jobs_are_bounded_by_its_quota(server: Running, keys: tuple[Path, dict[str, str]]) -> None:
    def spans(client: httpx.Client, run: str) -> list[tuple[float, float]]:
        """Submit three 1-second jobs alone, and wait for them: when each ran."""
        jobs = client.post("/v1/jobs", json={"jobs": [_exec("import time; time.sleep(1)")] * 3, "run": run}).json()
        with client.stream("GET", f"/v1/runs/{run}/results") as stream:
            assert len([line for line in stream.iter_lines() if line]) == 3
        found = []
        for job in jobs:
            at = {m["target"]: m["at"] for m in client.get(f"/v1/jobs/{job['id']}").json()["transitions"]}
            found.append((at["running"], at["completed"]))
        return sorted(found)

    def overlapping(found: list[tuple[float, float]]) -> bool:
        return any(later[0] < earlier[1] for earlier, later in itertools.pairwise(found))

    with _client(server, keys[1]["a"]) as a, a.stream("GET", "/v1/runs/jobs-run/results") as stream:
        list(stream.iter_lines())  # ends when every job the test before left running is done: the workers are free
    with _client(server, keys[1]["c"]) as c, _client(server, keys[1]["b"]) as b:
        # team-c's quota of 1: one after another; team-b has none: the machine's two CPUs run two at once.
        assert not overlapping(bounded := spans(c, "r-quota")), bounded
        assert overlapping(free := spans(b, "r-free")), free


def test_a_run_is_scoped_to_each_tenant(server: Running, keys: tuple[Path, dict[str, str]]) -> None:
    """Two tenants in runs of the same name (their own, and the service's default run): each counts, lists and
    streams only its own jobs, and another's slow job does not hold its stream open."""
    with _client(server, keys[1]["a"]) as a, _client(server, keys[1]["b"]) as b:
        for run in ("r-shared", None):  # None: the service's default run
            body: dict[str, object] = {"run": run} if run else {}
            slow = a.post("/v1/jobs", json={**body, "jobs": [_exec("import time; time.sleep(6)")]})
            assert slow.status_code == 201, slow.text
            shown = run or slow.json()[0]["run_id"]
            quick = b.post("/v1/jobs", json={**body, "jobs": [_exec("print('b')")]}).json()
            assert quick[0]["run_id"] == shown
            started = time.monotonic()
            with b.stream("GET", f"/v1/runs/{shown}/results") as stream:
                lines = [json.loads(line) for line in stream.iter_lines() if line]
            assert time.monotonic() - started < 5, "tenant a's slow job held tenant b's stream"
            assert [line["job"]["id"] for line in lines] == [quick[0]["id"]]
            assert [j["id"] for j in b.get("/v1/jobs", params={"run": shown}).json()] == [quick[0]["id"]]
            (run_b,) = [r for r in b.get("/v1/runs").json() if r["id"] == shown]
            assert run_b["counts"] == {"completed": 1}  # a's job is in no count of b's
            (run_a,) = [r for r in a.get("/v1/runs").json() if r["id"] == shown]
            assert sum(run_a["counts"].values()) == len(a.get("/v1/jobs", params={"run": shown}).json())
            assert quick[0]["id"] not in {j["id"] for j in a.get("/v1/jobs", params={"run": shown}).json()}
            with a.stream("GET", f"/v1/runs/{shown}/results") as stream:  # a's own: until its slow job is done
                assert slow.json()[0]["id"] in {json.loads(line)["job"]["id"] for line in stream.iter_lines() if line}


def test_an_idle_results_stream_carries_keep_alives_and_every_result_exactly_once(tmp_path: Path) -> None:
    """While a long job runs, a run's results stream sends a blank line every ``stream_keepalive_s`` (a proxy's
    read timeout never sees it idle); every reader here skips it and reads each result once."""
    config = ServerConfig(home=tmp_path, pool_size=1, run="keep-alive", tick_s=0.2, stream_keepalive_s=0.3)
    jobs = [_exec("import time; time.sleep(2); print('slow')"), _exec("print('quick')")]
    with running(config) as r, httpx.Client(base_url=r.url, timeout=120) as http, Client(r.url) as client:

        def submit(run: str) -> list[int]:
            submitted = http.post("/v1/jobs", json={"jobs": jobs, "run": run})
            assert submitted.status_code == 201, submitted.text
            return sorted(j["id"] for j in submitted.json())

        ids = submit("raw")
        with http.stream("GET", "/v1/runs/raw/results") as stream:
            lines = list(stream.iter_lines())
        assert sorted(json.loads(line)["job"]["id"] for line in lines if line) == ids  # each once
        assert lines.count("") >= 3, lines  # the slow job's two seconds, in keep-alives of 0.3 s
        ids = submit("client")
        read = client.results("client")  # rollbox's own reader, through the slow job's keep-alives
        assert sorted(x["job"]["id"] for x in read) == ids
        assert sorted(x["result"]["output"]["stdout"] for x in read) == ["quick\n", "slow\n"]


def test_a_results_stream_never_ends_before_the_result_of_a_job_that_ends_as_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream ends once every job is final; a job that ends between the stream's reading of results and its
    counting of what is left must still be sent. The store is slowed (not replaced) so the job ends in that gap."""
    config = ServerConfig(home=tmp_path, pool_size=1, run="gap", tick_s=0.2)
    with running(config) as r, httpx.Client(base_url=r.url, timeout=120) as http:
        store = r.service.jobs.store
        read = store.results

        def slow_when_empty(**where: object) -> object:
            found = read(**where)  # type: ignore[arg-type]
            if not found:
                time.sleep(1.5)  # the job (0.5 s) ends here, after this read and before the next count
            return found

        monkeypatch.setattr(store, "results", slow_when_empty)
        submitted = http.post("/v1/jobs", json={"jobs": [_exec("import time; time.sleep(0.5)")], "run": "gap"})
        assert submitted.status_code == 201, submitted.text
        with http.stream("GET", "/v1/runs/gap/results") as stream:
            lines = [json.loads(line) for line in stream.iter_lines() if line]
        assert [line["job"]["id"] for line in lines] == [submitted.json()[0]["id"]]
