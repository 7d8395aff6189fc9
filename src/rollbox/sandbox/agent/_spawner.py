"""Starting sandbox launchers from a small helper process (``agent.c spawner``) instead of from rollbox itself.

A fork, even a vfork, copies the parent's table of descriptors, and the child then closes each one it must not
keep. With a thousand sandboxes open rollbox holds a few thousand, and each launch blocked the event loop for about
6 ms doing that. The spawner holds a handful: rollbox sends it the command and the descriptors to pass, and gets
back the new process's pid and a pidfd, without waiting on anything but a socket.

    spawner = Spawner.get()
    launched = await spawner.spawn(argv, pass_fds=[sock, seccomp], cwd="/")
    launched.pid, launched.stderr, launched.exited(), launched.kill(), await launched.wait(timeout_s=2)
"""

from __future__ import annotations

import array
import asyncio
import atexit
import concurrent.futures
import contextlib
import errno
import os
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Sequence

from rollbox.sandbox._errors import SandboxError
from rollbox.sandbox._settle import settled
from rollbox.sandbox._shortage import agent_error, host_error

from ._build import agent_binary
from ._health import start_time
from ._protocol import EXEC_HEADER, pidfd_ended, resolve, roomy_socketpair

__all__ = ["Launched", "Spawner"]

_MSG_SPAWN, _MSG_HOLD, _MSG_RELEASE = 7, 8, 9
_SPAWN_WITH_TREE, _SPAWN_LAUNCH = 1, 2  # a SPAWN's flags (agent.c)
_ANSWER = struct.Struct("<i")
_MAX_FDS = 6  # besides the reply socket and stderr (SPAWN_FDS in agent.c)
_ANSWER_TIMEOUT_S = 10.0
#: An idle worker waits for work until the process exits: the spawner's parent thread.
_LASTING_THREAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollbox-spawner")
_STARTING = threading.Lock()


