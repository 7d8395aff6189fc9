"""``rollbox serve --workers N``: this process listens on the service's address and starts N worker processes
(``python -m rollbox.server._worker``) that share the socket, each with its own event loop, sandboxes and pools.

A worker that dies is written down (``_peers``: its pid, how it ended, when), so that every later request for
what it held is answered with an error that says so, and a new worker takes its slot (the next generation). A
worker that cannot start at all stops the service (it would fail again). SIGTERM or SIGINT stops the workers
gracefully (each closes its sandboxes), then this process; a worker still running after the grace is killed.
The workers end with this process (a parent-death signal), never orphaned.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from types import FrameType

from rollbox.sandbox import make_temporary_directory

from ._config import ServerConfig
from ._peers import Owner, Peers

__all__ = ["CONFIG_VARIABLE", "supervise"]

#: The environment variable that carries the configuration to the workers.
CONFIG_VARIABLE = "ROLLBOX_SERVE_CONFIG"
#: How long the workers have to stop once asked, before they are killed.
_GRACE_S = 60.0


def _say(message: str) -> None:
    print(f"rollbox serve: {message}", file=sys.stderr, flush=True)


def _listen(host: str, port: int) -> socket.socket:
    family, kind, protocol, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    listener = socket.socket(family, kind, protocol)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(address)
    listener.listen(2048)
    return listener


@dataclass
class _Worker:
    owner: Owner
    process: subprocess.Popen[bytes]
    exited: int  # a pidfd: readable once the process has ended
    ready: int  # the read end of the pipe the worker writes one byte to once it serves
    started: bool = False


class _Supervisor:
    def __init__(self, config: ServerConfig, listener: socket.socket, peers: Peers) -> None:
        self.config, self.listener, self.peers = config, listener, peers
        self.selector = selectors.DefaultSelector()
        self.workers: dict[int, _Worker] = {}
        self.stop_asked = False
        self.failed = False

    def _spawn(self, slot: int, generation: int) -> None:
        owner = Owner(self.config.node, slot, generation)
        ready, told = os.pipe()
        argv = [sys.executable, "-m", "rollbox.server._worker", str(self.peers.directory), str(slot), str(generation)]
        argv += [str(self.listener.fileno()), str(told), str(os.getpid())]
        env = {**os.environ, CONFIG_VARIABLE: self.config.to_json()}
        try:
            process = subprocess.Popen(argv, pass_fds=(self.listener.fileno(), told), env=env)
        finally:
            os.close(told)
        worker = _Worker(owner, process, os.pidfd_open(process.pid), ready)
        self.workers[slot] = worker
        self.selector.register(worker.exited, selectors.EVENT_READ, ("exited", slot))
        self.selector.register(worker.ready, selectors.EVENT_READ, ("ready", slot))

    def _forget(self, worker: _Worker) -> None:
        for fd in (worker.exited, worker.ready):
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def _ready(self, slot: int) -> None:
        worker = self.workers[slot]
        told = os.read(worker.ready, 1)
        self.selector.unregister(worker.ready)
        if told:
            worker.started = True
            _say(f"worker {worker.owner} (pid {worker.process.pid}) serves")

    def _exited(self, slot: int) -> None:
        worker = self.workers.pop(slot)
        code = worker.process.wait()
        self._forget(worker)
        if self.stop_asked:
            return
        death = self.peers.record_death(worker.owner, worker.process.pid, code)
        if not worker.started:
            _say(f"worker {worker.owner} could not start ({death.how}): stopping (its output above says why)")
            self.failed = self.stop_asked = True
            return
        _say(
            f"worker {worker.owner} (pid {death.pid}) died ({death.how}); the sandboxes and episodes it held are "
            f"gone; starting worker {slot}.{worker.owner.generation + 1}"
        )
        self._spawn(slot, worker.owner.generation + 1)

    def _stop(self) -> None:
        self.stop_asked = True
        for worker in self.workers.values():
            with contextlib.suppress(ProcessLookupError):
                worker.process.send_signal(signal.SIGTERM)

    def run(self) -> int:
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        previous = signal.set_wakeup_fd(wake_write)
        handlers = {sig: signal.signal(sig, self._asked) for sig in (signal.SIGINT, signal.SIGTERM)}
        self.selector.register(wake_read, selectors.EVENT_READ, ("signal", -1))
        try:
            for slot in range(self.config.workers):
                self._spawn(slot, 0)
            host, port = self.listener.getsockname()[:2]
            _say(f"listening on http://{host}:{port} with {self.config.workers} workers (this process: {os.getpid()})")
            deadline = None
            while self.workers:
                for key, _ in self.selector.select(timeout=1.0):
                    what, slot = key.data
                    if what == "signal":
                        with contextlib.suppress(BlockingIOError):
                            os.read(wake_read, 512)
                    elif what == "ready":
                        self._ready(slot)
                    else:
                        self._exited(slot)
                if self.stop_asked and deadline is None:
                    self._stop()
                    deadline = time.monotonic() + _GRACE_S
                if deadline is not None and time.monotonic() > deadline:
                    for worker in self.workers.values():
                        _say(f"worker {worker.owner} did not stop within {_GRACE_S:g} s: killing it")
                        with contextlib.suppress(ProcessLookupError):
                            worker.process.kill()
                    deadline = time.monotonic() + _GRACE_S
        finally:
            signal.set_wakeup_fd(previous)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            for worker in self.workers.values():
                worker.process.kill()
                worker.process.wait()
            for fd in (wake_read, wake_write):
                os.close(fd)
            self.selector.close()
        return 1 if self.failed else 0

    def _asked(self, signum: int, frame: FrameType | None) -> None:
        self.stop_asked = True


def supervise(config: ServerConfig) -> int:
    """Serve ``config`` with ``config.workers`` worker processes until SIGTERM or SIGINT; returns the exit status
    (0 once stopped; 1 when a worker could not start)."""
    listener = _listen(config.host, config.port)
    peers = Peers(make_temporary_directory("rollbox-serve-"), workers=config.workers, node=config.node)
    try:
        return _Supervisor(config, listener, peers).run()
    finally:
        listener.close()
        peers.cleanup()
