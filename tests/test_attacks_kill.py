"""Attacks on the host's kill: a program that makes its processes hard to find must still die with its command.

A process whose main thread exits alone (the raw ``exit`` syscall, or ``pthread_exit``) while other threads run on
stays listed under the main thread's pid, a zombie. On cgroup v1 that zombie's ``/proc/PID/cgroup`` names the root
cgroup, so a kill that checked only it never signalled the process: the command outlived its limits, and the host
reported ``infra_error`` ("survived SIGKILL"), a failure a program could choose to have masked from training.
Every spelling here must end with the program's own status, promptly, and leave nothing alive. Run under the guard::

    python scripts/guard.py --memory 6G --pids 4096 -- python -m pytest tests/test_attacks_kill.py
"""

from __future__ import annotations

import asyncio
import json
import platform
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from rollbox import ExecResult, Sandbox, Status
from rollbox.judge import VerdictStatus, grade
from rollbox.tasks import load_task
from test_attacks import (  # noqa: F401  (its fixtures: fresh and warm, no leftovers)
    explain,
    leftover_processes,
    limits,
    nothing_survives_the_sandbox,
    py,
    sandbox_path,
    with_sandbox,
)

pytestmark = pytest.mark.adversarial

_SYS_EXIT = {"x86_64": 60, "aarch64": 93}[platform.machine()]

#: The main thread leaves with the raw exit syscall (glibc's exit() would end every thread); ``{work}`` keeps a thread.
_MAIN_THREAD_EXITS_ALONE = f"""
import ctypes, threading, time
def work():
    {{work}}
threading.Thread(target=work).start()
time.sleep(0.1)
ctypes.CDLL(None).syscall({_SYS_EXIT}, 3)
"""
_SLEEPS = "time.sleep(1000)"
#: glibc's pthread_exit on the main thread: the same state, the way C programs reach it.
_PTHREAD_EXIT = """
import ctypes, threading, time
threading.Thread(target=time.sleep, args=(1000,)).start()
time.sleep(0.1)
ctypes.CDLL(None).pthread_exit(None)
"""
#: A daemon whose main thread exits alone, left behind by a command that ends normally once that has happened.
_DAEMON = f"""
import os, time
child = os.fork()
if child == 0:
    os.setsid()
    exec({_MAIN_THREAD_EXITS_ALONE.format(work=_SLEEPS)!r})
while open(f"/proc/{{child}}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.01)
"""

#: Beyond the limit: the kill and the agent's report, and Python's start-up where the CPU is emulated. Far below the
#: five seconds the host waited for processes it never signalled.
_PROMPTLY_S = 2.0 * TIME_SCALE


#: The same in C, where a thread can spin without a lock to wait for (a CPython thread left alone soon waits
#: forever for the interpreter's lock): ``spin`` or ``rest`` in a second thread, the main thread gone by ``exit`` or
#: ``pthread``.
_C_PROGRAM = r"""
#include <pthread.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static void *spin(void *arg) { for (volatile unsigned long n = 0;; n++) {} return arg; }
static void *rest(void *arg) { for (;;) pause(); return arg; }
int main(int argc, char **argv) {
    pthread_t thread;
    if (argc != 3 || pthread_create(&thread, NULL, strcmp(argv[1], "spin") ? rest : spin, NULL)) return 2;
    if (!strcmp(argv[2], "pthread")) pthread_exit(NULL);
    syscall(SYS_exit, 3);
    return 1;
}
"""