class Launched:
    """A process the spawner started: its pid, a pidfd that follows it (its pid may be reused once it is gone;
    the pidfd never refers to another process), and the read end of its stderr. A launcher is watched through its
    status pipe instead (see :meth:`watch_by_hangup`)."""

    def __init__(self, pid: int, pidfd: int, stderr: int) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self._hangup = -1
        self._started_at: str | None = None  # its start time, while watched by its pipe (see _gone)
        self.stderr = stderr

    def watch_by_hangup(self, hangup: int) -> None:
        """See its end from now on as the pipe ``hangup`` (the caller's, which it keeps open meanwhile) hanging up,
        for it holds that pipe's only write end, and hold no pidfd: one is opened only to signal it or wait for it.
        With thousands of sandboxes open, a descriptor fewer per launcher counts."""
        if self._pidfd >= 0:
            # Pinned by the pidfd, its pid is still its own (if it has not ended, its start time names it).
            self._started_at = None if pidfd_ended(self._pidfd) else start_time(self.pid)
            os.close(self._pidfd)
        self._pidfd = -1
        self._hangup = hangup

    def exited(self, timeout_s: float = 0.0) -> bool:
        """Whether it has ended, waiting up to ``timeout_s`` (blocking) for it to."""
        if self._hangup >= 0:
            deadline = time.monotonic() + timeout_s
            return _hung_up(self._hangup, timeout_s) and self._gone(max(0.0, deadline - time.monotonic()))
        return self._pidfd < 0 or pidfd_ended(self._pidfd, timeout_s)

    def _gone(self, timeout_s: float) -> bool:
        """After its pipe hung up, whether it has finished ending (it closes its descriptors a moment before it is
        gone), waiting up to ``timeout_s``. Its pid is checked by its start time: once it is gone, anyone may have
        it."""
        if self._started_at is None:
            return True
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:  # gone; or no descriptor to be had, which leaves only the pipe's word
            return True
        try:
            return pidfd_ended(pidfd) or start_time(self.pid) != self._started_at or pidfd_ended(pidfd, timeout_s)
        finally:
            os.close(pidfd)

    def _pinned(self) -> tuple[int, bool]:
        """A pidfd of it while it runs (-1 when it has ended, or none could be had), and whether it was opened for
        this use only. Opened before the check that it still runs: if it does, the pid was still its own."""
        if self._hangup < 0:
            return self._pidfd, False
        try:
            pidfd = os.pidfd_open(self.pid)
        except OSError:
            return -1, False
        if _hung_up(self._hangup, 0.0):
            os.close(pidfd)
            return -1, False
        return pidfd, True

    async def wait(self, timeout_s: float) -> bool:
        """Wait, without blocking the event loop, up to ``timeout_s`` for it to end; whether it did."""
        if self.exited():
            return True
        pidfd, opened = self._pinned()
        if pidfd < 0:  # ended meanwhile, or no descriptor to be had: its pipe is watched from a thread then
            return await asyncio.to_thread(self.exited, timeout_s)
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        loop.add_reader(pidfd, resolve, ended)
        try:
            await asyncio.wait_for(ended, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            loop.remove_reader(pidfd)
            if opened:
                os.close(pidfd)

    def kill(self) -> None:
        """SIGKILL it (nothing when it has ended)."""
        pidfd, opened = self._pinned()
        if pidfd < 0:
            return
        try:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            if opened:
                os.close(pidfd)

    def read_stderr(self) -> str:
        """What it wrote to stderr so far (never waits)."""
        return _read_written(self.stderr) if self.stderr >= 0 else ""

    def close_stderr(self) -> None:
        """Stop reading its stderr: what it writes there from now on fails (EPIPE) and is lost (idempotent)."""
        if self.stderr >= 0:
            os.close(self.stderr)
            self.stderr = -1

    def close(self) -> None:
        """Release the pidfd and stderr (idempotent; the process itself is not touched, nor a hangup pipe)."""
        for fd in (self._pidfd, self.stderr):
            if fd >= 0:
                os.close(fd)
        self._pidfd = self.stderr = self._hangup = -1


def _read_written(fd: int) -> str:
    """What is in the pipe whose read end is ``fd`` (never waits)."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").strip()


def _last_words(stderr: int) -> str:
    """What a process that has ended wrote on the stderr pipe ``stderr``, read once the spawner closed its copy
    of the write end too, which it does just after answering (bounded: any other holder is not waited for); the
    pipe is closed."""
    try:
        _hung_up(stderr, _ANSWER_TIMEOUT_S)
        return _read_written(stderr)
    finally:
        os.close(stderr)


def _hung_up(fd: int, timeout_s: float) -> bool:
    """Whether every write end of the pipe whose read end is ``fd`` has closed, waiting up to ``timeout_s``
    (blocking); what is left to read there does not count."""
    poller = select.poll()
    poller.register(fd, 0)  # POLLHUP is reported whatever is asked for; POLLIN would fire for a pending report
    return bool(poller.poll(timeout_s * 1000))


class Spawner:
    """This process's spawner, started on first use and again if it died (with it, everything it started).

    It is started from a thread of its own that lasts as long as this process: a parent-death signal fires when
    the thread that started the child ends, and the thread that opened the first sandbox may end long before
    sandboxes other threads opened.
    """

    _instance: Spawner | None = None

    def __init__(self) -> None:
        agent = str(agent_binary())
        ours, theirs = roomy_socketpair()
        devnull = -1
        try:
            devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
            actions = [
                (os.POSIX_SPAWN_DUP2, devnull, 0),
                (os.POSIX_SPAWN_DUP2, devnull, 1),
                (os.POSIX_SPAWN_DUP2, theirs.fileno(), 3),
            ]
            self.pid = _LASTING_THREAD.submit(
                os.posix_spawn, agent, [agent, "spawner", "3"], {}, file_actions=actions
            ).result()
            try:
                self._pidfd = os.pidfd_open(self.pid)
            except BaseException:  # not reaped yet, its pid is still its own: never a spawner nobody watches
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                raise
        except BaseException as exc:
            ours.close()
            if isinstance(exc, OSError) or (isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)):
                cause = exc if isinstance(exc, OSError) else errno.EAGAIN  # its thread could not be started
                raise SandboxError(host_error(f"cannot start rollbox's spawner {agent}", cause, "process")) from exc
            raise
        finally:
            if devnull >= 0:
                os.close(devnull)
            theirs.close()
        self._sock = ours
        self._owner = os.getpid()
        atexit.register(self.close)

    @classmethod
    def get(cls) -> Spawner:
        """The running spawner (a new one when the last has ended, which is then reaped)."""
        with _STARTING:  # event loops in two threads: one spawner
            current = cls._instance
            if current is None or not current.alive or current._owner != os.getpid():
                if current is not None:
                    current.close()
                cls._instance = current = cls()
            return current

    @property
    def alive(self) -> bool:
        """Whether it is running (not closed, not ended)."""
        return self._sock.fileno() >= 0 and not pidfd_ended(self._pidfd)

    @classmethod
    def running(cls) -> Spawner | None:
        """This process's spawner, if one is running (none is started)."""
        current = cls._instance
        return current if current is not None and current.alive and current._owner == os.getpid() else None

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        pass_fds: Sequence[int] = (),
        cwd: str = "/",
        tree: str | None = None,
        launch: bool = False,
    ) -> Launched:
        """Start ``argv`` (a path, not looked up) in ``cwd`` with an empty environment, stdin and stdout on
        /dev/null, stderr on a new pipe, and ``pass_fds`` as its fds 3, 4, ... in that order; with ``tree``, a
        clone of that held tree (see :meth:`hold`) as the fd after them. With ``launch``, ``argv`` is the agent's
        ``launch`` command line, which the spawner's child runs without executing the agent again.

        Raises:
            SandboxError: the spawner could not start it, or it ended before the spawner could watch it (with
                what it wrote on stderr); a program that is not runnable shows later, as a process that ended at
                once with the reason on its stderr.
        """
        if len(pass_fds) > _MAX_FDS:
            raise ValueError(f"at most {_MAX_FDS} fds can be passed, got {len(pass_fds)}")
        strings = [cwd, *argv, *([tree] if tree is not None else [])]
        flags = (_SPAWN_WITH_TREE if tree else 0) | (_SPAWN_LAUNCH if launch else 0)
        header = EXEC_HEADER.pack(_MSG_SPAWN, len(argv), tree is not None, flags, 0, 0, 0)
        message = header + b"".join(s.encode() + b"\0" for s in strings)
        reply, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        stderr_r = stderr_w = -1
        try:
            stderr_r, stderr_w = os.pipe2(os.O_CLOEXEC)  # in the try: a host out of descriptors fails here
            fds = array.array("i", [reply_theirs.fileno(), stderr_w, *pass_fds])
            self._sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            reply_theirs.close()
            os.close(stderr_w)
            stderr_w = -1
            reading = asyncio.ensure_future(_read_answer(reply))
            if await settled(reading):
                # The spawner may have started it already: it must not run on with nobody watching it, nor be
                # still dying when the cancellation is through.
                with contextlib.suppress(Exception):
                    started = Launched(*reading.result(), -1)
                    started.kill()
                    started.exited(_ANSWER_TIMEOUT_S)
                    started.close()
                raise asyncio.CancelledError
            answer, pidfd = reading.result()
            if pidfd < 0:
                owned, stderr_r = stderr_r, -1  # the reading thread closes it, even if this task is cancelled
                said = await asyncio.to_thread(_last_words, owned)
                raise SandboxError(f"what rollbox's spawner started ended at once: {agent_error(said) or 'no message'}")
        except BaseException:
            if stderr_r >= 0:
                os.close(stderr_r)
            raise
        finally:
            reply.close()
            reply_theirs.close()
            if stderr_w >= 0:
                os.close(stderr_w)
        return Launched(answer, pidfd, stderr_r)

    def hold(self, tree_fd: int, name: str) -> None:
        """Keep the detached mount ``tree_fd`` mounted under ``name`` (hexadecimal) in the spawner's own mount
        namespace, for kernels that cannot clone a detached mount: the host's mount table stays as it is (each new
        namespace copies it whole), and the tree goes with the spawner however rollbox ends.

        Raises:
            SandboxError: the spawner could not.
        """
        self._ask(_MSG_HOLD, name, [tree_fd], "hold a writable tree")

    def release(self, name: str) -> None:
        """Unmount the tree held under ``name``.

        Raises:
            SandboxError: the spawner could not (it holds no such tree).
        """
        self._ask(_MSG_RELEASE, name, [], "release a writable tree")

    def _ask(self, kind: int, name: str, fds: list[int], what: str) -> None:
        """One request answered at once (no fork): sent and waited for in place, within a bounded time."""
        reply, reply_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with reply, reply_theirs:
            message = EXEC_HEADER.pack(kind, 0, 0, 0, 0, 0, 0) + name.encode() + b"\0"
            rights = array.array("i", [reply_theirs.fileno(), *fds])
            try:
                self._sock.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
                reply_theirs.close()
                poller = select.poll()
                poller.register(reply, select.POLLIN)
                data = reply.recv(_ANSWER.size) if poller.poll(_ANSWER_TIMEOUT_S * 1000) else b""
            except OSError as exc:
                raise SandboxError(host_error(f"rollbox's spawner could not {what}", exc)) from exc
        if len(data) != _ANSWER.size:
            raise SandboxError(f"rollbox's spawner could not {what}: it did not answer")
        (error,) = _ANSWER.unpack(data)
        if error < 0:
            raise SandboxError(host_error(f"rollbox's spawner could not {what}", -error))

    def close(self) -> None:
        """Stop the spawner (what it started dies with it) and reap it (idempotent)."""
        if self._sock.fileno() < 0:
            return
        atexit.unregister(self.close)
        self._sock.close()
        if os.getpid() == self._owner:  # a forked child has copies of the parent's, not a spawner of its own
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
        os.close(self._pidfd)


