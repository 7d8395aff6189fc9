"""Warm pools: reuse hygiene (nothing of one user reaches the next), exhaustion, concurrency, recovery."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import resource
import select
import signal
import time

import pytest

from rollbox import (
    ExecResult,
    Limits,
    PoolExhausted,
    Sandbox,
    SandboxError,
    SandboxPool,
    SandboxStateError,
    Status,
)
from rollbox.sandbox import SandboxConfig, WarmSandboxes

LIMITS = Limits(timeout_s=5, cpu_time_s=3, memory_bytes=128 * 2**20, pids=32, disk_bytes=16 * 2**20)

SHM = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
key, flags = int(sys.argv[1], 0), int(sys.argv[2], 0)
print(libc.shmget(key, 4096, flags), ctypes.get_errno())
"""


async def two_users(first: list[str], second: list[str]) -> tuple[ExecResult, ExecResult, bool]:
    """Run ``first`` as one user of a one-sandbox pool, then ``second`` as the next; say if it was the same sandbox."""
    async with SandboxPool(size=1, limits=LIMITS) as pool:
        async with pool.sandbox() as sb:
            before = await sb.exec(first)
            identity = id(sb)
        async with pool.sandbox() as sb:
            return before, await sb.exec(second), id(sb) == identity


def _fresh_listing() -> str:
    """What a brand-new sandbox shows there (a runtime installed under /tmp adds its mount points)."""

    async def main() -> str:
        async with Sandbox(limits=LIMITS) as sb:
            return (await sb.exec(["ls", "-A", "/workspace", "/tmp", "/dev/shm"])).stdout_text

    return asyncio.run(main())


FRESH_LISTING = _fresh_listing() if os.geteuid() == 0 else ""

LEFTOVERS = {
    "files in /workspace, /tmp and /dev/shm": (
        "echo secret > left; echo secret > /tmp/left; echo secret > /dev/shm/left; mkdir -p a/b; echo x > a/b/c",
        "ls -A /workspace /tmp /dev/shm",
        FRESH_LISTING,
    ),
    "a directory made unreadable, and /workspace itself": (
        "mkdir locked; echo secret > locked/f; chmod 000 locked; chmod 000 /workspace",
        "ls -A /workspace; stat -c %a /workspace",
        "755\n",
    ),
    "background processes": (
        "(sleep 1000 &); (setsid sh -c 'while true; do sleep 1; done' &); echo started",
        "cat /proc/[0-9]*/comm | grep -cx sleep || true",
        "0\n",
    ),
}


@pytest.mark.parametrize("name", LEFTOVERS)
def test_nothing_is_left_for_the_next_user(name: str) -> None:
    leave, look, expected = LEFTOVERS[name]
    before, after, reused = asyncio.run(two_users(["sh", "-c", leave], ["sh", "-c", look]))
    assert reused, "the pool should have handed out the same sandbox again"
    assert before.status in (Status.OK, Status.NONZERO_EXIT), before
    assert after.stdout_text == expected, after


@pytest.mark.parametrize("mode", ["0o1600", "0o1000"])  # IPC_CREAT with mode 600, and with mode 000
def test_sysv_shared_memory_does_not_survive(mode: str) -> None:
    before, after, reused = asyncio.run(
        two_users(["python3", "-c", SHM, "0x5eed", mode], ["python3", "-c", SHM, "0x5eed", "0"])
    )
    assert reused and before.ok and int(before.stdout_text.split()[0]) >= 0, before
    assert after.stdout_text.split() == ["-1", "2"], after  # ENOENT: the segment is gone


def test_posix_message_queues_are_refused() -> None:
    code = (
        "import ctypes, sys; l = ctypes.CDLL(None, use_errno=True);"
        " print(l.mq_open(b'/left', int(sys.argv[1], 0), 0o600, None), ctypes.get_errno())"
    )
    before, after, reused = asyncio.run(
        two_users(["python3", "-c", code, "0o102"], ["python3", "-c", code, "0o2"])  # O_CREAT|O_RDWR, then O_RDWR
    )
    assert reused and before.stdout_text.split() == ["-1", "1"], before  # EPERM: refused by the syscall filter
    assert after.stdout_text.split()[0] == "-1", after


