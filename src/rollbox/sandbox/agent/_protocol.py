"""The host end of the agent protocol (``agent.c``), and the life of one command from request to result.

Both backends run the same agent; they differ only in how it is launched and in how a command's processes
are contained (a cgroup, or a process group). The host never trusts what the agent says beyond "this child
exited with this status": limits are enforced and usage is measured from outside the sandbox.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import math
import os
import select
import signal
import socket
import struct
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from rollbox.sandbox._errors import SandboxError
from rollbox.sandbox._kernel import in_thread, read_kernel_file
from rollbox.sandbox._limits import Limits
from rollbox.sandbox._result import ExecResult, Status
from rollbox.sandbox._shortage import agent_error, host_error

from ._health import fingerprint, start_time
from ._streams import OutputCapture, StdinFeeder

if TYPE_CHECKING:
    from ._spawner import Launched

__all__ = [
    "EXEC_HEADER",
    "AgentConnection",
    "ExecGroup",
    "ExecRequest",
    "Exited",
    "Spare",
    "Usage",
    "classify",
    "resolve",
    "roomy_socketpair",
]

_MSG_SPARE, _MSG_READY, _MSG_EXITED, _MSG_ZYGOTE, _MSG_RESET, _MSG_EXEC = 1, 2, 3, 4, 5, 6
EXEC_HEADER = struct.Struct("<IIIIqqq")  # agent.c's struct exec_header: the requests to the agent and the spawner
_EXITED = struct.Struct("<IiqqII")  # type, wait status, CPU us, max RSS KiB, the spare's number, unused
_WORD = struct.Struct("<I")  # one-word messages: ready, zygote started, reset done
_MAX_REQUEST = 1 << 20
_SO_SNDBUFFORCE = 32  # Linux's (x86_64, aarch64); Python's socket module does not name it
_START_TIMEOUT_S = 10.0
_CLEANUP_TIMEOUT_S = 3.0  # after a kill, the agent reports within milliseconds unless it was stopped
_EXIT_TIMEOUT_S = 2.0
_FAILED_START_WAIT_S = 0.5
_ANNOUNCE_TIMEOUT_S = 5.0  # a fork takes a millisecond; a stopped or crippled agent never announces a child


@dataclass(frozen=True)
class ExecRequest:
    """One command to run."""

    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str
    stdin: bytes | None
    timeout_s: float


@dataclass(frozen=True)
class Usage:
    """What a command used, measured from outside the sandbox once all its processes are dead."""

    cpu_s: float
    peak_memory_bytes: int | None
    #: Its processes killed by any out-of-memory killer.
    oom_kills: int = 0
    pids_limit_hits: int = 0
    disk_full: bool = False
    #: How many times its memory, or the sandbox's, reached the limit: an OOM kill without any was the host's.
    memory_limit_hits: int = 0
    #: Memory the kernel let past the limit without an OOM kill (cgroup v1's socket buffers) went past it.
    memory_over_limit: bool = False


@dataclass(frozen=True)
class Exited:
    """What the agent reports when a command's first process exits: its wait status, and its own usage."""

    wait_status: int
    cpu_s: float
    max_rss_bytes: int


class ExecGroup(Protocol):
    """Everything one command starts, as its backend contains it."""

    def adopt(self, pid: int) -> None:
        """Take in the command's first process (a host pid), before it execs; called off the event loop, as it
        may make and remove cgroups."""

    def kill(self) -> None:
        """SIGKILL every process of the command, now; returns at once (forks racing it: see ``ended``)."""

    async def ended(self) -> None:
        """Kill whatever of the command is left and wait, in the event loop, until every process of it is gone.

        Raises:
            SandboxError: processes survived SIGKILL (a host problem).
        """

    #: Whether :meth:`cpu_s` counts the command's CPU, and the CPU limit is enforced by watching it (each process's
    #: own clock then a backstop); else each process's own clock is the limit.
    cpu_watched: bool

    def cpu_s(self) -> float:
        """CPU seconds used so far by all of the command's processes."""

    def pids_limit_hits(self) -> int:
        """How many forks the pids limit refused so far."""

    def memory_limit_exceeded(self) -> bool:
        """Whether the command went past its memory limit where the kernel does not stop it by itself (cgroup v1's
        socket buffers: see ``Cgroup.set_limits``)."""

    def usage(self, exited: Exited | None) -> Usage:
        """The final resource report (after ``kill``)."""


