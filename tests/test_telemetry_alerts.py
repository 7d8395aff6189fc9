"""Alert rules firing on real conditions: sandboxes whose start really fails (no file descriptor to be had) make
the service's infra-error and start-failure alerts fire, in its API, its metrics and its event log; the rules
file and the reward-shift rule on real events."""

from __future__ import annotations

import json
import resource
import socket
import time
from pathlib import Path

import httpx

from rollbox import telemetry
from rollbox.server import ServerConfig
from rollbox.telemetry import Alerts, AlertThresholds, LiveStats, prometheus_rules
from serving import running


def _request(connection: socket.socket, method: str, path: str) -> tuple[int, bytes]:
    """Send ``{}`` over an open keep-alive connection with plain socket calls (an HTTP client library polls, and
    poll fails where no descriptor may be open); the status and the whole answer."""
    head = f"{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n"
    connection.sendall(head.encode() + b"{}")
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += connection.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += connection.recv(65536)
    return int(head.split(b" ")[1]), head + b"\r\n\r\n" + body


def test_sandbox_start_failures_fire_alerts(tmp_path: Path) -> None:
    thresholds = AlertThresholds(start_failures=3, min_outcomes=3, infra_error_rate=0.5, window_s=120)
    config = ServerConfig(home=tmp_path, alerts=thresholds, tick_s=0.1, archive_url="")
    with running(config) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        # One good start first: the sandbox host is set up (it raises the descriptor limit once per process).
        sid = http.post("/v1/sandboxes", json={}).json()["id"]
        assert http.delete(f"/v1/sandboxes/{sid}").status_code == 204
        assert http.get("/v1/alerts").json()["firing"] == []
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as connection:
            connection.settimeout(None)  # a socket with a timeout polls, too (pytest-timeout bounds the test)
            assert _request(connection, "GET", "/healthz")[0] == 200  # accepted by the server: it needs no new fd
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))  # this connection is open: it needs no new one
            try:
                failed = [_request(connection, "POST", "/v1/sandboxes") for _ in range(4)]
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        assert all(status == 503 for status, _ in failed), failed
        assert b"failed to make a sandbox" in failed[0][1] and b"retry-after" in failed[0][1].lower()
        deadline = time.monotonic() + 30
        while len(firing := {a["name"] for a in http.get("/v1/alerts").json()["firing"]}) < 2:
            assert time.monotonic() < deadline, f"the alerts did not fire: {firing}"
            time.sleep(0.1)
        assert firing == {"RollboxSandboxStartFailures", "RollboxInfraErrorRate"}
        metrics = http.get("/metrics").text
        assert 'rollbox_alerts_firing{alert="RollboxSandboxStartFailures"} 1.0' in metrics
        assert 'rollbox_sandbox_start_failures_total{tenant="local"} 4.0' in metrics
        stats = http.get("/v1/stats").json()
        assert stats["sandbox_starts"]["failed"] == 4 and {a["name"] for a in stats["alerts"]} == firing
        assert stats["failures"][0]["status"] == "sandbox start failed" and stats["failures"][0]["error"]
    log = tmp_path / "runs" / config.run / "events.jsonl"
    kinds = [json.loads(line) for line in log.read_text().splitlines()]
    assert sum(e["kind"] == "alert.fired" for e in kinds) == 2
    assert sum(e["kind"] == "sandbox.start" and not e["ok"] for e in kinds) == 4


def test_reward_shift_fires_and_resolves_on_real_events() -> None:
    stats = LiveStats()
    alerts = Alerts(stats, AlertThresholds(reward_window=10, reward_shift=0.3))
    events: list[telemetry.Event] = []

    class Keep:
        def write(self, event: telemetry.Event) -> None:
            events.append(event)

    with telemetry.recording(stats), telemetry.recording(Keep()):
        for reward in [1.0] * 10 + [0.0] * 10:
            telemetry.emit("judge.verdict", status="passed" if reward else "failed", reward=reward, run="r")
        fired = alerts.evaluate(time.time())
        assert [a.name for a in fired] == ["RollboxRewardShift"] and fired[0].value == -1.0
        assert alerts.reward_shift() == -1.0
        for _ in range(20):
            telemetry.emit("judge.verdict", status="failed", reward=0.0, run="r")
        assert alerts.evaluate(time.time()) == []
    assert [e.kind for e in events if e.kind.startswith("alert.")] == ["alert.fired", "alert.resolved"]


def test_prometheus_rules_file_names_every_rule() -> None:
    text = prometheus_rules()
    assert text.startswith("groups:\n  - name: rollbox\n")
    for name in ("RollboxInfraErrorRate", "RollboxSandboxStartFailures", "RollboxQueueLatency", "RollboxRewardShift"):
        assert f"- alert: {name}" in text
    assert "rollbox_infra_errors_total" in text and "rollbox_queue_wait_seconds_bucket" in text
