"""Workers in processes of their own on this machine.

One interpreter runs Python on one core at a time: a batch of short programs run from one process keeps that
process's event loop busy while the machine's other cores wait, and the scheduler's own work (the store, placement,
results) comes on top of it. :func:`process_workers` splits this machine's budget among worker processes, each of
which runs its share of the jobs in its own event loop and warm pools, as a Ray node's actor does
(:class:`NodeActor`); the scheduler's process keeps the store, placement and the results.

A worker process that dies takes its attempts with it (each ends ``infra_error`` and is retried) and is started
again for the next job; one that cannot be started again is lost (:class:`WorkerLost`), and nothing more is placed
on it. Closing the scheduler's end stops it, and so does its scheduler's death: it reads the end of its socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import pickle
import signal
import socket
import struct
import sys
from collections import deque
from collections.abc import Mapping
from typing import Any

from rollbox.sandbox import RollboxError, reap_orphans

from ._errors import SchedulerError
from ._kinds import Outcome
from ._model import MIN_CPUS, Job, Requirements
from ._node import NodeActor, attempt_request, outcome_of
from ._placement import Capacity, machine_capacity
from ._workers import Moved, WorkerLost

__all__ = ["ProcessWorker", "process_workers"]

_LENGTH = struct.Struct(">I")
#: How long a worker process may take to open its warm pools before it is given up.
_START_S = 60.0
#: How long a closed worker process may take to stop its attempts and pools before it is killed.
_STOP_S = 30.0


def _frame(message: Any) -> bytes:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(data)) + data


async def _read(reader: asyncio.StreamReader) -> Any:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    return pickle.loads(await reader.readexactly(length))


class _Ended(Exception):
    """The worker process ended while an attempt ran there."""


class _Process:
    """One worker process and the attempts it runs, by sequence number."""

    def __init__(self, process: asyncio.subprocess.Process, reader: asyncio.StreamReader, writer: Any) -> None:
        self.process, self.writer = process, writer
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.ended: str | None = None
        self._closing = False
        self._next = 0
        self._replies = asyncio.create_task(self._read_replies(reader))

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                seq, reply = await _read(reader)
                waiting = self.waiting.pop(seq, None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(reply)
        except (asyncio.IncompleteReadError, OSError, pickle.UnpicklingError, EOFError) as exc:
            why = type(exc).__name__
        with contextlib.suppress(TimeoutError):  # its exit status, when it has one
            await asyncio.wait_for(self.process.wait(), 1.0)
        code = self.process.returncode
        if code is None:
            self.ended = f"pid {self.process.pid} ended ({why})"
        else:
            how = f"exited with status {code}" if code >= 0 else f"was killed by signal {-code}"
            self.ended = f"pid {self.process.pid} {how}"
        for waiting in self.waiting.values():
            if not waiting.done():
                waiting.set_exception(_Ended(self.ended))
        self.waiting.clear()
        if not self._closing:  # it died: what its sandboxes leave is removed now, not by the next process to start
            with contextlib.suppress(RollboxError, OSError):
                await asyncio.to_thread(reap_orphans)

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.ended is not None:
            raise _Ended(self.ended)
        self._next += 1
        seq = self._next
        waiting: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[seq] = waiting
        self.writer.write(_frame(("run", seq, request)))
        try:
            return await waiting
        except asyncio.CancelledError:  # the scheduler's cancellation (a deadline, a cancelled job): stop it there
            if self.ended is None:
                self.writer.write(_frame(("cancel", seq, None)))
            raise
        finally:
            self.waiting.pop(seq, None)

    def send(self, message: Any) -> None:
        if self.ended is None:
            self.writer.write(_frame(message))

    async def close(self) -> None:
        self._closing = True
        self.writer.close()
        try:
            await asyncio.wait_for(self.process.wait(), _STOP_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            await self.process.wait()
        await asyncio.gather(self._replies, return_exceptions=True)


class ProcessWorker:
    """A worker whose attempts run in a process of its own on this machine, in warm pools there.

    Every kind runs there as on a Ray node: a kind registered here by ``module:attribute`` must be importable
    there (the process gets this one's ``sys.path``). It is handed up to ``ahead`` jobs beyond those that fit, and
    starts each there the moment it fits (so that a job starts as soon as another ends, not once this process has
    heard of the end): their attempts count as running from when they are handed over.

    Args:
        name: The worker's name in placement, in each attempt's record and in its events (``node``).
        capacity: Its budget (:func:`process_workers` gives each a share of this machine's).
        max_pool: The most sandboxes one configuration's pool holds there (default: twice the jobs that fit at once).
        grace_s: How long idle warm sandboxes are kept there.
        ahead: Jobs it holds beyond those that fit (default: twice the jobs that fit at once).
    """

    def __init__(
        self,
        *,
        name: str,
        capacity: Capacity,
        max_pool: int | None = None,
        grace_s: float = 30.0,
        ahead: int | None = None,
    ) -> None:
        self.name, self.capacity = name, capacity
        jobs = capacity.max_jobs or max(1, math.ceil(capacity.cpus))
        self.ahead = 2 * jobs if ahead is None else ahead
        self._settings = {
            "max_pool": max_pool or 2 * jobs,
            "grace_s": grace_s,
            "capacity": (capacity.cpus, capacity.memory_bytes, dict(capacity.resources), capacity.max_jobs),
        }
        self._process: _Process | None = None
        self._starting = asyncio.Lock()
        self._lost: str | None = None
        self._closed = False

    async def start(self) -> None:
        try:
            await self._current()
        except WorkerLost as exc:
            raise SchedulerError(str(exc)) from None

    async def _current(self) -> _Process:
        """The worker process, started (again) if it is not running.

        Raises:
            WorkerLost: it could not be started.
        """
        async with self._starting:
            if self._lost is not None or self._closed:
                raise WorkerLost(f"worker process {self.name} is lost: {self._lost or 'closed'}")
            if self._process is None or self._process.ended is not None:
                if self._process is not None:  # it died: its end of the socket is closed, its status read
                    await self._process.close()
                try:
                    self._process = await self._spawn()
                except (OSError, SchedulerError, asyncio.IncompleteReadError, TimeoutError) as exc:
                    self._lost = f"it could not be started ({type(exc).__name__}: {exc})"
                    raise WorkerLost(f"worker process {self.name} is lost: {self._lost}") from None
            return self._process

    async def _spawn(self) -> _Process:
        mine, theirs = socket.socketpair()
        # The same modules as here: kinds registered by ``module:attribute`` are found there too.
        path = os.pathsep.join(entry for entry in sys.path if entry)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                "from rollbox.scheduler._processes import main; main()",
                str(theirs.fileno()),
                pass_fds=[theirs.fileno()],
                stdin=asyncio.subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": path},
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        reader, writer = await asyncio.open_connection(sock=mine)
        try:
            writer.write(_frame(self._settings))
            ready = await asyncio.wait_for(_read(reader), _START_S)
            if "error" in ready:
                raise SchedulerError(ready["error"])
        except BaseException:
            writer.close()
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise
        return _Process(process, reader, writer)

    async def close(self) -> None:
        self._closed = True
        async with self._starting:
            if self._process is not None:
                await self._process.close()

    async def run(self, job: Job, moved: Moved) -> Outcome:
        process = await self._current()
        needs = job.requirements
        try:
            reply = await process.call(
                {**attempt_request(job), "needs": (needs.cpus, needs.memory_bytes, dict(needs.resources))}
            )
        except _Ended as exc:
            return Outcome(
                status="infra_error",
                error=f"worker process {self.name} ({exc}) ended while the attempt ran; it is started again for the "
                "next job",
            )
        return outcome_of(reply, self.name, moved)

    def expect(self, queued: Mapping[str, int]) -> None:
        if self._process is not None:
            self._process.send(("expect", 0, dict(queued)))

    def alive(self) -> bool:
        return self._lost is None and not self._closed


def process_workers(
    processes: int,
    capacity: Capacity | None = None,
    *,
    max_pool: int | None = None,
    grace_s: float = 30.0,
    ahead: int | None = None,
) -> list[ProcessWorker]:
    """``processes`` workers, each a process of its own with an equal share of ``capacity`` (default: this machine's
    budget): CPUs, memory, resources and ``max_jobs`` divided among them. A job must fit one share: on a machine of
    2 CPUs, 2 processes run jobs of at most 1 CPU.

    Raises:
        ValueError: ``processes`` is less than 1.
    """
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    whole = capacity or machine_capacity()
    share = Capacity(
        cpus=whole.cpus / processes,
        memory_bytes=whole.memory_bytes // processes,
        resources={k: v / processes for k, v in whole.resources.items()},
        max_jobs=None if whole.max_jobs is None else max(1, whole.max_jobs // processes),
    )
    return [
        ProcessWorker(name=f"local-{i}", capacity=share, max_pool=max_pool, grace_s=grace_s, ahead=ahead)
        for i in range(processes)
    ]


class _Gate:
    """Starts the attempts a worker process holds, in the order handed over, each once its needs fit the worker's
    capacity beside those running (the scheduler hands over more than fits: see ``ahead``)."""

    def __init__(self, cpus: float, memory_bytes: int, resources: dict[str, float], max_jobs: int | None) -> None:
        self.capacity = Capacity(cpus=cpus, memory_bytes=memory_bytes, resources=resources, max_jobs=max_jobs)
        self._cpus, self._memory, self._jobs = 0.0, 0, 0
        self._resources: dict[str, float] = {}
        self._waiting: deque[tuple[Requirements, asyncio.Future[None]]] = deque()

    def _fits(self, needs: Requirements) -> bool:
        capacity = self.capacity
        if self._jobs == 0:  # alone it always runs: it fit the worker when it was placed
            return True
        return (
            (capacity.max_jobs is None or self._jobs < capacity.max_jobs)
            and needs.cpus <= capacity.cpus - self._cpus + 1e-9
            and capacity.cpus - self._cpus + 1e-9 >= MIN_CPUS
            and needs.memory_bytes <= capacity.memory_bytes - self._memory
            and all(
                capacity.resources.get(k, 0.0) - self._resources.get(k, 0.0) >= v for k, v in needs.resources.items()
            )
        )

    def _take(self, needs: Requirements, sign: int) -> None:
        self._cpus += sign * needs.cpus
        self._memory += sign * needs.memory_bytes
        self._jobs += sign
        for k, v in needs.resources.items():
            self._resources[k] = self._resources.get(k, 0.0) + sign * v

    async def enter(self, needs: Requirements) -> None:
        if not self._waiting and self._fits(needs):
            self._take(needs, 1)
            return
        entered = asyncio.get_running_loop().create_future()
        self._waiting.append((needs, entered))
        try:
            await entered
        except asyncio.CancelledError:
            if entered.done() and not entered.cancelled():  # let in as it was cancelled: give its place back
                self.leave(needs)
            else:
                self._waiting.remove((needs, entered))
                self._wake()
            raise

    def leave(self, needs: Requirements) -> None:
        self._take(needs, -1)
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self._fits(self._waiting[0][0]):
            needs, entered = self._waiting.popleft()
            self._take(needs, 1)
            entered.set_result(None)


def _failed(error: str) -> dict[str, Any]:
    """A reply for an attempt whose outcome could not be sent back: rollbox's failure, retried."""
    return {"status": "infra_error", "reward": None, "output": {}, "error": error, "trajectory": None, "events": []}


async def _serve(fd: int) -> None:
    """The worker process: run the attempts the scheduler sends, each in its own task, until it closes its end."""
    reader, writer = await asyncio.open_connection(sock=socket.socket(fileno=fd))
    settings = await _read(reader)
    actor = NodeActor(settings["max_pool"], settings["grace_s"])
    gate = _Gate(*settings["capacity"])
    try:
        await actor.ready()
    except Exception as exc:  # the scheduler's start says why (no isolation here, say)
        writer.write(_frame({"error": f"its warm pools could not be opened: {type(exc).__name__}: {exc}"}))
        await writer.drain()
        return
    writer.write(_frame({"pid": os.getpid()}))
    running: dict[int, asyncio.Task[None]] = {}

    async def one(seq: int, request: dict[str, Any]) -> None:
        cpus, memory_bytes, resources = request.pop("needs")
        needs = Requirements(cpus=cpus, memory_bytes=memory_bytes, resources=resources)
        try:
            await gate.enter(needs)
            try:
                reply = await actor.run(request)
            finally:
                gate.leave(needs)
        except asyncio.CancelledError:
            return
        except BaseException as exc:  # whatever it was, the scheduler gets an answer
            reply = _failed(f"the worker process failed: {type(exc).__name__}: {exc}")
        finally:
            running.pop(seq, None)
        try:
            data = _frame((seq, {"graded_at": None, **reply}))
        except Exception as exc:  # an outcome pickle cannot carry
            data = _frame((seq, {"graded_at": None, **_failed(f"its outcome could not be sent back: {exc}")}))
        writer.write(data)

    try:
        while True:
            what, seq, body = await _read(reader)
            if what == "run":
                running[seq] = asyncio.create_task(one(seq, body))
            elif what == "cancel" and (task := running.get(seq)) is not None:
                task.cancel()
            elif what == "expect":
                actor.expect(body)
    except (asyncio.IncompleteReadError, ConnectionError):  # the scheduler closed its end, or is gone: stop
        pass
    finally:
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        await actor.sandboxes.close()


def main() -> None:
    """A worker process: ``python -c 'from rollbox.scheduler._processes import main; main()' FD``, ``FD`` its end of
    the socket to its scheduler (not ``-m``: the package imports this module first)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the scheduler, which closes this process's end
    asyncio.run(_serve(int(sys.argv[1])))