@dataclass
class Spare:
    """The next command's process, forked and placed in its group ahead of the command, waiting for it."""

    runner: AgentConnection
    group: ExecGroup
    sync: socket.socket
    pid: int
    #: Its number on this connection, which its exit report carries.
    seq: int
    #: Set by :meth:`AgentConnection.run` once the command started in it (it said so before its exec).
    started: bool = False
    #: The OOM kills counted where the helpers run when it was made (see ``AgentConnection.__init__``).
    helpers_oom_kills: int | None = None


class _DiskWatch:
    """Whether a command filled the disk: at any look while it ran, or at its end, even if it freed the space again
    before it ended. A disk already full when the command started (what a command before left) counts only once the
    command has been seen with room. The host looks between the command's other limit checks, every 50 ms at most:
    a program that fills the disk and frees it again within one such interval is not seen (the kernel keeps no
    record of a full tmpfs)."""

    def __init__(self, disk_full: Callable[[], bool], full_before: bool) -> None:
        self._disk_full = disk_full
        self._had_room = not full_before
        self.hit = False

    def look(self) -> None:
        if self._disk_full():
            self.hit = self.hit or self._had_room
        else:
            self._had_room = True


def classify(
    *, killed_for: Status | None, wait_status: int | None, usage: Usage, limits: Limits
) -> tuple[Status, int | None, int | None]:
    """Decide (status, exit_code, signal). The first limit hit wins; what the host saw first is first."""
    exit_code = os.waitstatus_to_exitcode(wait_status) if wait_status is not None else None
    signo = -exit_code if exit_code is not None and exit_code < 0 else None
    if signo is not None:
        exit_code = None
    if killed_for is not None:
        return killed_for, exit_code, signo
    if usage.oom_kills > 0:
        # Killed for memory while no limit of the sandbox's was reached: the machine (or a cgroup above the
        # sandbox) ran out, which says nothing about the program.
        return (Status.MEMORY_LIMIT if usage.memory_limit_hits else Status.INFRA_ERROR), exit_code, signo
    if usage.memory_over_limit:
        return Status.MEMORY_LIMIT, exit_code, signo
    # SIGXCPU and SIGXFSZ alone prove nothing (a program can send them to itself): the measured usage decides.
    # The kernel's per-process CPU clock, which fires SIGXCPU, runs a little ahead of the cgroup's.
    if usage.cpu_s >= limits.cpu_time_s or (signo == signal.SIGXCPU and usage.cpu_s >= limits.cpu_time_s / 2):
        return Status.CPU_TIME_LIMIT, exit_code, signo
    if usage.pids_limit_hits > 0:
        return Status.PIDS_LIMIT, exit_code, signo
    if usage.disk_full:
        return Status.DISK_LIMIT, exit_code, signo
    if signo is not None:
        return Status.SIGNALED, exit_code, signo
    if exit_code is None:
        # The agent died without reporting: something inside killed the sandbox's supervisor.
        return Status.SIGNALED, None, signal.SIGKILL
    return (Status.OK if exit_code == 0 else Status.NONZERO_EXIT), exit_code, signo


def _failed(what: str, exc: OSError | TimeoutError) -> str:
    """``what``, with why: no answer in time, or the OS error (and what ran out, if that is what it means)."""
    return f"{what}: no answer in time" if isinstance(exc, TimeoutError) else host_error(what, exc)


