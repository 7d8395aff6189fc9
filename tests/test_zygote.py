"""Warm Python: ``exec(["python3", SCRIPT, ...], warm_python=True)`` behaves like a fresh ``python3 -s SCRIPT``."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest

from rollbox import ExecResult, Limits, Sandbox, SandboxPool, Status

LIMITS = Limits(timeout_s=5, cpu_time_s=2, memory_bytes=256 * 2**20, pids=32, disk_bytes=16 * 2**20)

SCRIPT = textwrap.dedent("""
    import atexit, ctypes, os, sys, threading
    atexit.register(lambda: print("atexit ran"))
    threading.Thread(target=lambda: print("thread ran")).start()
    print(sys.argv, os.getcwd(), os.environ.get("GREETING"), sys.stdin.read(), __name__, hash("x"))
    print("dumpable", ctypes.CDLL(None).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE: its own /proc files are its own
    sys.exit(int(sys.argv[1]))
""")


def both(argv: list[str], **kw: object) -> tuple[ExecResult, ExecResult]:
    async def main() -> tuple[ExecResult, ExecResult]:
        async with Sandbox(limits=LIMITS) as sb:
            await sb.write_file("s.py", SCRIPT)
            cold = await sb.exec(argv, env={"PYTHONHASHSEED": "0", "GREETING": "hi"}, **kw)  # type: ignore[arg-type]
            warm = await sb.exec(argv, env={"PYTHONHASHSEED": "0", "GREETING": "hi"}, warm_python=True, **kw)  # type: ignore[arg-type]
            return cold, warm

    return asyncio.run(main())


def test_warm_python_matches_a_fresh_interpreter() -> None:
    cold, warm = both(["python3", "s.py", "3", "extra"], stdin="fed")
    assert (warm.status, warm.exit_code) == (cold.status, cold.exit_code) == (Status.NONZERO_EXIT, 3)
    assert warm.stdout == cold.stdout, (cold, warm)
    assert b"atexit ran" in warm.stdout and b"thread ran" in warm.stdout and b" hi fed __main__ " in warm.stdout


def test_errors_and_limits_are_reported_the_same_way() -> None:
    async def main() -> list[ExecResult]:
        async with Sandbox(limits=LIMITS) as sb:
            await sb.write_file("boom.py", "raise ValueError('boom')\n")
            await sb.write_file("bomb.py", "import os\nwhile True:\n    os.fork()\n")
            await sb.write_file("spin.py", "while True:\n    pass\n")
            return [await sb.exec(["python3", name], warm_python=True) for name in ("boom.py", "bomb.py", "spin.py")]

    boom, bomb, spin = asyncio.run(main())
    assert (boom.status, boom.exit_code) == (Status.NONZERO_EXIT, 1) and b"ValueError: boom" in boom.stderr
    assert bomb.status is Status.PIDS_LIMIT
    assert spin.status is Status.CPU_TIME_LIMIT


def test_children_never_see_each_others_changes_and_a_killed_zygote_is_replaced() -> None:
    def zygote(sb: Sandbox) -> int | None:
        return sb._impl._zygote.pid  # type: ignore[union-attr]

    async def main() -> tuple[list[ExecResult], int | None, int | None]:
        async with Sandbox(limits=LIMITS) as sb:
            await sb.write_file("taint.py", "import json\njson.dumps = None\nimport os\nos.environ['LEFT'] = '1'\n")
            await sb.write_file("look.py", "import json, os\nprint(json.dumps([1]), os.environ.get('LEFT'))\n")
            await sb.write_file("kill.py", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n")
            results = [
                await sb.exec(["python3", "taint.py"], warm_python=True),
                await sb.exec(["python3", "look.py"], warm_python=True),
            ]
            before = zygote(sb)
            results.append(await sb.exec(["python3", "kill.py"], warm_python=True))
            results.append(await sb.exec(["python3", "look.py"], warm_python=True))
            return results, before, zygote(sb)

    (taint, look, kill, again), before, after = asyncio.run(main())
    assert taint.ok and look.stdout == b"[1] None\n"
    assert kill.status is not Status.INFRA_ERROR
    assert again.ok and again.stdout == b"[1] None\n"
    assert before is not None and after is not None and before != after  # the killed zygote was replaced


@pytest.mark.parametrize("argv", [["python3"], ["python3", "-c", "pass"], ["sh", "s.py"]])
def test_only_plain_scripts_can_be_warm(argv: list[str]) -> None:
    async def main() -> None:
        async with Sandbox(limits=LIMITS) as sb:
            with pytest.raises(ValueError, match="warm_python runs"):
                await sb.exec(argv, warm_python=True)

    asyncio.run(main())


def test_the_environment_a_fresh_interpreter_reads_at_start_up_is_honoured() -> None:
    code = "import sys, helper\nprint(sys.dont_write_bytecode, helper.X)\n"

    async def main() -> tuple[ExecResult, list[str]]:
        async with Sandbox(limits=LIMITS) as sb:
            await sb.write_file("s.py", code)
            await sb.write_file("/tmp/lib/helper.py", "X = 5\n")
            env = {"PYTHONPATH": "/tmp/lib", "PYTHONDONTWRITEBYTECODE": "1"}
            result = await sb.exec(["python3", "s.py"], env=env, warm_python=True)
            listing = await sb.exec(["sh", "-c", "ls -a /tmp/lib"])
            return result, listing.stdout_text.split()

    result, listing = asyncio.run(main())
    assert result.stdout == b"True 5\n", result
    assert "__pycache__" not in listing


GLOBALS = (
    "import sys\nprint(sorted(k for k in globals() if k.startswith('__')), __file__, getattr(__spec__, 'origin', 0), "
    "__package__, sys.path[0], "
    "type(__builtins__), type(__loader__), sys.argv, sys.modules['__main__'].__dict__ is globals())\n"
)


def test_every_kind_of_script_runs_as_a_fresh_interpreter_runs_it() -> None:
    """Source files and sourceless .pyc run in the child itself; a zip archive (a zipapp, even behind a shebang),
    a directory with __main__.py, a source that merely contains a zip's end signature, and a missing file all do
    what python3 does with them."""

    async def main() -> list[tuple[ExecResult, ExecResult]]:
        async with Sandbox(limits=LIMITS) as sb:
            await sb.write_file("g.py", GLOBALS)
            await sb.write_file("sig.py", GLOBALS + "print('PK\x05\x06 is only text here')\n")
            await sb.write_file("d/__main__.py", GLOBALS)
            build = (
                "import py_compile, zipapp\n"
                "py_compile.compile('g.py', cfile='g.pyc')\n"
                "zipapp.create_archive('d', 'app.pyz', interpreter='/usr/bin/env python3')\n"
            )
            assert (await sb.exec(["python3", "-c", build])).ok
            pairs = []
            for script in ("g.py", "sig.py", "g.pyc", "app.pyz", "d", "missing.py"):
                argv = ["python3", script, "arg"]
                pairs.append((await sb.exec(argv), await sb.exec(argv, warm_python=True)))
            return pairs

    *runs, (cold_missing, warm_missing) = asyncio.run(main())
    for cold, warm in runs:
        assert cold.ok and warm.ok, (cold, warm)
        assert warm.stdout == cold.stdout, (cold, warm)
    assert cold_missing.exit_code == warm_missing.exit_code == 2
    assert warm_missing.stderr == cold_missing.stderr, (cold_missing, warm_missing)


async def _zygote_up(sb: Sandbox) -> bool:
    """Whether the zygote comes up within a few seconds without any command having asked for it."""
    for _ in range(500):
        if sb.warm_python_ready:
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_warm_python_sandbox_starts_its_zygote_with_it_and_after_every_restart() -> None:
    async def main() -> tuple[bool, bool, bool, ExecResult, ExecResult]:
        async with Sandbox(limits=LIMITS) as cold, Sandbox(limits=LIMITS, warm_python=True) as warm:
            await asyncio.sleep(0.5)  # time enough for a zygote to start, had the cold sandbox started one
            started = await _zygote_up(warm)
            idle_cold = cold.warm_python_ready
            await warm.reset(fresh=True)  # new namespaces: the old zygote is gone, and a new one starts
            restarted = await _zygote_up(warm)
            await warm.write_file("s.py", "print('warm')\n")
            return (
                started,
                idle_cold,
                restarted,
                await warm.exec(["python3", "s.py"], warm_python=True),
                await warm.exec(["sh", "-c", "echo plain"]),
            )

    started, idle_cold, restarted, python, shell = asyncio.run(main())
    assert started and restarted and not idle_cold
    assert python.stdout == b"warm\n" and shell.stdout == b"plain\n", (python, shell)


def test_a_warm_python_pool_has_every_zygote_running_before_its_first_command() -> None:
    async def main() -> list[bool]:
        async with SandboxPool(size=2, limits=LIMITS, warm_python=True) as pool, pool.sandboxes(2) as boxes:
            return [await _zygote_up(sb) for sb in boxes]

    assert asyncio.run(main()) == [True, True]


def test_a_zygote_a_program_stopped_is_killed_when_it_is_replaced_and_leaves_nothing_to_the_next_user() -> None:
    # A warm command stops its zygote (same uid, not pid 1) and ends at once (its output limit). The stopped zygote
    # never reports the command's end, so it is replaced; it used to stay, stopped, with the command unreaped,
    # holding memory outside every sandbox and pids inside the sandbox's, and an in-place reset kept it all.
    from conftest import TIME_SCALE

    stop = "import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)\nprint('x' * (2 << 20))\n"

    def alive(pid: int) -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat[stat.rindex(")") + 2] not in "ZX"

    async def main() -> tuple[list[ExecResult], int, int, bool, ExecResult]:
        async with SandboxPool(size=1, limits=Limits(timeout_s=5, output_bytes=2**20), warm_python=True) as pool:
            async with pool.sandbox() as sb:
                await sb.write_file("stop.py", stop)
                await sb.write_file("served.py", "print('served')\n")
                await sb.exec(["python3", "served.py"], warm_python=True)
                old = sb._impl._zygote.pid  # type: ignore[union-attr]
                results = [
                    await sb.exec(["python3", "stop.py"], warm_python=True),
                    await sb.exec(["python3", "served.py"], warm_python=True),
                ]
                new = sb._impl._zygote.pid  # type: ignore[union-attr]
                deadline = asyncio.get_running_loop().time() + 5 * TIME_SCALE
                while alive(old) and asyncio.get_running_loop().time() < deadline:
                    await asyncio.sleep(0.02)
                old_alive = alive(old)
            async with pool.sandbox() as sb:  # the next user: only the agent, the new zygote and this shell are there
                listing = await sb.exec(["sh", "-c", "set -- /proc/[0-9]*; echo $#"])
        return results, old, new, old_alive, listing

    (stopped, served), old, new, old_alive, listing = asyncio.run(main())
    assert stopped.status is Status.OUTPUT_LIMIT, stopped
    assert served.ok and served.stdout == b"served\n", served
    assert new != old and not old_alive  # replaced, and the stopped one killed
    assert listing.ok and listing.stdout == b"3\n", listing
