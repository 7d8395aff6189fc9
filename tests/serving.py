"""A real rollbox service for the tests: uvicorn on 127.0.0.1, an ephemeral port, in a thread of the test process
(so that the session's leak check sees its sandboxes), stopped and drained at the end of the block; or
``rollbox serve --workers N`` as a process of the test's own (``serving_process``)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
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


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def process_state(pid: int) -> str:
    """A process's state letter (``R``, ``S``, ``T``, ``Z``...; ``-`` once it is gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "-"


def parent_of(pid: int) -> int:
    """A process's parent's pid (0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return 0


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                children = [int(c) for c in (task / "children").read_text().split()]
                found += children
                todo += children
    return found


@dataclass
class Served:
    """A ``rollbox serve`` process of the test's own, with its workers."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def workers(self) -> dict[str, int]:
        """Each worker that said it serves (``SLOT.GEN`` -> pid), latest last."""
        found = re.findall(r"worker (\S+) \(pid (\d+)\) serves", self.log.read_text(errors="replace"))
        return {name: int(pid) for name, pid in found}

    def wait_for(self, worker: str, timeout_s: float = 120) -> int:
        """The pid of ``worker`` once it serves."""
        deadline = time.monotonic() + timeout_s
        while worker not in self.workers():
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"worker {worker} did not start: {self.log.read_text()[-3000:]}"
            time.sleep(0.1)
        pid = self.workers()[worker]
        assert parent_of(pid) == self.process.pid  # the service's own worker, which this test started
        return pid

    @contextlib.contextmanager
    def pinned(self, worker: str) -> Iterator[httpx.Client]:
        """A client whose one connection the worker ``worker`` accepted (the others are stopped while it
        connects: the kernel hands a connection to whichever worker accepts first)."""
        others = [pid for name, pid in self.workers().items() if name != worker and process_state(pid) not in "-Z"]
        client = httpx.Client(base_url=self.url, timeout=60, limits=httpx.Limits(max_connections=1))
        try:
            for pid in others:
                with contextlib.suppress(ProcessLookupError):  # one that was just killed
                    os.kill(pid, signal.SIGSTOP)
            for pid in others:
                while process_state(pid) not in "T-Z":
                    time.sleep(0.01)
            assert client.get("/healthz").json()["worker"] == worker
        except BaseException:
            client.close()
            raise
        finally:
            for pid in others:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        try:
            yield client
        finally:
            client.close()


@contextlib.contextmanager
def serving_process(home: Path, *options: str, workers: int = 2, node: str | None = None) -> Iterator[Served]:
    """``rollbox serve --workers N [--node NODE] OPTIONS`` on 127.0.0.1, a process of this test's own with ``home``
    as its ROLLBOX_HOME, once every worker serves; stopped with SIGTERM at the end (it must exit 0)."""
    port = free_port()
    log = home / "serve.log"
    argv = [sys.executable, "-m", "rollbox", "serve", "--port", str(port), "--workers", str(workers), *options]
    if node is not None:
        argv += ["--node", node]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, env={**os.environ, "ROLLBOX_HOME": str(home)}, stdout=out, stderr=out)
    served = Served(f"http://127.0.0.1:{port}", process, log)
    try:
        for slot in range(workers):
            served.wait_for(f"{node}.{slot}.0" if node else f"{slot}.0")
        yield served
    finally:
        for pid in descendants(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)  # a worker a failed test left stopped
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            for pid in [process.pid, *descendants(process.pid)]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            process.wait()
            raise
        assert code == 0, log.read_text()[-3000:]