def test_what_a_user_did_to_the_sandbox_itself_does_not_reach_the_next() -> None:
    # Lower the agent's (pid 1's) limits and priority, raise its OOM score, and try a namespaced sysctl: none of it
    # may reach the next user.
    poison = (
        "import os, resource\n"
        "os.setpriority(os.PRIO_PROCESS, 1, 19)\n"
        "resource.prlimit(1, resource.RLIMIT_NOFILE, (16, 16))\n"
        "open('/proc/1/oom_score_adj', 'w').write('1000')\n"
        "try:\n    open('/proc/sys/kernel/shmmax', 'w').write('1')\nexcept OSError:\n    pass\n"
    )
    look = (
        "import os; print(os.getpriority(os.PRIO_PROCESS, 1), open('/proc/1/oom_score_adj').read().strip(),"
        " open('/proc/sys/kernel/shmmax').read().strip())"
    )
    before, after, reused = asyncio.run(two_users(["python3", "-c", poison], ["python3", "-c", look]))
    assert reused and before.status is not Status.INFRA_ERROR, before
    assert after.ok, after
    priority, oom, shmmax = after.stdout_text.split()
    assert (priority, oom) == ("0", "0") and shmmax != "1"


RENICE_AGENT = "python3 -c 'import os; os.setpriority(os.PRIO_PROCESS, 1, 19)'"
PIN_AGENT = "python3 -c 'import os; os.sched_setaffinity(1, {max(os.sched_getaffinity(1))})'"
TOUCHING = (RENICE_AGENT, PIN_AGENT)


@pytest.mark.parametrize("leave", [*TOUCHING, "true", "echo x > /workspace/f; mkdir -p a/b/c; chmod 000 a"])
def test_an_untouched_agent_is_kept_and_a_touched_one_replaced(leave: str) -> None:
    async def main() -> tuple[int, int]:
        async with SandboxPool(size=1, limits=LIMITS) as pool:
            async with pool.sandbox() as sb:
                await sb.exec(["sh", "-c", leave])
                before = sb._impl.agent.pid  # type: ignore[union-attr]
            async with pool.sandbox() as sb:
                after = await sb.exec(["sh", "-c", "ls -A /workspace"])
                assert after.ok and after.stdout == b"", after
                return before or 0, sb._impl.agent.pid or 0  # type: ignore[union-attr]

    if leave == PIN_AGENT and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the agent cannot be pinned to fewer")
    before, after = asyncio.run(main())
    assert (before == after) == (leave not in TOUCHING)


def test_environment_is_per_command() -> None:
    async def main() -> ExecResult:
        async with SandboxPool(size=1, limits=LIMITS) as pool:
            async with pool.sandbox() as sb:
                await sb.exec(["true"], env={"LEFT_BEHIND": "secret"})
            async with pool.sandbox() as sb:
                return await sb.exec(["env"])

    assert "LEFT_BEHIND" not in asyncio.run(main()).stdout_text


def test_a_sandbox_whose_agent_was_killed_is_replaced_transparently() -> None:
    # Killed from the host: inside, the agent is its namespace's pid 1, which the kernel spares its own processes'
    # SIGKILL.
    from conftest import TIME_SCALE

    async def main() -> tuple[int | None, int | None, ExecResult]:
        async with SandboxPool(size=1, limits=LIMITS) as pool:
            async with pool.sandbox() as sb:
                assert (await sb.exec(["true"])).ok
                before = sb._impl.agent.pid  # type: ignore[union-attr]
                assert before is not None
                agent = os.pidfd_open(before)  # the agent this test's pool started
                try:
                    signal.pidfd_send_signal(agent, signal.SIGKILL)
                    assert select.select([agent], [], [], 10 * TIME_SCALE)[0], "the agent outlived SIGKILL"
                finally:
                    os.close(agent)
            async with pool.sandbox() as sb:
                return before, sb._impl.agent.pid, await sb.exec(["echo", "fine"])  # type: ignore[union-attr]

    before, after, result = asyncio.run(main())
    assert before is not None and after is not None and before != after
    assert result.ok and result.stdout == b"fine\n", result


def test_exhaustion_is_a_clear_error_after_the_timeout_never_a_hang() -> None:
    async def main() -> float:
        async with SandboxPool(size=1, limits=LIMITS) as pool, pool.sandbox():
            start = time.monotonic()
            with pytest.raises(PoolExhausted, match=r"all 1 sandboxes of the pool stayed busy for 0\.2 s"):
                async with pool.sandbox(timeout_s=0.2):
                    pass
            return time.monotonic() - start

    assert 0.2 <= asyncio.run(main()) < 2


