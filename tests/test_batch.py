"""Batch execution: every program gets exactly one result, streamed as it finishes, and programs stay apart."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from conftest import CountingSandboxes
from rollbox import Limits, Status
from rollbox.sandbox import ExecResult, Program, WarmSandboxes, run_batch

LIMITS = Limits(timeout_s=5, cpu_time_s=2, memory_bytes=128 * 2**20, pids=32, disk_bytes=16 * 2**20)


async def collect(programs: list[Program], **kw: object) -> list[tuple[int, ExecResult]]:
    return [item async for item in run_batch(programs, limits=LIMITS, **kw)]  # type: ignore[arg-type]


@pytest.mark.native_speed
def test_every_program_gets_exactly_one_result_and_they_stream_as_they_finish() -> None:
    slow = Program(argv=["sh", "-c", "sleep 0.5; echo slow"])
    quick = [Program(argv=["sh", "-c", f"echo {i}"]) for i in range(1, 8)]
    results = asyncio.run(collect([slow, *quick], workers=2))
    assert sorted(i for i, _ in results) == list(range(8))
    assert results[-1][0] == 0, "the slow program should finish last"
    by_index = dict(results)
    assert by_index[0].stdout == b"slow\n"
    assert [by_index[i].stdout for i in range(1, 8)] == [f"{i}\n".encode() for i in range(1, 8)]


def test_programs_get_their_files_and_stdin_and_nothing_of_each_other() -> None:
    programs = [
        Program(
            argv=["python3", "main.py"],
            files={
                "main.py": f"import os, sys\nopen('/tmp/mine-{i}', 'w').write('{i}')\n"
                "print(sorted(f for f in os.listdir('/tmp') if f.startswith('mine')), sys.stdin.read())\n"
            },
            stdin=f"input {i}",
            warm_python=i % 2 == 0,
        )
        for i in range(6)
    ]
    results = dict(asyncio.run(collect(programs, workers=2)))
    for i in range(6):
        assert results[i].ok, results[i]
        assert results[i].stdout == f"['mine-{i}'] input {i}\n".encode()


def test_limits_and_failures_come_back_as_results() -> None:
    programs = [
        Program(argv=["python3", "-c", "while True: pass"]),
        Program(argv=["no-such-program"]),
        Program(argv=["python3", "-c", "import os; os.kill(os.getppid(), 9)"]),
    ]
    results = dict(asyncio.run(collect(programs, workers=3)))
    assert results[0].status is Status.CPU_TIME_LIMIT
    assert (results[1].status, results[1].exit_code) == (Status.NONZERO_EXIT, 127)
    assert results[2].status is not Status.INFRA_ERROR


def test_bad_programs_are_refused_before_anything_runs() -> None:
    with pytest.raises(ValueError, match="non-empty list"):
        Program(argv=[])
    with pytest.raises(ValueError, match="warm_python runs"):
        Program(argv=["python3", "-c", "print(1)"], warm_python=True)
    for bad, named in [
        ({"argv": "ls"}, "Program.argv"),  # not run as ['l', 's']
        ({"argv": ["ls"], "stdin": 5}, "Program.stdin"),
        ({"argv": ["ls"], "files": {"../x": "a"}}, "Program.files: .*'../x'"),
        ({"argv": ["ls"], "files": {"/etc/x": "a"}}, "Program.files: .*'/etc/x'"),
        ({"argv": ["ls"], "files": {"x": 5}}, "Program.files"),
        ({"argv": ["ls"], "warm_python": "yes"}, "Program.warm_python"),
    ]:
        with pytest.raises(ValueError, match=named):
            Program(**bad)

    async def first(programs: list[Any], workers: int | None = None) -> None:
        async for _ in run_batch(programs, workers=workers):
            raise AssertionError("nothing may run")

    with pytest.raises(TypeError, match=r"run_batch takes Program items.*got \['true'\]"):
        asyncio.run(first([Program(argv=["true"]), ["true"]]))
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        asyncio.run(first([Program(argv=["true"])], workers=0))


def test_a_program_that_breaks_its_sandbox_does_not_hang_the_batch() -> None:
    deep = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\n"
    programs = [Program(argv=["python3", "-c", deep]), Program(argv=["sh", "-c", "kill -STOP $PPID"])]
    programs += [Program(argv=["echo", str(i)]) for i in range(4)]
    results = dict(asyncio.run(collect(programs, workers=2)))
    assert sorted(results) == list(range(6))
    assert [results[i].stdout for i in range(2, 6)] == [f"{i}\n".encode() for i in range(4)]


def test_closing_a_batch_early_stops_the_programs_left_and_leaves_nothing_running() -> None:
    programs = [Program(argv=["true"]), *[Program(argv=["sleep", "5"])] * 3]

    async def main() -> tuple[int, int, list[asyncio.Task[object]]]:
        async with WarmSandboxes(size=2) as warm:
            counting = CountingSandboxes(warm)
            batch = run_batch(programs, limits=LIMITS, workers=2, sandboxes=counting)
            async with contextlib.aclosing(batch) as results:
                index, _result = await anext(results)
            out_when_closed = counting.out  # nothing awaited since: the batch itself stopped its programs
        return index, out_when_closed, [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    index, out_when_closed, left = asyncio.run(main())
    assert (index, out_when_closed, left) == (0, 0, []), left
