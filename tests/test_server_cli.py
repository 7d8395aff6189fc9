"""``rollbox serve`` as a user starts it: a process of its own, with several workers; stopped by SIGTERM, it
leaves nothing behind (the session's leak check). Its configuration is checked when it is made."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rollbox.server import ServerConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_serve_with_two_workers(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "ROLLBOX_HOME": str(tmp_path)}
    command = [sys.executable, "-m", "rollbox", "serve", "--port", str(port), "--workers", "2", "--pool-size", "1"]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, (
                process.stderr.read() if process.stderr else ""
            )
            time.sleep(0.2)
        with httpx.Client(base_url=url, timeout=60) as http:
            answers = [http.post("/run_code", json={"code": f"print({i})", "language": "python"}) for i in range(6)]
            assert [a.json()["run_result"]["stdout"] for a in answers] == [f"{i}\n" for i in range(6)]
            opened = http.post("/v1/sandboxes", json={})
            assert opened.status_code == 201, opened.text
            assert http.delete(f"/v1/sandboxes/{opened.json()['id']}").status_code == 204
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=60)
        assert process.stderr is not None
        process.stderr.close()
        assert code == 0


@pytest.mark.parametrize(
    "settings",
    [
        {"port": 70000},
        {"port": -1},
        {"port": True},
        {"workers": 0},
        {"pool_size": 0},
        {"max_open_files": 0},
        {"max_queue": -5},
        {"warm_configs": -1},
        {"idle_timeout_s": float("nan")},
        {"body_timeout_s": float("inf")},
        {"tick_s": 0},
        {"stream_keepalive_s": -1},
        {"max_timeout_s": "60"},
    ],
    ids=lambda settings: ",".join(f"{k}={v}" for k, v in settings.items()),
)
def test_a_configuration_out_of_range_is_refused_when_made(settings: dict[str, object]) -> None:
    (name,) = settings
    with pytest.raises(ValueError, match=name):
        ServerConfig(**settings)  # type: ignore[arg-type]