def test_waiters_get_sandboxes_as_they_come_back() -> None:
    async def main() -> tuple[list[str], int]:
        peak = 0
        async with SandboxPool(size=2, limits=LIMITS) as pool:

            async def user(i: int) -> str:
                nonlocal peak
                async with pool.sandbox(timeout_s=30) as sb:
                    peak = max(peak, pool.busy)
                    await sb.write_file("mine", str(i))
                    result = await sb.exec(["sh", "-c", "sleep 0.05; ls; cat mine"])
                    return result.stdout_text

            outputs = await asyncio.gather(*(user(i) for i in range(6)))
            for _ in range(500):  # the last two are reset in the background, then idle again
                if pool.idle == 2:
                    break
                await asyncio.sleep(0.01)
            assert (pool.idle, pool.busy) == (2, 0)
        return outputs, peak

    outputs, peak = asyncio.run(main())
    assert outputs == [f"mine\n{i}" for i in range(6)]  # each user saw only its own file
    assert peak == 2


def test_misuse_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one sandbox"):
        SandboxPool(size=0)
    with pytest.raises(ValueError, match="unknown network"):
        SandboxPool(size=1, network="internet")

    async def main() -> None:
        pool = SandboxPool(size=1, limits=LIMITS)
        async with pool:
            pass
        with pytest.raises(SandboxStateError, match="closed"):
            async with pool.sandbox():
                pass

    asyncio.run(main())


def test_attributes_of_the_directories_themselves_do_not_survive() -> None:
    # A default ACL that denies everything, and extended attributes that eat the tmpfs's inode budget.
    acl = "02000000" + "01000000ffffffff" + "04000000ffffffff" + "20000000ffffffff"  # u::-, g::-, o::-
    poison = (
        f"import errno, os\nos.setxattr('/workspace', 'system.posix_acl_default', bytes.fromhex('{acl}'))\n"
        "try:\n"
        "    for i in range(200):\n        os.setxattr('/tmp', f'user.k{i}', b'x' * 4000)\n"
        "    os.setxattr('/workspace', 'user.secret', b'from A')\n"
        "except OSError as exc:\n"
        "    assert exc.errno == errno.EOPNOTSUPP, exc  # tmpfs has user xattrs from Linux 6.6 on\n"
    )
    look = (
        "import os\nos.makedirs('pkg/sub')\nopen('pkg/sub/f', 'w').write('x')\n"
        "print(oct(os.stat('pkg/sub').st_mode & 0o777), os.listxattr('/workspace'), len(os.listxattr('/tmp')))\n"
    )

    async def main() -> tuple[ExecResult, ExecResult, ExecResult]:
        async with SandboxPool(size=1, limits=LIMITS) as pool:
            async with pool.sandbox() as sb:
                first = await sb.exec(["python3", "-c", poison])
            async with pool.sandbox() as sb:
                await sb.write_file("hostmade/dir/file.txt", "x")
                listing = await sb.exec(["sh", "-c", "stat -c %a hostmade hostmade/dir"])
                return first, await sb.exec(["python3", "-c", look]), listing

    first, after, listing = asyncio.run(main())
    assert first.ok, first
    assert after.ok and after.stdout == b"0o755 [] 0\n", after
    assert listing.stdout == b"755\n755\n", listing