async def _read_answer(reply: socket.socket) -> tuple[int, int]:
    """The spawner's answer on ``reply``: the new process's pid and its pidfd (-1: it ended at once)."""
    loop = asyncio.get_running_loop()
    reply.setblocking(False)
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(reply.fileno(), resolve, ready)
    try:
        await asyncio.wait_for(ready, _ANSWER_TIMEOUT_S)
        data, ancillary, flags, _addr = reply.recvmsg(_ANSWER.size, socket.CMSG_SPACE(4))
    except TimeoutError:
        _give_up(reply)
        raise SandboxError("rollbox's spawner did not answer: timed out") from None
    except OSError as exc:
        raise SandboxError(host_error("rollbox's spawner did not answer", exc)) from None
    finally:
        loop.remove_reader(reply.fileno())
    received = _rights(ancillary)
    if len(data) != _ANSWER.size:
        for fd in received:
            os.close(fd)
        raise SandboxError("rollbox's spawner ended (it is restarted for the next sandbox)")
    (pid,) = _ANSWER.unpack(data)
    if pid == -errno.ESRCH and not received:  # it started, ended and was reaped before its pidfd could be opened
        return pid, -1
    if pid < 0 or len(received) != 1:
        for fd in received:
            os.close(fd)
        if pid < 0:
            raise SandboxError(host_error("rollbox's spawner could not start a process", -pid, "process"))
        # Started, but its pidfd did not arrive: the kernel drops a descriptor this process has no room for. What
        # it started has nobody to talk to once the caller closes its end, and ends.
        reason = errno.EMFILE if flags & socket.MSG_CTRUNC else errno.EBADMSG
        raise SandboxError(host_error(f"cannot watch process {pid}, which rollbox's spawner started", reason))
    return pid, received[0]


def _rights(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors a message carried."""
    return [
        fd
        for level, kind, payload in ancillary
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS
        for fd in array.array("i", payload[: len(payload) - len(payload) % 4])
    ]


def _give_up(reply: socket.socket) -> None:
    """Stop waiting for an answer on ``reply``: once its end is shut, the spawner cannot answer and kills what it
    started; an answer that came just before is read here, and what it names killed."""
    with contextlib.suppress(OSError):
        reply.shutdown(socket.SHUT_RDWR)
    try:
        _data, ancillary, _flags, _addr = reply.recvmsg(_ANSWER.size, socket.CMSG_SPACE(4))
    except OSError:  # none came
        return
    for pidfd in _rights(ancillary):
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        os.close(pidfd)
