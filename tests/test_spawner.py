"""The spawner: the small helper process that starts every launcher, so that rollbox never forks while holding
thousands of descriptors."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import gc
import os
import signal
import threading
import time
import warnings

import pytest

from conftest import living_children
from rollbox import Limits, Sandbox, SandboxError
from rollbox.sandbox.agent import _spawner
from rollbox.sandbox.agent._spawner import Spawner

FAST = Limits(timeout_s=5, cpu_time_s=2, memory_bytes=128 * 2**20, pids=32, disk_bytes=16 * 2**20)


def test_a_spawned_process_gets_only_its_fds_and_default_signals() -> None:
    async def main() -> tuple[list[str], dict[str, str]]:
        r, w = os.pipe()
        try:
            launched = await Spawner.get().spawn(["/bin/sleep", "5"], pass_fds=[w])
        finally:
            os.close(r)
            os.close(w)
        try:
            await asyncio.sleep(0.1)  # let it exec
            fds = sorted(os.listdir(f"/proc/{launched.pid}/fd"))
            with open(f"/proc/{launched.pid}/status") as f:
                status = dict(line.split(":\t", 1) for line in f.read().splitlines())
            launched.kill()  # through its pidfd: the process this test started
            assert await launched.wait(timeout_s=5)
            return fds, status
        finally:
            launched.close()

    fds, status = asyncio.run(main())
    assert fds == ["0", "1", "2", "3"]  # nothing of rollbox's: stdio and the one fd passed
    # Python ignores SIGPIPE and SIGXFSZ; a launched process must not (a file size limit kills with SIGXFSZ).
    assert int(status["SigIgn"], 16) == 0 and int(status["SigBlk"], 16) == 0, status


def test_sandboxes_outlive_the_thread_that_started_the_spawner() -> None:
    Spawner.get().close()  # the next sandbox starts a new one, from the thread that opens it

    opened, release = threading.Event(), threading.Event()

    def other_thread() -> None:
        async def first() -> None:
            async with Sandbox(limits=FAST) as sb:
                await sb.exec(["true"])
            opened.set()
            await asyncio.to_thread(release.wait, 30)

        asyncio.run(first())

    async def main() -> tuple[int | None, int | None]:
        thread = threading.Thread(target=other_thread)
        thread.start()
        assert await asyncio.to_thread(opened.wait, 30), "the other thread failed to open its sandbox"
        async with Sandbox(limits=FAST) as sb:
            await sb.exec(["true"])
            before = sb._impl.agent.pid  # type: ignore[union-attr]
            release.set()
            await asyncio.to_thread(thread.join)  # the thread that started the spawner is gone
            await asyncio.sleep(0.2)
            result = await sb.exec(["true"])
            assert result.ok, result
            return before, sb._impl.agent.pid  # type: ignore[union-attr]

    before, after = asyncio.run(main())
    assert before == after  # the same agent: the sandbox was never killed and restarted


def test_a_killed_spawner_is_replaced_for_the_next_sandbox() -> None:
    async def main() -> bool:
        async with Sandbox(limits=FAST) as sb:
            await sb.exec(["true"])
        os.kill(Spawner.get().pid, signal.SIGKILL)  # by pid: the spawner this test's process started
        await asyncio.sleep(0.1)
        async with Sandbox(limits=FAST) as sb:
            return (await sb.exec(["true"])).ok

    assert asyncio.run(main())


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # Python 3.12+
def test_a_forked_child_never_stops_its_parents_spawner() -> None:
    loop = asyncio.new_event_loop()
    try:
        sb = Sandbox(limits=FAST)
        loop.run_until_complete(sb.__aenter__())
        before = sb._impl.agent.pid  # type: ignore[union-attr]
        inherited = Spawner.running()
        assert inherited is not None
        child = os.fork()
        if child == 0:  # what the child's exit would run (atexit): the parent's spawner must live on
            try:
                inherited.close()
            finally:
                os._exit(0)
        os.waitpid(child, 0)  # by pid: the process this test forked
        result = loop.run_until_complete(sb.exec(["true"]))
        after = sb._impl.agent.pid  # type: ignore[union-attr]
        loop.run_until_complete(sb.close())
    finally:
        loop.close()
    assert result.ok and before == after, result  # the same agent: nothing was killed and restarted


def test_a_spawn_cancelled_midway_leaves_nothing_running() -> None:
    # Cancelled after the request went out: the spawner may have started the process, which must neither run on
    # with nobody watching it nor be still dying when the cancellation is through.
    async def main() -> list[list[int]]:
        spawner = Spawner.get()
        left = []
        for _ in range(20):
            spawn = asyncio.ensure_future(spawner.spawn(["/bin/sleep", "60"]))
            await asyncio.sleep(0)  # the request is sent; the answer is awaited
            spawn.cancel()
            with pytest.raises(asyncio.CancelledError):
                await spawn
            left.append(living_children(spawner.pid))
        return left

    assert asyncio.run(main()) == [[]] * 20


def test_a_spawn_given_up_on_leaves_nothing_running(monkeypatch: pytest.MonkeyPatch) -> None:
    # The answer does not come in time (the spawner is stopped, as a host stalled for seconds stops it): the caller
    # gives up, and what the spawner starts once it runs again must not run on with nobody watching it.
    monkeypatch.setattr(_spawner, "_ANSWER_TIMEOUT_S", 0.3)

    async def main() -> list[int]:
        spawner = Spawner.get()
        os.kill(spawner.pid, signal.SIGSTOP)  # the spawner this test's process started
        try:
            with pytest.raises(SandboxError, match="did not answer: timed out"):
                await spawner.spawn(["/bin/sleep", "60"])
        finally:
            os.kill(spawner.pid, signal.SIGCONT)
        # Requests are served in order: once this one is answered, the one given up on was dealt with.
        later = await spawner.spawn(["/bin/sleep", "60"])
        try:
            living = [pid for pid in living_children(spawner.pid) if pid != later.pid]
            for _ in range(50):  # killed: gone within moments (a sleep left running would stay for a minute)
                if not living:
                    break
                await asyncio.sleep(0.1)
                living = [pid for pid in living_children(spawner.pid) if pid != later.pid]
            return living
        finally:
            later.kill()
            await later.wait(timeout_s=5)
            later.close()

    assert asyncio.run(main()) == []


_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_PTRACE_SEIZE, _PTRACE_DETACH, _PTRACE_GETEVENTMSG, _PTRACE_O_TRACEFORK, _PTRACE_EVENT_FORK = 0x4206, 17, 0x4201, 2, 1
_WALL = 0x40000000  # waitpid's __WALL: a tracee that is not this process's own child


def _ptrace(request: int, pid: int, data: object = None) -> None:
    if _libc.ptrace(request, pid, None, data) < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))


def _hold_the_spawner_through_its_childs_life(spawner: int, attached: threading.Event) -> None:
    """Stop the spawner (this test's process's own child) just after its next fork, until that child has ended
    and been reaped: ptrace, from this thread alone, as the kernel asks of a tracer."""
    _ptrace(_PTRACE_SEIZE, spawner, ctypes.c_void_p(_PTRACE_O_TRACEFORK))
    attached.set()
    status = 0
    while not (os.WIFSTOPPED(status) and status >> 8 == signal.SIGTRAP | _PTRACE_EVENT_FORK << 8):
        _, status = os.waitpid(spawner, _WALL)
    child = ctypes.c_ulong()
    _ptrace(_PTRACE_GETEVENTMSG, spawner, ctypes.byref(child))
    os.waitpid(child.value, _WALL)  # its first stop, as a tracee
    _ptrace(_PTRACE_DETACH, child.value)
    while os.path.exists(f"/proc/{child.value}"):  # it ends, and is reaped at once (the spawner ignores SIGCHLD)
        time.sleep(0.001)
    _ptrace(_PTRACE_DETACH, spawner)


def test_a_process_that_ends_before_the_spawner_watches_it_says_why() -> None:
    # Between the spawner's fork and its pidfd_open, the child may end and be reaped (a loaded host, seen once in a
    # suite): the pid is gone (ESRCH). It started, and what it said on stderr is why it ended: that is the error,
    # never "could not start a process: No such process". The spawner is held there with ptrace.
    async def main() -> str:
        spawner = Spawner.get()
        attached = threading.Event()
        holder = threading.Thread(target=_hold_the_spawner_through_its_childs_life, args=(spawner.pid, attached))
        holder.start()
        attached.wait()
        try:
            with pytest.raises(SandboxError) as failed:
                await spawner.spawn(["/bin/true"], cwd="/no-such-directory")
        finally:
            holder.join()
        after = await spawner.spawn(["/bin/true"])  # the spawner goes on
        assert after.exited(5)
        after.close()
        return str(failed.value)

    said = asyncio.run(main())
    assert said == (
        "what rollbox's spawner started ended at once: rollbox-agent: /no-such-directory: No such file or directory"
    )


@pytest.mark.parametrize("where", ["open", "pidfd_open"])
def test_a_spawner_that_cannot_be_set_up_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    # The host out of descriptors as the spawner is set up (its /dev/null before it starts, its pidfd after):
    # the error says so, the spawner that had started is killed and reaped (never left running with nobody
    # watching it), and neither socket is left to the garbage collector.
    real, here = getattr(os, where), threading.get_ident()

    def out_of_descriptors(path: object, *args: object) -> int:
        # Only the spawner's own call, in this thread: an earlier test's sandboxes may still be closing in others.
        if threading.get_ident() != here or (where == "open" and path != os.devnull):
            return int(real(path, *args))
        raise OSError(errno.EMFILE, os.strerror(errno.EMFILE))

    before = set(living_children(os.getpid()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        monkeypatch.setattr(os, where, out_of_descriptors)
        with pytest.raises(SandboxError, match=r"cannot start rollbox's spawner .*: Too many open files"):
            Spawner()
        monkeypatch.undo()
        gc.collect()
    assert set(living_children(os.getpid())) - before == set()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