def test_a_loopback_sandbox_is_always_restarted() -> None:
    # Its network namespace keeps what sockets did (TIME_WAIT ports, counters), which no in-place reset clears.
    async def main() -> tuple[int | None, int | None]:
        async with SandboxPool(size=1, limits=LIMITS, network="loopback") as pool:
            async with pool.sandbox() as sb:
                await sb.exec(["true"])
                before = sb._impl.agent.pid  # type: ignore[union-attr]
            async with pool.sandbox() as sb:
                await sb.exec(["true"])
                return before, sb._impl.agent.pid  # type: ignore[union-attr]

    before, after = asyncio.run(main())
    assert before is not None and after is not None and before != after


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the sched_setattr number used here is x86_64's")
def test_a_changed_scheduling_slice_of_the_agent_is_noticed() -> None:
    code = (
        "import ctypes, struct\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "attr = struct.pack('IIQiIQQQII', 56, 0, 0, 0, 0, 100_000_000, 0, 0, 0, 0)\n"
        "libc.syscall(314, 1, attr, 0)\n"  # sched_setattr(1, slice=100 ms)
        "now = ctypes.create_string_buffer(56)\nlibc.syscall(315, 1, now, 56, 0)\n"  # sched_getattr
        "print(struct.unpack('IIQiIQQQII', now.raw)[5])\n"
    )

    async def main() -> tuple[ExecResult, int | None, int | None]:
        async with SandboxPool(size=1, limits=LIMITS) as pool:
            async with pool.sandbox() as sb:
                result = await sb.exec(["python3", "-c", code])
                before = sb._impl.agent.pid  # type: ignore[union-attr]
            async with pool.sandbox() as sb:
                await sb.exec(["true"])
                return result, before, sb._impl.agent.pid  # type: ignore[union-attr]

    result, before, after = asyncio.run(main())
    assert result.ok, result
    if result.stdout != b"100000000\n":
        pytest.skip(f"this kernel does not keep a custom slice (6.12 on does): it reads {result.stdout_text.strip()}")
    assert before != after  # the agent must not serve again


def test_a_request_during_a_reset_waits_for_it() -> None:
    from conftest import TIME_SCALE

    async def main() -> tuple[tuple[int, int], ExecResult]:
        async with SandboxPool(size=1, limits=LIMITS) as pool:
            async with pool.sandbox() as sb:
                await sb.exec(["sh", "-c", RENICE_AGENT])  # its reset will be a restart, which first ends the agent
                agent = os.pidfd_open(sb._impl.agent.pid)  # type: ignore[union-attr, arg-type]
            loop, ended = asyncio.get_running_loop(), asyncio.Event()
            loop.add_reader(agent, ended.set)
            try:
                await asyncio.wait_for(ended.wait(), 10 * TIME_SCALE)  # the reset is under way now
            finally:
                loop.remove_reader(agent)
                os.close(agent)
            during = (pool.idle, pool.busy)  # the new agent is still starting: nothing idle yet
            async with pool.sandbox(timeout_s=30) as sb:
                return during, await sb.exec(["echo", "served"])

    during, result = asyncio.run(main())
    assert during == (0, 1)
    assert result.ok and result.stdout == b"served\n", result


def test_several_sandboxes_are_borrowed_together_distinct_and_never_deadlock() -> None:
    """Borrowers of several never hold some while waiting for the rest: four of them, each wanting 2 of a pool
    of 3, all finish; each sees sandboxes of its own."""

    async def main() -> tuple[list[list[str]], float]:
        async with SandboxPool(size=3, limits=LIMITS) as pool:

            async def borrower(i: int) -> list[str]:
                async with pool.sandboxes(2, timeout_s=30) as (a, b):
                    assert a is not b
                    await a.write_file("who", f"{i}a")
                    await b.write_file("who", f"{i}b")
                    await asyncio.sleep(0.05)  # all four want sandboxes at once
                    return [(await sb.exec(["cat", "who"])).stdout_text for sb in (a, b)]

            outputs = await asyncio.gather(*(borrower(i) for i in range(4)))
            start = time.monotonic()
            with pytest.raises(PoolExhausted, match=r"2 of the pool's 3 sandboxes were not free together for 0\.2 s"):
                async with pool.sandboxes(2), pool.sandboxes(2, timeout_s=0.2):
                    pass
            return outputs, time.monotonic() - start

    outputs, waited = asyncio.run(main())
    assert outputs == [[f"{i}a", f"{i}b"] for i in range(4)]
    assert waited < 5


def test_sandboxes_without_the_label_to_avoid_are_handed_out_first() -> None:
    """Whatever the order the two came back in, each borrower that avoids one label gets the other sandbox."""

    async def main() -> tuple[int, int, int, int]:
        async with SandboxPool(size=2, limits=LIMITS) as pool:
            async with pool.sandboxes(2) as (a, b):
                a.history.add("ran x")
                b.history.add("ran y")
            while pool.idle < 2:
                await asyncio.sleep(0.01)
            async with pool.sandboxes(1, avoid="ran x") as (not_x,):
                pass
            while pool.idle < 2:
                await asyncio.sleep(0.01)
            async with pool.sandboxes(1, avoid="ran y") as (not_y,):
                pass
            return id(not_x), id(b), id(not_y), id(a)

    not_x, b, not_y, a = asyncio.run(main())
    assert (not_x, not_y) == (b, a)