def roomy_socketpair() -> tuple[socket.socket, socket.socket]:
    """A SOCK_SEQPACKET pair whose first end can send a whole request of up to ``_MAX_REQUEST`` bytes at once.

    SO_SNDBUF is capped by ``net.core.wmem_max`` (208 KiB by default): root sets it beyond with SO_SNDBUFFORCE.
    """
    first, second = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        first.setsockopt(socket.SOL_SOCKET, _SO_SNDBUFFORCE, 2 * _MAX_REQUEST)
    except BaseException:
        first.close()
        second.close()
        raise
    return first, second


def _header(kind: int, limits: Limits, argc: int = 0, envc: int = 0, seq: int = 0, *, watched: bool = False) -> bytes:
    # Where the command's CPU is counted and watched (``ExecGroup.cpu_watched``), each process's own CPU clock
    # (RLIMIT_CPU) is a backstop a second past the limit, which the count reaches first: that clock is tick-based
    # and fires a little early, and a descendant it killed at the limit while its parent then exited 0 read as
    # ``ok``, the count a hair short. Elsewhere it is the limit.
    cpu_time_s = math.ceil(limits.cpu_time_s) + 1 if watched else max(1, math.ceil(limits.cpu_time_s))
    return EXEC_HEADER.pack(kind, argc, envc, seq, cpu_time_s, limits.open_files, limits.effective_file_size_bytes)


def _encode(request: ExecRequest, limits: Limits, kind: int = _MSG_EXEC, *, watched: bool = False) -> bytes:
    env = [f"{k}={v}" for k, v in request.env.items()]
    strings = [request.cwd, *request.argv, *env]
    if any("\0" in s for s in strings):
        raise ValueError("arguments, environment and cwd must not contain NUL characters")
    header = _header(kind, limits, len(request.argv), len(env), watched=watched)
    message = header + b"".join(s.encode() + b"\0" for s in strings)
    if len(message) > _MAX_REQUEST:
        raise ValueError(f"command line and environment are {len(message)} bytes; the limit is {_MAX_REQUEST}")
    return message


def pidfd_ended(pidfd: int, timeout_s: float = 0.0) -> bool:
    """Whether the process behind ``pidfd`` has ended, waiting up to ``timeout_s`` (blocking) for it to."""
    poller = select.poll()  # not select(): with a thousand sandboxes open, fds pass 1024
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(timeout_s * 1000))


def resolve(future: asyncio.Future[None]) -> None:
    """Complete ``future`` unless it is done (a reader callback may fire again before its waiter runs)."""
    if not future.done():
        future.set_result(None)


