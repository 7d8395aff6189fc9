"""A real rollbox service for the tests: uvicorn on 127.0.0.1, an ephemeral port, in a thread of the test process
(so that the session's leak check sees its sandboxes), stopped and drained at the end of the block."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from rollbox.server import ServerConfig, create_app
from rollbox.server._service import Service


def double_task(root: Path) -> Path:
    """A directory of tasks under ``root`` holding one function task, ``double``; returns the directory."""
    task = root / "tasks" / "double"
    (task / "workspace").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "task.toml").write_text(
        'id = "double"\n[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "double"\n'
    )
    (task / "workspace" / "solution.py").write_text("def double(x):\n    raise NotImplementedError\n")
    cases = [{"args": [n], "expected": 2 * n} for n in (1, 5, -3)]
    (task / "tests" / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    return task.parent


@dataclass
class Running:
    url: str
    service: Service


@contextlib.contextmanager
def running(config: ServerConfig) -> Iterator[Running]:
    app = create_app(config)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="rollbox-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield Running(f"http://127.0.0.1:{port}", app.state.service)
    finally:
        server.should_exit = True
        thread.join(timeout=120)
        assert not thread.is_alive(), "the test server did not stop"