def test_borrowing_more_than_the_pool_holds_is_refused() -> None:
    async def main() -> None:
        async with SandboxPool(size=2, limits=LIMITS) as pool:
            with pytest.raises(ValueError, match="cannot borrow 3 sandboxes from a pool of 2"):
                async with pool.sandboxes(3):
                    pass

    asyncio.run(main())


def test_warm_sandboxes_beyond_their_size_are_made_fresh() -> None:
    async def main() -> list[ExecResult]:
        async with (
            WarmSandboxes(size=1) as sandboxes,
            sandboxes.sandboxes(3, SandboxConfig(limits=LIMITS)) as boxes,
        ):
            assert len({id(sb) for sb in boxes}) == 3
            for i, sb in enumerate(boxes):
                await sb.write_file("who", str(i))
            return [await sb.exec(["cat", "who"]) for sb in boxes]

    assert [r.stdout_text for r in asyncio.run(main())] == ["0", "1", "2"]


# A pool's own lifetime: whatever fails or is cancelled while it opens, resets or closes, every sandbox it made is
# closed when the failing call returns, and no borrower waits forever.


class _RefusedStart(Sandbox):
    """A sandbox whose start fails, as one can on a machine out of resources: after a moment, so that the others
    of its pool have started by then."""

    async def __aenter__(self) -> Sandbox:
        await asyncio.sleep(0.2)
        raise OSError(24, "Too many open files")


def test_a_pool_that_fails_to_open_closes_the_sandboxes_that_did_start() -> None:
    from conftest import own_sandbox_processes

    async def main() -> set[int]:
        pool = SandboxPool(size=3, limits=LIMITS)
        made = iter([Sandbox, _RefusedStart, Sandbox])
        pool._make = lambda: next(made)(limits=LIMITS)  # type: ignore[method-assign]
        with pytest.raises(OSError, match="Too many open files"):
            await pool.__aenter__()
        return own_sandbox_processes()

    assert asyncio.run(main()) == set()


def test_a_pool_cancelled_while_it_opens_closes_the_sandboxes_that_did_start() -> None:
    from conftest import cancel_while_opening, own_sandbox_processes

    async def main() -> dict[float, set[int]]:
        left = {}
        for step in range(12):
            await cancel_while_opening(SandboxPool(size=3, limits=LIMITS).__aenter__(), step * 0.004)
            if survivors := own_sandbox_processes():
                left[step * 0.004] = survivors
        return left

    assert asyncio.run(main()) == {}


def test_a_replacement_that_cannot_be_made_is_reported_to_the_next_borrower_at_once() -> None:
    async def main() -> float:
        async with SandboxPool(size=1, limits=LIMITS) as pool:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            try:
                async with pool.sandbox() as sb:
                    await sb.close()  # its reset fails: the pool closes it and makes another, which cannot start...
                    resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))  # ...with no fd to be had, as on a full host
                while pool.busy:  # until the replacement has failed
                    await asyncio.sleep(0.01)
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            started = time.monotonic()
            with pytest.raises(SandboxError, match=r"the last replacement failed: .*Too many open files"):
                async with pool.sandbox(timeout_s=10):
                    pass
            return time.monotonic() - started

    assert asyncio.run(main()) < 5  # told, not left to wait for a sandbox that will never come


def test_a_tree_too_large_to_empty_in_place_is_replaced_instead() -> None:
    # Emptying runs on the event loop, which every sandbox of the process shares: past EMPTY_IN_PLACE_MAX entries the
    # sandbox restarts with a new tree instead (the old one goes with its namespaces, in the kernel).
    from rollbox.sandbox.namespaces._state import EMPTY_IN_PLACE_MAX

    roomy = Limits(timeout_s=20, cpu_time_s=10, memory_bytes=256 * 2**20, pids=32, disk_bytes=64 * 2**20)

    async def main(count: int) -> tuple[ExecResult, bool, bytes]:
        async with SandboxPool(size=1, limits=roomy) as pool:
            async with pool.sandbox() as sb:
                agent = sb._impl.agent.pid  # type: ignore[union-attr]
                made = await sb.exec(["sh", "-c", f"mkdir /tmp/many && cd /tmp/many && seq {count} | xargs touch"])
            async with pool.sandbox() as sb:
                kept = sb._impl.agent.pid == agent  # type: ignore[union-attr]
                return made, kept, (await sb.exec(["ls", "-A", "/tmp"])).stdout

    few, kept, left = asyncio.run(main(100))
    assert few.ok and kept and left == b"", (few, left)
    many, kept, left = asyncio.run(main(EMPTY_IN_PLACE_MAX + 100))
    assert many.ok and not kept and left == b"", (many, left)


