"""The next command's process, forked and placed in its cgroup while the sandbox is idle (the spare)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import gc
import os
import platform
import signal
import warnings
from pathlib import Path

import pytest

from conftest import TIME_SCALE, own_sandbox_processes
from rollbox import ExecResult, Limits, Sandbox, SandboxPool, Status
from rollbox.sandbox import SandboxConfig, WarmSandboxes
from rollbox.sandbox.namespaces._cgroup import CgroupTree

FAST = Limits(timeout_s=5, cpu_time_s=2, memory_bytes=128 * 2**20, pids=32, disk_bytes=16 * 2**20)


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _cgroup(pid: int) -> str:
    line = next(ln for ln in Path(f"/proc/{pid}/cgroup").read_text().splitlines() if ":pids:" in ln or ln[:3] == "0::")
    return line.split(":", 2)[2]


async def _settled(sb: Sandbox) -> None:
    """Let the background preparation of the next spare finish."""
    if sb._spare is not None:
        await asyncio.shield(sb._spare)


def test_the_next_command_waits_alone_in_a_cgroup_of_its_own() -> None:
    async def main() -> tuple[list[int], str, str, ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            first = await sb.exec(["sh", "-c", "echo $$"])
            await _settled(sb)
            agent = sb._impl.agent.pid  # type: ignore[union-attr]
            assert agent is not None
            spares = [p for p in _children(agent)]
            where = _cgroup(spares[0])
            after = await sb.exec(["sh", "-c", "echo $$"])
            return spares, where, first.stdout_text, after

    spares, where, first_pid, after = asyncio.run(main())
    assert len(spares) == 1  # one process waits, and it is a child of the agent (not of the last command)
    assert where.rsplit("/", 1)[-1].startswith("exec-")  # already in a command cgroup, not the agent's
    assert after.ok and after.stdout_text != first_pid


def test_plain_and_warm_python_commands_interleave() -> None:
    async def main() -> list[ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            await sb.write_file("hello.py", "import sys\nprint('hi', sys.argv[1:])\n")
            results = []
            for warm in (False, True, True, False, True, False, False):
                argv = ["python3", "hello.py", str(warm)]
                results.append(await sb.exec(argv, warm_python=warm))
            return results

    for result, warm in zip(asyncio.run(main()), (False, True, True, False, True, False, False), strict=True):
        assert result.ok and result.stdout_text == f"hi ['{warm}']\n", result


def test_a_spare_killed_while_it_waits_costs_nothing_but_a_retry() -> None:
    """Something outside kills the waiting process: the command still runs, exactly once."""

    async def main() -> tuple[ExecResult, ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            await sb.exec(["true"])
            await _settled(sb)
            agent = sb._impl.agent.pid  # type: ignore[union-attr]
            assert agent is not None
            spares = _children(agent)
            assert spares, "no spare waits: nothing to kill"
            for pid in spares:  # processes this test's sandbox started, by pid
                os.kill(pid, signal.SIGKILL)
            once = await sb.exec(["sh", "-c", "echo ran >> count; cat count"])
            return once, await sb.exec(["cat", "count"])

    once, count = asyncio.run(main())
    assert once.ok and once.stdout == b"ran\n", once
    assert count.stdout == b"ran\n"


def test_a_pooled_sandbox_keeps_its_spare_across_an_in_place_reset_and_nothing_else() -> None:
    async def main() -> tuple[list[ExecResult], int]:
        results = []
        async with WarmSandboxes(size=1, warm_python=False) as pool:  # no zygote: the spare is the agent's only child
            for _ in range(3):
                async with pool.sandbox(SandboxConfig(limits=FAST)) as sb:
                    results.append(await sb.exec(["sh", "-c", "ls -A /tmp /workspace; sleep 30 &"]))
                    results.append(await sb.exec(["sh", "-c", "echo left > /tmp/x"], warm_python=False))
            async with pool.sandbox(SandboxConfig(limits=FAST)) as sb:
                await _settled(sb)
                agent = sb._impl.agent.pid  # type: ignore[union-attr]
                assert agent is not None
                waiting = len(_children(agent))
                # The processes there: the shell counts them itself (a glob), so that no other command is counted.
                results.append(await sb.exec(["sh", "-c", "ls -A /tmp /workspace; set -- /proc/[0-9]*; echo $#"]))
        return results, waiting

    results, waiting = asyncio.run(main())
    assert all(r.status is Status.OK for r in results), results
    assert results[0].stdout_text == results[2].stdout_text == results[4].stdout_text == "/tmp:\n\n/workspace:\n"
    assert waiting == 1
    assert results[-1].stdout_text == "/tmp:\n\n/workspace:\n2\n"  # the agent and this shell: no leftover sleep


def test_a_cancelled_command_never_lends_its_exit_status_to_the_next() -> None:
    """A command cancelled before its exit report was read would leave that report for the next command to take
    as its own: the helper that ran it (agent or zygote) serves no more, and the next command gets a new one."""

    def helper_pid(sb: Sandbox, warm: bool) -> int | None:
        impl = sb._impl
        assert impl is not None
        return (impl._zygote if warm else impl.agent).pid  # type: ignore[attr-defined]

    async def main(warm: bool) -> tuple[list[ExecResult], list[bool]]:
        async with Sandbox(limits=FAST) as sb:
            script = "import sys, time\ntime.sleep(float(sys.argv[1]))\nsys.exit(int(sys.argv[2]))\n"
            await sb.write_file("exit.py", script)
            results, renewed = [], []
            for code in range(3, 6):
                await sb.exec(["python3", "exit.py", "0", "0"], warm_python=warm)
                before = helper_pid(sb, warm)
                with contextlib.suppress(TimeoutError):  # cancelled while it runs: its exit comes later
                    await asyncio.wait_for(sb.exec(["python3", "exit.py", "0.3", "9"], warm_python=warm), 0.1)
                results.append(await sb.exec(["python3", "exit.py", "0", str(code)], warm_python=warm))
                renewed.append(helper_pid(sb, warm) != before)
            return results, renewed

    for warm in (False, True):
        results, renewed = asyncio.run(main(warm))
        assert [(r.status, r.exit_code) for r in results] == [(Status.NONZERO_EXIT, c) for c in range(3, 6)], results
        assert renewed == [True] * 3


def test_an_exit_report_nobody_waited_for_is_never_taken_for_another_commands() -> None:
    """Every spare has a number that its exit report carries: a report left unread (here: a spare dropped without
    waiting for its end, which exits 125) is skipped by the next command, which gets its own exit status."""

    async def main(warm: bool) -> ExecResult:
        async with Sandbox(limits=FAST) as sb:
            await sb.write_file("exit.py", "import sys\nsys.exit(3)\n")
            await sb.exec(["python3", "exit.py"], warm_python=warm)
            task, sb._spare = sb._spare, None
            assert task is not None
            spare = await task
            assert not isinstance(spare, ExecResult)
            spare.sync.close()  # it exits; its report arrives, and nobody reads it
            inbox = spare.runner._inbox
            for _ in range(500):
                if inbox.qsize():
                    break
                await asyncio.sleep(0.01)
            assert inbox.qsize() == 1
            return await sb.exec(["python3", "exit.py"], warm_python=warm)

    for warm in (False, True):
        result = asyncio.run(main(warm))
        assert (result.status, result.exit_code) == (Status.NONZERO_EXIT, 3), result


def test_a_command_line_of_most_of_a_mebibyte_still_runs() -> None:
    async def main() -> ExecResult:
        async with Sandbox(limits=FAST) as sb:
            return await sb.exec(["sh", "-c", 'echo "$#"', "sh", *(["x" * 1000] * 900)])

    result = asyncio.run(main())
    assert result.ok and result.stdout == b"900\n", result


def test_a_limit_of_a_few_open_files_leaves_the_command_its_stdio() -> None:
    async def main() -> list[ExecResult]:
        limits = Limits(timeout_s=5, cpu_time_s=2, memory_bytes=128 * 2**20, pids=32, open_files=4)
        async with Sandbox(limits=limits) as sb:
            await sb.write_file("hi.py", "print('hi')\n")
            return [await sb.exec(["echo", "hi"]), await sb.exec(["python3", "hi.py"], warm_python=True)]

    for result in asyncio.run(main()):
        assert result.ok and result.stdout == b"hi\n", result


def test_cancelling_a_pools_close_leaves_nothing() -> None:
    # Cancelled, close still ends what it started: resets under way used to put their sandbox back into the
    # closed pool, where nothing closed it.

    async def main() -> tuple[int, int, set[int]]:
        pool = SandboxPool(size=2, limits=FAST)
        await pool.__aenter__()
        for _ in range(2):
            async with pool.sandboxes(2) as boxes:
                for sb in boxes:
                    await sb.exec(["true"])
        closing = asyncio.ensure_future(pool.close())  # the two resets run in the background
        await asyncio.sleep(0)
        closing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await closing
        await asyncio.sleep(0.2)  # what a close left running would end by now, and put its sandbox back
        return pool.idle, pool.busy, own_sandbox_processes()

    assert asyncio.run(main()) == (0, 0, set())


def _unclosed_sockets(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning) and "socket" in str(w.message)]


def test_a_spare_made_just_as_its_taker_is_cancelled_is_kept_not_lost() -> None:
    # The spare's task can end (its process forked, its socket open) in the same loop turn as the command that
    # awaits it is cancelled: awaited plainly, the cancellation then drops what the task made, and its socket and
    # process were left to the garbage collector. Found as a ResourceWarning when a batch closed early.
    async def cancel_as_the_spare_is_made(sb: Sandbox, how: str) -> int:
        await sb.exec(["true"])  # a spare is being prepared now
        preparing = sb._spare
        assert preparing is not None and not preparing.done()
        taker = asyncio.ensure_future(sb.exec(["true"]) if how == "exec" else sb.reset())
        # Registered before the taker awaits the spare, so it runs first once the spare is made: the taker is
        # cancelled after its spare was made and before it resumes.
        preparing.add_done_callback(lambda _: taker.cancel())
        with contextlib.suppress(asyncio.CancelledError):
            await taker
        assert preparing.done() and not preparing.cancelled()
        agent = sb._impl.agent.pid  # type: ignore[union-attr]
        assert agent is not None
        return len(_children(agent))

    async def main(how: str) -> tuple[int, ExecResult, list[str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            async with Sandbox(limits=FAST) as sb:
                waiting = await cancel_as_the_spare_is_made(sb, how)
                after = await sb.exec(["echo", "still here"])
            gc.collect()  # what was dropped (the task that made it is gone with the helper's frame) is found here
        return waiting, after, _unclosed_sockets(caught)

    for how in ("reset", "exec"):
        waiting, after, unclosed = asyncio.run(main(how))
        assert unclosed == [], how
        assert waiting == 1, how  # the spare still waits, for the next command
        assert after.ok and after.stdout_text == "still here\n", how


@pytest.mark.parametrize("where", ["adopt", "disk_full"])
def test_an_unforeseen_error_around_a_spare_leaves_no_socket_behind(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # Every way out of making or using a spare closes its socket, an unforeseen error too (a bare OSError, here
    # as the spare's process is placed in its cgroup, or as the disk is looked at before its command runs), not
    # only a cancellation or a SandboxError: else the socket is left to the garbage collector.
    from rollbox.sandbox.namespaces._backend import NamespaceSandbox, _CgroupExecGroup

    owner: type = _CgroupExecGroup if where == "adopt" else NamespaceSandbox
    real = getattr(owner, where)

    def fails_once(self: object, *args: object) -> object:
        monkeypatch.setattr(owner, where, real)
        raise OSError(errno.EIO, "injected")

    async def main() -> tuple[ExecResult | None, ExecResult, list[str]]:
        first = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            async with Sandbox(limits=FAST) as sb:
                await sb.exec(["true"])
                await _settled(sb)
                monkeypatch.setattr(owner, where, fails_once)
                with contextlib.suppress(OSError):
                    first = await sb.exec(["true"])  # "adopt": its spare was made before; the next one's placing fails
                    await _settled(sb)
                after = await sb.exec(["echo", "still here"])
            gc.collect()
        return first, after, _unclosed_sockets(caught)

    first, after, unclosed = asyncio.run(main())
    assert unclosed == []
    assert after.ok and after.stdout_text == "still here\n"
    if where == "disk_full":  # before the command was sent: rollbox's failure, said so, never the program's
        assert first is not None and first.status.value == "infra_error", first
        assert (first.error or "").startswith("cannot set up the command: injected"), first


# A command's cgroup is passed on to the next command when it holds almost nothing any more (``Cgroup.recycle``).

_WHERE = "sed -n 's,.*/exec-,exec-,p' /proc/self/cgroup | sort -u"  # the command's cgroup, as it sees it


def _passed_on() -> bool:
    """Whether this kernel lets a cgroup serve another command: v1, or v2 from Linux 6.12 (which can restart a
    memory peak); elsewhere every command gets a fresh one."""
    if CgroupTree.detect().version == 1:
        return True
    major, minor = (int(part) for part in platform.release().split(".")[:2])
    return (major, minor) >= (6, 12)


_ALLOCATE = "import time; b = bytearray({mib} << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.05)"


def test_a_cgroup_passed_on_reports_and_limits_only_the_next_command() -> None:
    async def main() -> list[tuple[ExecResult, ExecResult]]:
        limits = Limits(timeout_s=5 * TIME_SCALE, cpu_time_s=2 * TIME_SCALE, memory_bytes=128 * 2**20, pids=8)
        async with Sandbox(limits=limits) as sb:
            await sb.exec(["true"])
            heavy = [
                # The spin outweighs any command's start-up, even in an emulated machine (a shell there: 0.4 s).
                ["python3", "-c", _ALLOCATE.format(mib=80) + f"\nwhile time.process_time() < {0.4 * TIME_SCALE}: pass"],
                ["python3", "-c", _ALLOCATE.format(mib=400)],  # beyond the 128 MiB limit
                ["sh", "-c", "for i in $(seq 12); do sleep 2 & done; wait"],  # beyond the 8 pids
                ["python3", "-c", _ALLOCATE.format(mib=100)],  # the whole limit is still there
            ]
            pairs = []
            for argv in heavy:
                pairs.append((await sb.exec(argv), await sb.exec(["sh", "-c", _WHERE])))
            return pairs

    (spin, spin_after), (bomb, bomb_after), (forks, forks_after), (big, big_after) = asyncio.run(main())
    assert spin.ok and spin.cpu_s >= 0.35 and (spin.peak_memory_bytes or 0) >= 80 << 20, spin
    assert bomb.status is Status.MEMORY_LIMIT, bomb
    assert forks.status is Status.PIDS_LIMIT, forks
    assert big.ok, big
    for after in (spin_after, bomb_after, forks_after, big_after):
        # Each next command reports its own small usage: no CPU, peak, OOM kill or refused fork of the one before.
        # (A shell's own CPU in an emulated machine on a loaded host nears the spin's: below the spin is the proof,
        # for a count that included the spin would be above it.)
        assert after.ok and after.cpu_s < spin.cpu_s and (after.peak_memory_bytes or 0) < 16 << 20, after
    # The cgroups were passed on, not made anew: one name for all (else this test would prove little).
    names = {after.stdout_text for after in (spin_after, bomb_after, forks_after, big_after)}
    assert len(names) == (1 if _passed_on() else 4)


def test_a_command_that_leaves_memory_charged_still_leaves_the_next_its_whole_limit() -> None:
    # 12 MiB left in /tmp (tmpfs pages, charged to the sandbox): the next command can still use its 128 MiB (about
    # 122 MiB here: the interpreter and 120 MiB), not 128 less what was left. On v2 it gets a fresh cgroup under the
    # sandbox's; on v1 it runs in the sandbox's own memory cgroup, whose limit is its own plus what was left.
    async def main() -> tuple[ExecResult, ExecResult, ExecResult, ExecResult]:
        async with Sandbox(limits=FAST) as sb:
            first = await sb.exec(["sh", "-c", _WHERE])
            await sb.exec(["sh", "-c", "head -c 12M /dev/urandom > /tmp/kept"])  # charged to the sandbox
            second = await sb.exec(["sh", "-c", _WHERE])
            big = await sb.exec(["python3", "-c", _ALLOCATE.format(mib=120)])
            third = await sb.exec(["sh", "-c", _WHERE])
            return first, second, big, third

    first, second, big, third = asyncio.run(main())
    assert first.ok and second.ok and third.ok
    assert big.ok, big
    shared_memory = CgroupTree.detect().version == 1
    assert (first.stdout_text == second.stdout_text) == shared_memory  # v2: replaced, the whole limit its own
    # A command that frees what it used passes its cgroup on.
    assert (second.stdout_text == third.stdout_text) == _passed_on()
