"""docs/deploy.md's proxy, for real: nginx (Debian's, which scripts/setup installs) with deploy/nginx/rollbox.conf and
the upstreams deploy/nginx/nodes.sh writes, in front of two ``rollbox serve`` processes (``--node a``, ``--node b``,
two workers each, each on its own port) that share one job store on PostgreSQL and archive to one S3 bucket
(moto's server on loopback, named as boto3 finds any other: AWS_ENDPOINT_URL).

Each request for a sandbox or an episode must reach the node named in its id: nginx's access log says which node
answered each, and a node that is sent a session of another answers 421. A job submitted through either node is
seen, with its one result, through both and through the proxy, and both nodes' events are in the archive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rollbox.telemetry import read_archive
from serving import Served, double_task, free_port, serving_process
from test_telemetry_archive import s3_server  # noqa: F401 (a fixture: moto's S3 server on loopback)

ROOT = Path(__file__).resolve().parent.parent
NGINX = shutil.which("nginx", path=os.environ.get("PATH", "") + ":/usr/sbin")

pytestmark = [
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed: apt-get install nginx-light (scripts/setup has)"),
    pytest.mark.timeout(600),
]

#: The access log: the request's path, and the node's address that answered it.
_FRAME = """\
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format routed '$request_method $uri $status $upstream_addr';
    access_log {dir}/access.log routed;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    include rollbox.conf;
    include rollbox-nodes.conf;
}}
"""


def render(directory: Path, listen: str, nodes: dict[str, str]) -> Path:
    """nginx's configuration in ``directory`` as docs/deploy.md renders it: rollbox.conf through envsubst, the
    upstreams from nodes.sh; returns the main file."""
    template = (ROOT / "deploy" / "nginx" / "rollbox.conf").read_text()
    rendered = subprocess.run(
        ["envsubst", "${ROLLBOX_LISTEN}"],
        input=template,
        env={**os.environ, "ROLLBOX_LISTEN": listen},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (directory / "rollbox.conf").write_text(rendered)
    pairs = [f"{name}={address}" for name, address in nodes.items()]
    upstreams = subprocess.run(
        ["sh", str(ROOT / "deploy" / "nginx" / "nodes.sh"), *pairs], capture_output=True, text=True, check=True
    ).stdout
    (directory / "rollbox-nodes.conf").write_text(upstreams)
    main = directory / "nginx.conf"
    main.write_text(_FRAME.format(dir=directory))
    return main


@contextlib.contextmanager
def nginx(directory: Path, nodes: dict[str, str], *, read_timeout: str | None = None) -> Iterator[str]:
    """nginx in front of ``nodes`` (name -> address), a process of this test's own; yields its URL. With
    ``read_timeout``, the configuration's ``proxy_read_timeout`` is that instead (so that a test need not wait
    for the real one)."""
    assert NGINX is not None
    port = free_port()
    main = render(directory, f"127.0.0.1:{port}", nodes)
    if read_timeout is not None:
        conf = directory / "rollbox.conf"
        text = conf.read_text()
        assert text.count("proxy_read_timeout 600s;") == 1, text
        conf.write_text(text.replace("proxy_read_timeout 600s;", f"proxy_read_timeout {read_timeout};"))
    check = subprocess.run(
        [NGINX, "-t", "-q", "-e", "stderr", "-c", str(main)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stderr
    with (directory / "nginx.out").open("wb") as out:
        process = subprocess.Popen([NGINX, "-e", "stderr", "-c", str(main)], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, (directory / "nginx.out").read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline, "nginx did not listen"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.send_signal(signal.SIGQUIT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _node_of(entry_id: str) -> str:
    """The node an id names (``sb_a.1.0_TOKEN`` -> ``a``)."""
    return entry_id.split("_", 2)[1].split(".", maxsplit=1)[0]


def _port(served: Served) -> str:
    return served.url.removeprefix("http://")


def _routed(log: Path) -> list[tuple[str, str]]:
    """(path, address of the node that answered) of each proxied request so far."""
    lines = [line.split() for line in log.read_text().splitlines()]
    return [(fields[1], fields[3]) for fields in lines if len(fields) == 4]


def test_sessions_reach_their_node_through_nginx_and_jobs_are_shared(
    tmp_path: Path,
    postgres_url: str,
    s3_server: str,  # noqa: F811 (the fixture imported above)
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import s3fs

    for name, value in (("ENDPOINT_URL", s3_server), ("ACCESS_KEY_ID", "test"), ("SECRET_ACCESS_KEY", "test")):
        monkeypatch.setenv(f"AWS_{name}", value)  # for the nodes, as on a host with its credentials
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem().mkdir("rollbox-test")
    archive = "s3://rollbox-test/archive"
    tasks = double_task(tmp_path)
    homes = {name: tmp_path / f"home-{name}" for name in ("a", "b")}
    for home in homes.values():
        home.mkdir()
    # One tenants file for every node (a Kubernetes Secret in deploy/kubernetes), made as docs/deploy.md makes it.
    tenants = tmp_path / "secret" / "tenants.json"
    tenants.parent.mkdir()
    made = subprocess.run(
        [sys.executable, "-m", "rollbox", "serve", "--tenants", str(tenants), "--add-key", "team"],
        env={**os.environ, "ROLLBOX_HOME": str(tmp_path / "home-cli")},
        capture_output=True,
        text=True,
        check=True,
    )
    key = {"Authorization": f"Bearer {made.stdout.strip()}"}
    options = ("--pool-size", "1", "--tasks-dir", str(tasks), "--db", postgres_url, "--auth", "--run", "proxied")
    options += ("--archive", archive)
    options += ("--tenants", str(tenants))
    proxy_dir = tmp_path / "nginx"
    proxy_dir.mkdir()
    with (
        serving_process(homes["a"], *options, node="a") as a,
        serving_process(homes["b"], *options, node="b") as b,
        nginx(proxy_dir, {"a": _port(a), "b": _port(b)}) as url,
        httpx.Client(base_url=url, timeout=120, headers=key) as proxy,
        httpx.Client(base_url=a.url, timeout=120, headers=key) as on_a,
        httpx.Client(base_url=b.url, timeout=120, headers=key) as on_b,
    ):
        for http in (proxy, on_a, on_b):
            assert httpx.get(http.base_url.join("/v1/tasks")).status_code == 401  # the key is needed, and enough
        assert not any((home / "tenants.json").exists() for home in homes.values())
        direct = {"a": on_a, "b": on_b}
        address = {"a": _port(a), "b": _port(b)}
        # Opened through the proxy, which spreads them over the nodes; each id names the node that holds it.
        sandboxes = [proxy.post("/v1/sandboxes", json={}) for _ in range(4)]
        assert [r.status_code for r in sandboxes] == [201] * 4, [r.text for r in sandboxes]
        sandbox_ids = [r.json()["id"] for r in sandboxes]
        episodes = [proxy.post("/v1/episodes", json={"task": "double"}) for _ in range(2)]
        assert [r.status_code for r in episodes] == [201] * 2, [r.text for r in episodes]
        episode_ids = [r.json()["id"] for r in episodes]
        assert {_node_of(i) for i in sandbox_ids} == {"a", "b"} == {_node_of(i) for i in episode_ids}

        for turn in range(3):  # many requests for each, all through the proxy
            for sandbox in sandbox_ids:
                text = f"{sandbox} {turn}"
                wrote = proxy.put(f"/v1/sandboxes/{sandbox}/files", json={"path": "f.txt", "content": text})
                assert wrote.status_code == 204, wrote.text
                ran = proxy.post(f"/v1/sandboxes/{sandbox}/exec", json={"argv": ["cat", "f.txt"]})
                assert ran.status_code == 200 and ran.json()["stdout"] == text, ran.text
            for episode in episode_ids:
                action = {"name": "bash", "arguments": {"command": f"echo turn {turn}; cat solution.py"}}
                stepped = proxy.post(f"/v1/episodes/{episode}/step", json={"action": action})
                assert stepped.status_code == 200, stepped.text
                assert "NotImplementedError" in stepped.json()["observation"]["text"]
        for entry in [*sandbox_ids, *episode_ids]:  # the node that does not hold one says so
            kind = "sandboxes" if entry.startswith("sb_") else "episodes"
            other = direct["b" if _node_of(entry) == "a" else "a"]
            assert other.get(f"/v1/{kind}/{entry}").status_code == 421
            assert proxy.get(f"/v1/{kind}/{entry}").json()["id"] == entry

        # A job submitted through either node is the other's too: one store, one result.
        jobs = {}
        for name, http in direct.items():
            submitted = http.post("/v1/jobs", json={"jobs": [{"kind": "exec", "payload": {"argv": ["echo", name]}}]})
            assert submitted.status_code == 201, submitted.text
            jobs[name] = submitted.json()[0]["id"]
        deadline = time.monotonic() + 120
        for name, job in jobs.items():
            seen = []
            for http in (on_a, on_b, proxy):
                while (found := http.get(f"/v1/jobs/{job}").json())["result"] is None:
                    assert time.monotonic() < deadline, found
                    time.sleep(0.2)
                seen.append(found["result"])
            assert seen[0]["output"]["stdout"] == f"{name}\n" and seen[0] == seen[1] == seen[2]

        # A run's results stream through the proxy as they commit (it buffers no answer), not once the run ended.
        slow = [{"kind": "exec", "payload": {"argv": ["sh", "-c", f"sleep {1 + 3 * n}; echo {n}"]}} for n in range(3)]
        assert proxy.post("/v1/jobs", json={"jobs": slow, "run": "streamed"}).status_code == 201
        with proxy.stream("GET", "/v1/runs/streamed/results") as stream:
            first = json.loads(next(line for line in stream.iter_lines() if line))
            states = [j["state"] for j in on_a.get("/v1/jobs", params={"run": "streamed"}).json()]
        assert first["result"]["output"]["stdout"] == "0\n" and states.count("completed") < 3, states

        for sandbox in sandbox_ids:
            assert proxy.delete(f"/v1/sandboxes/{sandbox}").status_code == 204
        for episode in episode_ids:
            assert proxy.delete(f"/v1/episodes/{episode}").status_code in (200, 204)

    # Both nodes archived their events (written at the latest when they stopped) to the one bucket.
    started = {e.fields.get("sandbox") for e in read_archive(archive, run="proxied", kind="sandbox.start")}
    assert set(sandbox_ids) <= started
    routed = _routed(proxy_dir / "access.log")
    sessions = [(path, node) for path, node in routed if path.startswith(("/v1/sandboxes/", "/v1/episodes/"))]
    assert len(sessions) >= 4 * 3 * 2 + 2 * 3
    for path, answered_by in sessions:
        entry = path.split("/")[3]
        assert answered_by == address[_node_of(entry)], (path, answered_by)


def test_a_results_stream_idle_longer_than_the_proxys_read_timeout_is_not_cut(tmp_path: Path) -> None:
    """A run whose job runs longer than nginx's read timeout: the service's keep-alives (blank lines) keep the
    stream through nginx open, and every result arrives once (rollbox's client reads them through it)."""
    from rollbox import Client
    from rollbox.server import ServerConfig
    from serving import running

    config = ServerConfig(home=tmp_path / "home", pool_size=1, run="kept", stream_keepalive_s=0.3)
    slow = [{"kind": "exec", "payload": {"argv": ["sh", "-c", f"sleep {s}; echo {s}"]}} for s in (0, 6)]
    with (
        running(config) as served,
        nginx(tmp_path, {"a": served.url.removeprefix("http://")}, read_timeout="3s") as url,
        httpx.Client(base_url=url, timeout=60) as proxy,
        Client(url) as client,
    ):
        assert proxy.post("/v1/jobs", json={"jobs": slow, "run": "raw"}).status_code == 201
        with proxy.stream("GET", "/v1/runs/raw/results") as stream:
            lines = list(stream.iter_lines())
        assert sorted(json.loads(line)["result"]["output"]["stdout"] for line in lines if line) == ["0\n", "6\n"]
        assert "" in lines  # a keep-alive went through
        assert proxy.post("/v1/jobs", json={"jobs": slow, "run": "client"}).status_code == 201
        read = client.results("client")
        assert sorted(x["result"]["output"]["stdout"] for x in read) == ["0\n", "6\n"]