# WarmSandboxes: one opening per configuration at a time, and nobody else waits for it.

#: A pool this large takes a while to open (every sandbox and its zygote start): long enough to act meanwhile.
OPENING_SIZE = 8


def test_a_pool_opening_never_holds_back_the_borrowers_of_another_configuration(held_openings: asyncio.Event) -> None:
    warm, cold = SandboxConfig(limits=LIMITS), SandboxConfig(limits=dataclasses.replace(LIMITS, timeout_s=6))

    async def main() -> tuple[bool, bool]:
        async with WarmSandboxes(size=OPENING_SIZE) as sandboxes:
            held_openings.set()
            async with sandboxes.sandbox(warm):  # its pool is open
                pass
            await asyncio.sleep(0.5)  # and its sandbox reset, idle again
            held_openings.clear()  # the next opening waits
            cold_served = asyncio.Event()

            async def use_cold() -> None:
                async with sandboxes.sandbox(cold) as sb:
                    cold_served.set()
                    await sb.exec(["true"])

            opening = asyncio.create_task(use_cold())
            await asyncio.sleep(0.01)
            began = not cold_served.is_set()  # the cold pool is opening
            async with asyncio.timeout(30), sandboxes.sandbox(warm) as sb:
                served_meanwhile = not cold_served.is_set()  # the warm borrower did not wait for the cold pool
                assert (await sb.exec(["true"])).status is Status.OK
            held_openings.set()
            await opening
            return began, served_meanwhile

    assert asyncio.run(main()) == (True, True)


def test_a_borrower_that_gives_up_leaves_the_opening_to_the_others_who_wait_for_it() -> None:
    from conftest import own_sandbox_processes

    config = SandboxConfig(limits=LIMITS)

    async def main() -> tuple[set[int], set[int]]:
        async with WarmSandboxes(size=OPENING_SIZE) as sandboxes:
            entered = asyncio.Event()

            async def borrow() -> None:
                async with sandboxes.sandbox(config):
                    entered.set()
                    await asyncio.sleep(3600)  # held until cancelled

            quitter, stayer = asyncio.create_task(borrow()), asyncio.create_task(borrow())
            started: set[int] = set()
            while not started:  # some of the pool's sandboxes have started, not all: it is still opening
                await asyncio.sleep(0.005)
                started = own_sandbox_processes()
            assert not entered.is_set(), "the pool opened before the test could cancel a borrower"
            quitter.cancel()
            await asyncio.wait_for(entered.wait(), 60)  # the other borrower is served...
            alive = own_sandbox_processes()
            stayer.cancel()
            await asyncio.gather(quitter, stayer, return_exceptions=True)
            return started, alive

    started, alive = asyncio.run(main())
    assert started <= alive  # ...by the same opening: what it had started was not closed and started again


def test_a_failed_opening_is_told_to_every_waiter_and_the_next_borrower_opens_again() -> None:
    config = SandboxConfig(limits=LIMITS)

    async def main() -> tuple[list[BaseException | None], ExecResult]:
        async with WarmSandboxes(size=2) as sandboxes:

            async def borrow() -> None:
                async with sandboxes.sandbox(config):
                    pass

            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))  # no descriptor to be had, as on a full host
            try:
                failed = await asyncio.gather(borrow(), borrow(), return_exceptions=True)
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            async with sandboxes.sandbox(config) as sb:  # the host has descriptors again: this one opens the pool
                return failed, await sb.exec(["echo", "ok"])

    failed, result = asyncio.run(main())
    assert all(isinstance(f, (SandboxError, OSError)) and "Too many open files" in str(f) for f in failed), failed
    assert result.stdout == b"ok\n"