@pytest.fixture(scope="module")
def c_program(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The C attack, built on the host with the compiler rollbox builds its agent with."""
    directory = tmp_path_factory.mktemp("leader")
    (directory / "leader.c").write_text(_C_PROGRAM)
    subprocess.run(["cc", "-O1", "-pthread", "-o", str(directory / "leader"), str(directory / "leader.c")], check=True)
    return (directory / "leader").read_bytes()


@pytest.mark.parametrize(
    ("argv", "status"),
    [
        (["./leader", "rest", "exit"], Status.TIMEOUT),
        (["./leader", "spin", "exit"], Status.CPU_TIME_LIMIT),
        (["./leader", "spin", "pthread"], Status.CPU_TIME_LIMIT),
        (["./leader", "rest", "pthread"], Status.TIMEOUT),
    ],
    ids=["exit-resting", "exit-spinning", "pthread-exit-spinning", "pthread-exit-resting"],
)
def test_a_c_program_whose_main_thread_exits_alone_ends_with_its_own_status(
    c_program: bytes, argv: list[str], status: Status
) -> None:
    # A resting thread must meet the time limit first, a spinning one its CPU limit, even on a busy machine; the
    # probe for leftovers (Python) must start within the CPU limit where the CPU is emulated.
    resting = status is Status.TIMEOUT
    lim = limits(timeout_s=(2 if resting else 10) * TIME_SCALE, cpu_time_s=(5 if resting else 2) * TIME_SCALE)

    async def body(sb: Sandbox) -> tuple[ExecResult, list[str]]:
        await sb.write_file("leader", c_program, mode=0o755)
        return await sb.exec(argv), await leftover_processes(sb)

    result, leftovers = with_sandbox(body, limits=lim)
    assert result.status is status, explain(result)
    assert result.wall_s < lim.timeout_s + _PROMPTLY_S, explain(result)
    assert leftovers == []


@pytest.mark.parametrize(
    "code",
    [_MAIN_THREAD_EXITS_ALONE.format(work=_SLEEPS), _PTHREAD_EXIT],
    ids=["raw-exit", "pthread-exit"],
)
@pytest.mark.parametrize("warm_python", [False, True], ids=["plain", "warm-python"])
def test_a_python_command_whose_main_thread_exits_alone_times_out(code: str, warm_python: bool) -> None:
    lim = limits(timeout_s=2 * TIME_SCALE, cpu_time_s=5 * TIME_SCALE)

    async def body(sb: Sandbox) -> tuple[ExecResult, list[str], ExecResult]:
        await sb.write_file("attack.py", textwrap.dedent(code))
        result = await sb.exec(["python3", "attack.py"], warm_python=warm_python)
        left = [p for p in await leftover_processes(sb) if "/opt/rollbox/zygote.py" not in p]  # the zygote stays
        return result, left, await sb.exec(["echo", "next"])

    result, leftovers, after = with_sandbox(body, limits=lim)
    assert result.status is Status.TIMEOUT, explain(result)
    assert result.wall_s < lim.timeout_s + _PROMPTLY_S, explain(result)
    assert leftovers == []
    assert after.ok and after.stdout == b"next\n", explain(after)


def test_a_daemon_whose_main_thread_exits_alone_dies_with_its_command() -> None:
    async def body(sb: Sandbox) -> tuple[ExecResult, list[str]]:
        return await sb.exec(py(_DAEMON)), await leftover_processes(sb)

    result, leftovers = with_sandbox(body, limits=limits(cpu_time_s=5 * TIME_SCALE))
    assert result.status is Status.OK, explain(result)
    assert result.wall_s < _PROMPTLY_S, explain(result)
    assert leftovers == []


# -- through the judge ---------------------------------------------------------------------------------------------

_PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
_CASES = [{"args": [1, 2], "kwargs": {}, "expected": 3}, {"args": [-1, 1], "kwargs": {}, "expected": 0}]


@pytest.mark.parametrize("sandbox_path", ["fresh"], indirect=True)
@pytest.mark.parametrize("when", ["at-import", "in-the-call"])
def test_a_wrong_completion_that_exits_its_main_thread_is_the_candidates_failure(tmp_path: Path, when: str) -> None:
    # A HumanEval-style function task: a wrong answer that also leaves its main thread must be graded as the
    # candidate's failure (here the limit it ran into), never masked as infra_error, and without retries.
    root = tmp_path / "task"
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text(_PROMPT)
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text("".join(json.dumps(c) + "\n" for c in _CASES))
    (root / "task.toml").write_text(
        '[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "add"\n'
        '[limits]\ntimeout = "2s"\ncpu_time = "2s"\nmemory = "256M"\n'
    )
    leave = f"threading.Thread(target=time.sleep, args=(1000,)).start(); ctypes.CDLL(None).syscall({_SYS_EXIT}, 0)"
    completion = _PROMPT + (
        f"    import ctypes, threading, time\n    {leave}\n    return a - b\n"
        if when == "in-the-call"
        else f"    return a - b\nimport ctypes, threading, time\n{leave}\n"
    )
    verdict = asyncio.run(grade(load_task(root), {"solution.py": completion}))
    assert verdict.status is not VerdictStatus.INFRA_ERROR and verdict.reward is not None, verdict
    assert verdict.status in (VerdictStatus.TIMEOUT, VerdictStatus.FAILED, VerdictStatus.ERROR), verdict
    assert verdict.duration_s < 2 * (2 + _PROMPTLY_S), verdict  # one run to its limit per variant, not 5 s waits