class AgentConnection:
    """A running agent: the control socket, the launcher process, and the one command it runs at a time."""

    def __init__(
        self,
        sock: socket.socket,
        process: Launched | None,
        *,
        with_parent: bool = True,
        monitor: int | None = None,
        oom_kills: Callable[[], int | None] | None = None,
        agent: AgentConnection | None = None,
    ) -> None:
        """``with_parent``: the helper's parent is checked with it (see ``unchanged``). ``monitor``: the read end of
        the pipe on which the launcher, out of the program's reach, reports the agent's end; the connection owns it.
        An agent that ends during a command with no such report ended with its launcher: the host's doing, an
        ``infra_error``; so did a zygote (which dies with its agent) whose ``agent``'s launcher ended that way. One
        that ended on its own may have been made to (a program can lower pid 1's CPU limit): the program's
        failure, as is any other helper's end, unless ``oom_kills`` (how many processes OOM killers have killed
        where the helpers run, outside every sandbox's cgroup, which no program can fill) grew meanwhile: the
        machine ran out of memory, an ``infra_error`` too."""
        self._sock = sock
        self._process = process
        self._with_parent = with_parent
        self._monitor = monitor
        self._agent = agent
        self._oom_kills = oom_kills
        self._loop = asyncio.get_running_loop()
        self._inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self._spares = 0  # spares asked for so far: each one's number
        self.alive = True
        #: The helper's host pid and what it looked like when it started (see ``_health``).
        self.pid: int | None = None
        self.fingerprint: tuple[tuple[str, ...] | None, ...] | None = None
        self._started_at: str | None = None
        sock.setblocking(False)
        self._loop.add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data, ancillary, _flags, _addr = self._sock.recvmsg(64, socket.CMSG_SPACE(12))
        except BlockingIOError:
            return
        except OSError:
            data, ancillary = b"", []
        if self.pid is None:
            # Its first message (the hello) tells us who it is: the kernel attached its pid, in our namespace.
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    self.pid = struct.unpack("iII", payload[:12])[0]
                    self.fingerprint = self._fingerprints()
                    self._started_at = start_time(self.pid)
        if not data:
            self.alive = False
            self._loop.remove_reader(self._sock.fileno())
        self._inbox.put_nowait(data)

    async def wait_ready(self) -> None:
        """Wait for the agent's hello.

        Raises:
            SandboxError: the sandbox did not start; the message carries what the launcher said.
        """
        try:
            message = await asyncio.wait_for(self._inbox.get(), _START_TIMEOUT_S)
        except TimeoutError:
            message = b""
        if len(message) >= _WORD.size and _WORD.unpack_from(message)[0] == _MSG_READY:
            if self._process is not None:
                self._process.close_stderr()  # read only when a start fails: one descriptor fewer per sandbox
            return
        self.shutdown()
        self._wait_for_launcher()
        stderr = self._process.read_stderr() if self._process is not None else ""
        self.reap()
        raise SandboxError(f"the sandbox failed to start: {agent_error(stderr) or 'no message (the launcher died)'}")

    async def start_zygote(self, argv: Sequence[str], env: Mapping[str, str], limits: Limits) -> AgentConnection:
        """Have the agent start the Python zygote (``zygote.py``); returns the connection to it, ready.

        Raises:
            SandboxError: the zygote did not start.
        """
        host_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        request = ExecRequest(argv=argv, env=env, cwd="/", stdin=None, timeout_s=0)
        try:
            host_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            fds = array.array("i", [zygote_end.fileno()])
            self._sock.sendmsg([_encode(request, limits, _MSG_ZYGOTE)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            answer = await asyncio.wait_for(self._inbox.get(), _START_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            host_end.close()
            raise SandboxError(_failed("the sandbox's agent did not start the zygote", exc)) from exc
        except BaseException:  # cancelled: the sandbox is closing
            host_end.close()
            raise
        finally:
            zygote_end.close()
        if answer != _WORD.pack(_MSG_ZYGOTE):
            host_end.close()
            raise SandboxError("the sandbox's agent could not start the zygote")
        zygote = AgentConnection(host_end, None, with_parent=False, oom_kills=self._oom_kills, agent=self)
        try:
            await zygote.wait_ready()
        except BaseException:
            zygote.close()
            raise
        return zygote

    @property
    def unchanged(self) -> bool:
        """True when the helper is alive and nothing about it changed since it started (see ``_health``)."""
        return self.alive and self.pid is not None and self._fingerprints() == self.fingerprint is not None

    def _fingerprints(self) -> tuple[tuple[str, ...] | None, ...] | None:
        """The helper's fingerprint and its parent's (for the agent: the launcher, outside the sandbox's pid namespace
        and so out of the program's reach, checked all the same; the zygote's parent is the agent, checked on its
        own)."""
        if self.pid is None:
            return None
        if not self._with_parent:
            return (fingerprint(self.pid),)
        try:
            parent = int(read_kernel_file(f"/proc/{self.pid}/stat").rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return None
        return fingerprint(self.pid), fingerprint(parent)

    async def remove_ipc_objects(self) -> None:
        """Have the agent remove every SysV IPC object of the sandbox (between users of a reused sandbox).

        Raises:
            SandboxError: the agent did not answer.
        """
        request = _WORD.pack(_MSG_RESET)
        try:
            self._sock.send(request)
            answer = await asyncio.wait_for(self._inbox.get(), _ANNOUNCE_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise SandboxError(_failed("the sandbox's agent did not answer a reset", exc)) from exc
        if answer != request:
            raise SandboxError("the sandbox's agent did not answer a reset")

    def close(self) -> None:
        """Close the control socket (the agent exits) and reap the launcher (idempotent)."""
        self.shutdown()
        self.reap()

    def shutdown(self) -> None:
        """Close the control socket: the agent, then the launcher exit (idempotent). A helper with no launcher of
        its own (the zygote) is killed too: stopped by a program, it would not see its socket close, and would
        stay, with its children unreaped, counted against the next user's pids."""
        if self._sock.fileno() >= 0:
            with contextlib.suppress(ValueError, RuntimeError):
                self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
        self.alive = False
        if self._process is None and self.pid is not None:
            self._kill_helper(self.pid)

    def _kill_helper(self, pid: int) -> None:
        """SIGKILL the helper, pinned by a pidfd and checked to be the process that said hello (its pid may have
        been reused since it ended)."""
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            return
        try:
            if start_time(pid) == self._started_at is not None:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except OSError:  # gone already; or refused (a security module): the sandbox's close still goes on
            pass
        finally:
            os.close(pidfd)

    def reap(self) -> None:
        """Wait for the launcher to exit, killing it if it does not, and release it (idempotent)."""
        self._wait_for_launcher()
        if self._process is not None:
            self._process.close()
        if self._monitor is not None:
            os.close(self._monitor)
            self._monitor = None

    async def _ended_with_launcher(self) -> bool:
        """Whether the agent, gone, ended with its launcher rather than on its own (see ``__init__``): the pipe on
        which the launcher reports the agent's end closes with no report. False without a monitor, or when the
        launcher neither reported nor ended in time (it was stopped: it cannot say)."""
        if self._agent is not None:
            return self._agent._launcher_killed()
        if self._monitor is None:
            return False
        ended = self._loop.create_future()
        self._loop.add_reader(self._monitor, resolve, ended)
        try:
            await asyncio.wait_for(ended, _CLEANUP_TIMEOUT_S)
            return os.read(self._monitor, _WORD.size) == b""
        except (TimeoutError, OSError):
            return False
        finally:
            self._loop.remove_reader(self._monitor)

    def _launcher_killed(self) -> bool:
        """Whether the launcher has ended with no report of the agent's end (never waits, reads nothing). Asked for
        a zygote, which dies with its agent: a launcher killed from outside has ended before that (the agent dies
        of the launcher's end), so its end is there to be seen."""
        if self._monitor is None or self._process is None or not self._process.exited():
            return False
        pending = array.array("i", [0])
        fcntl.ioctl(self._monitor, termios.FIONREAD, pending)
        return pending[0] == 0

    def _oom_killed_since(self, spare: Spare) -> bool:
        """Whether an OOM killer killed a helper (this one, gone, most likely) since ``spare`` was made."""
        if self._oom_kills is None or spare.helpers_oom_kills is None:
            return False
        now = self._oom_kills()
        return now is not None and now > spare.helpers_oom_kills

    def _wait_for_launcher(self) -> None:
        if self._process is not None and not self._process.exited(_EXIT_TIMEOUT_S):
            self._kill_launcher()

    def _kill_launcher(self) -> None:
        """Kill the launcher, which did not end in its time, and wait for it and for the agent: a launcher killed
        before it reaped the agent leaves the agent to die of its parent-death signal, in its own time."""
        assert self._process is not None
        agent = -1
        if self.pid is not None:
            # The launcher has not reaped it, so its pid is still its own (a zombie's, at worst).
            with contextlib.suppress(OSError):
                agent = os.pidfd_open(self.pid)
        self._process.kill()
        self._process.exited(_CLEANUP_TIMEOUT_S)
        if agent >= 0:
            pidfd_ended(agent, _CLEANUP_TIMEOUT_S)
            os.close(agent)

    async def aclose(self) -> None:
        """As :meth:`close`, but waiting for the launcher without blocking the event loop (up to 2 s when the
        agent was stopped by the program)."""
        self.shutdown()
        if self._process is not None and not await self._process.wait(_EXIT_TIMEOUT_S):
            self._kill_launcher()
        self.reap()

    async def spawn(self, group: ExecGroup, limits: Limits) -> Spare | ExecResult:
        """Fork the next command's process with ``limits``' rlimits and place it in ``group``, ahead of the command.

        Returns the waiting process, or an ``infra_error`` result when it could not be made (the agent is then
        marked dead when it cannot be trusted with another command).
        """
        self._spares = seq = (self._spares + 1) & 0xFFFFFFFF
        sync_host, sync_child = roomy_socketpair()
        try:
            sync_host.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            fds = array.array("i", [sync_child.fileno()])
            header = _header(_MSG_SPARE, limits, seq=seq, watched=group.cpu_watched)
            self._sock.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        except OSError as exc:
            sync_host.close()
            self.alive = False
            return ExecResult.infra_error(host_error("the sandbox's agent is gone (the sandbox restarts)", exc))
        except BaseException:
            sync_host.close()
            raise
        finally:
            sync_child.close()
        try:
            pid = await self._child_pid(sync_host)
            if pid is None:
                sync_host.close()
                return await self._failed_start(seq)
            # In a thread: on cgroup v1 a move can wait for an RCU grace period (10-20 ms), which must not hold
            # up the event loop and every other sandbox's commands.
            await in_thread(group.adopt, pid)
        except SandboxError as exc:
            sync_host.close()
            group.kill()
            try:
                await asyncio.wait_for(self._next_exited(seq), _CLEANUP_TIMEOUT_S)
            except TimeoutError:
                self.alive = False  # the agent did not report it: it cannot be trusted with another command
            return ExecResult.infra_error(str(exc))
        except BaseException:
            # Cancelled (the sandbox is closing: it kills the process; its exit report will never be read here), or
            # failed unforeseen: the socket is not left to the garbage collector, nor the agent trusted again.
            sync_host.close()
            self.alive = False
            raise
        oom_kills = self._oom_kills() if self._oom_kills is not None else None
        return Spare(self, group, sync_host, pid, seq, helpers_oom_kills=oom_kills)

    async def discard(self, spare: Spare) -> None:
        """End a spare that no command will use, and consume its exit report (bounded; a silent agent is dead)."""
        spare.sync.close()
        spare.group.kill()
        try:
            await asyncio.wait_for(self._next_exited(spare.seq), _CLEANUP_TIMEOUT_S)
        except TimeoutError:
            self.alive = False

    async def run(
        self, spare: Spare, request: ExecRequest, limits: Limits, disk_full: Callable[[], bool]
    ) -> ExecResult:
        """Run one command in ``spare`` to its end and report it. Infrastructure faults come back as
        ``infra_error``."""
        pipes: list[tuple[int, int]] = []
        try:
            message = _encode(request, limits, watched=spare.group.cpu_watched)
            while len(pipes) < 3:
                pipes.append(os.pipe2(os.O_CLOEXEC))
            # Before the command can run: it may fill the disk, or finish, before the next line of this method.
            full_before, start = disk_full(), time.monotonic()
        except BaseException as exc:  # a bad request, a host out of fds, ...: the spare is not used
            for fd in (fd for pipe in pipes for fd in pipe):
                os.close(fd)
            await self.discard(spare)
            if not isinstance(exc, OSError):
                raise
            return ExecResult.infra_error(host_error("cannot set up the command", exc))
        (stdin_r, stdin_w), (out_r, out_w), (err_r, err_w) = pipes
        passed = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [stdin_r, out_w, err_w]))]
        with spare.sync:
            try:
                spare.sync.sendmsg([message], passed)
            except OSError:
                delivered = False  # something killed it while it waited: nothing of the command ran
            else:
                delivered = True
            finally:
                for fd in (stdin_r, out_w, err_w):
                    os.close(fd)
            if not delivered:
                for fd in (stdin_w, out_r, err_r):
                    os.close(fd)
                return await self._failed_start(spare.seq)
            try:
                channels = (stdin_w, out_r, err_r)
                result = await self._supervise(
                    request, limits, spare, channels, disk_full=disk_full, full_before=full_before, start=start
                )
            except BaseException:
                # Cancelled (or failed) before the command's exit report was read: the helper may not have
                # reaped it yet, and serves one command at a time, so it serves no more (the sandbox restarts it).
                # The command was delivered, and may have run: it is never run again.
                self.alive = False
                spare.started = True
                raise
            try:
                spare.started = started = spare.sync.recv(1, socket.MSG_DONTWAIT) == b"x"
            except OSError:
                started = False
        if not started:  # it died before the command started (something outside killed it while it waited)
            self.alive = False
            return ExecResult.infra_error("the command's process died before the command could start")
        return result

    async def _child_pid(self, sync: socket.socket) -> int | None:
        """The host pid of the new child, read from the credentials the kernel attached to its hello."""
        sync.setblocking(False)
        ready = self._loop.create_future()
        self._loop.add_reader(sync.fileno(), resolve, ready)
        try:
            await asyncio.wait_for(ready, _ANNOUNCE_TIMEOUT_S)
            _data, ancillary, _flags, _addr = sync.recvmsg(1, socket.CMSG_SPACE(12))
        except (TimeoutError, OSError):
            return None
        finally:
            self._loop.remove_reader(sync.fileno())
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid: int = struct.unpack("iII", payload[:12])[0]
                return pid
        return None

    async def _next_exited(self, seq: int) -> Exited | None:
        """The exit report of spare number ``seq``; None when the connection ends first. Callers bound the wait.

        A report of another spare (one whose report was never waited for: its command was cancelled) is dropped:
        it is never taken for this one's.
        """
        while True:
            data = await self._inbox.get()
            if not data:
                self._inbox.put_nowait(data)  # keep the EOF visible to whoever asks next
                return None
            if len(data) >= _EXITED.size and _EXITED.unpack_from(data)[0] == _MSG_EXITED:
                _t, status, cpu_us, rss_kib, reported, _unused = _EXITED.unpack_from(data)
                if reported == seq:
                    return Exited(status, cpu_us / 1e6, rss_kib * 1024)

    async def _failed_start(self, seq: int) -> ExecResult:
        """The command's process never announced itself: nothing of the command ran. The agent cannot be trusted
        with another command (a previous one may have stopped it, or lowered its limits): it is marked dead, so
        that it is restarted, and the caller may try once more."""
        self.alive = False
        try:
            exited = await asyncio.wait_for(self._next_exited(seq), _FAILED_START_WAIT_S)
        except TimeoutError:
            exited = None
        if exited is not None and exited.wait_status < 0:
            return ExecResult.infra_error(host_error("the agent could not fork", -exited.wait_status, "process"))
        return ExecResult.infra_error("the command's process died before it could be started")

    async def _supervise(
        self,
        request: ExecRequest,
        limits: Limits,
        spare: Spare,
        channels: tuple[int, int, int],
        *,
        disk_full: Callable[[], bool],
        full_before: bool,
        start: float,
    ) -> ExecResult:
        stdin_w, out_r, err_r = channels
        group = spare.group
        done: asyncio.Future[None] = self._loop.create_future()
        killed_for: list[Status] = []

        def stop(reason: Status) -> None:
            if not killed_for:
                killed_for.append(reason)
                with contextlib.suppress(SandboxError):  # what the host could not kill, ``ended`` below reports
                    group.kill()
            resolve(done)

        stdout = OutputCapture(out_r, limits.output_bytes, lambda: stop(Status.OUTPUT_LIMIT))
        stderr = OutputCapture(err_r, limits.output_bytes, lambda: stop(Status.OUTPUT_LIMIT))
        feeder = StdinFeeder(stdin_w, request.stdin or b"")
        exited_task = asyncio.ensure_future(self._next_exited(spare.seq))
        exited_task.add_done_callback(lambda _: resolve(done))
        timer = self._loop.call_later(request.timeout_s, stop, Status.TIMEOUT)
        disk = _DiskWatch(disk_full, full_before)
        watcher = asyncio.ensure_future(self._watch(group, limits, stop, disk))
        try:
            await done
            wall_s = time.monotonic() - start
        except BaseException:  # cancelled: nothing waits for the report any more (a later wait drops it)
            exited_task.cancel()
            with contextlib.suppress(SandboxError):  # the rest dies as the restarting sandbox removes its cgroup
                group.kill()
            raise
        finally:
            timer.cancel()
            watcher.cancel()
            feeder.close()
        try:
            await group.ended()  # the command ended: whatever it left running (daemons, orphans) dies with it
        except BaseException:  # processes the host could not kill (the caller reports an infra_error), or cancelled
            exited_task.cancel()
            stdout.close()
            stderr.close()
            raise
        try:  # while the command ran, the wait was bounded by its own limits; after the kill, by this
            exited = await asyncio.wait_for(exited_task, _CLEANUP_TIMEOUT_S)
        except TimeoutError:
            exited = None  # the agent did not report: it was stopped, or is gone
            self.alive = False
        for capture in (stdout, stderr):
            try:
                await asyncio.wait_for(capture.eof, _CLEANUP_TIMEOUT_S)
            except TimeoutError:
                capture.close()
        if exited is None and not killed_for:
            if await self._ended_with_launcher():
                return ExecResult.infra_error(
                    "the sandbox's launcher was killed during the command (from outside the sandbox, which nothing "
                    "inside can reach); the sandbox restarts"
                )
            if self._oom_killed_since(spare):
                return ExecResult.infra_error(
                    "an out-of-memory killer outside the sandbox killed the sandbox's supervisor during the command "
                    "(this machine, or the cgroup rollbox runs in, ran out of memory); the sandbox restarts"
                )
        usage = group.usage(exited)
        disk.look()
        if disk.hit:
            usage = replace(usage, disk_full=True)
        status, exit_code, signo = classify(
            killed_for=killed_for[0] if killed_for else None,
            wait_status=exited.wait_status if exited is not None else None,
            usage=usage,
            limits=limits,
        )
        if status is Status.INFRA_ERROR:
            return ExecResult.infra_error(
                "an out-of-memory killer outside the sandbox killed the command, which stayed within its memory "
                "limit: this machine (or a cgroup above rollbox's) ran out of memory",
                wall_s=wall_s,
            )
        return ExecResult(
            status=status,
            exit_code=exit_code,
            signal=signo,
            stdout=bytes(stdout.data),
            stderr=bytes(stderr.data),
            stdout_truncated=stdout.truncated,
            stderr_truncated=stderr.truncated,
            wall_s=wall_s,
            cpu_s=usage.cpu_s,
            peak_memory_bytes=usage.peak_memory_bytes,
        )

    async def _watch(self, group: ExecGroup, limits: Limits, stop: Callable[[Status], None], disk: _DiskWatch) -> None:
        """Poll what the kernel cannot stop by itself in time: total CPU over all processes, the pids limit, memory
        it lets past the limit; and look at the disk, which a program may fill and free again before it ends."""
        delay = 0.005
        while True:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)
            try:
                if group.pids_limit_hits() > 0:
                    stop(Status.PIDS_LIMIT)
                elif group.cpu_s() >= limits.cpu_time_s:
                    stop(Status.CPU_TIME_LIMIT)
                elif group.memory_limit_exceeded():
                    stop(Status.MEMORY_LIMIT)
                disk.look()
            except (OSError, SandboxError):
                return
