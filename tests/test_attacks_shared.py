"""Attacks on what a sandbox shares with the host and with other sandboxes: the kernel's per-user counters, the pty
pool, what rollbox's own process would pass on (rlimits), and the host's core dump helper.

A sandbox must exhaust neither the host nor another sandbox. Each attack takes all of a shared thing from inside
one sandbox, holds it, and checks that root (a process of the test's, outside every sandbox) and a second sandbox
still get their share. Run under the guard::

    python scripts/guard.py --memory 6G --pids 4096 -- python -m pytest tests/test_attacks_shared.py
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from rollbox import ExecResult, Sandbox, Status
from test_attacks import (  # noqa: F401  (its fixture: no leftovers)
    MiB,
    explain,
    limits,
    nothing_survives_the_sandbox,
    py,
    run,
)

pytestmark = pytest.mark.adversarial

#: Room for what the attacks hold (inotify marks, queued signals and ptys are charged to the command's memory).
_ROOMY = limits(memory_bytes=256 * MiB, timeout_s=120 * TIME_SCALE, cpu_time_s=60 * TIME_SCALE, open_files=1024)

#: One of each per-user kernel counter, tried once: 0 when it worked, else the errno. Run by root on the host and in
#: a second sandbox while the first holds all it can get.
_ONE_OF_EACH = """
import ctypes, json, os, signal, sys, tempfile
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(result):
    return 0 if result >= 0 else ctypes.get_errno()
watched = tempfile.NamedTemporaryFile(dir=sys.argv[1])
instance = libc.inotify_init1(os.O_CLOEXEC)
found = {"inotify_instance": errno_of(instance)}
if instance >= 0:
    found["inotify_watch"] = errno_of(libc.inotify_add_watch(instance, watched.name.encode(), 0x2))  # IN_MODIFY
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
found["sigqueue"] = errno_of(libc.sigqueue(os.getpid(), signal.SIGRTMIN, ctypes.c_void_p(0)))
master = slave = -1
try:
    master, slave = os.openpty()
    found["pty"] = 0
except OSError as exc:
    found["pty"] = exc.errno
print(json.dumps(found))
"""

#: Takes all it can of each counter and holds it: inotify instances, then watches over them (the same files, watched by
#: every instance), RT signals queued to itself, and ptys in four processes (each within its open files limit). Says
#: what it got in /workspace/held, and holds it all until /workspace/go appears.
_TAKE_ALL = """
import ctypes, errno, json, os, signal, time
libc = ctypes.CDLL(None, use_errno=True)
got = {}
instances = []
while True:
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        got["inotify_instances"] = (len(instances), errno.errorcode[ctypes.get_errno()])
        break
    instances.append(fd)
os.makedirs("/tmp/w")
paths = []
for i in range(2000):
    path = f"/tmp/w/{i}".encode()
    open(path, "w").close()
    paths.append(path)
watches, error = 0, 0
for fd in instances:
    for path in paths:
        if libc.inotify_add_watch(fd, path, 0x2) < 0:
            error = ctypes.get_errno()
            break
        watches += 1
    if error:
        break
got["inotify_watches"] = (watches, errno.errorcode.get(error, "none"))
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
queued = 0
while libc.sigqueue(os.getpid(), signal.SIGRTMIN, ctypes.c_void_p(0)) == 0:
    queued += 1
got["signals"] = (queued, errno.errorcode[ctypes.get_errno()])
holders = []
for _ in range(4):
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(reader)
        opened, error = [], "none"
        while True:
            try:
                opened.append(os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY))
            except OSError as exc:
                error = errno.errorcode[exc.errno]
                break
        os.write(writer, json.dumps([len(opened), error]).encode())
        os.close(writer)
        while not os.path.exists("/workspace/go"):
            time.sleep(0.02)
        os._exit(0)
    os.close(writer)
    holders.append(json.loads(os.read(reader, 100)))
got["ptys"] = (sum(n for n, _ in holders), holders[-1][1])
with open("/workspace/held.new", "w") as f:
    json.dump(got, f)
os.rename("/workspace/held.new", "/workspace/held")
while not os.path.exists("/workspace/go"):
    time.sleep(0.02)
"""


def _root_takes_one_of_each() -> dict[str, int]:
    """Root's own share, tried in a child process of the test's (signals queued to itself, never to this one)."""
    done = subprocess.run(
        [sys.executable, "-c", _ONE_OF_EACH, "/tmp"], capture_output=True, text=True, timeout=30, check=True
    )
    found: dict[str, int] = json.loads(done.stdout)
    return found


async def _while_one_sandbox_holds_all(
    other: Sandbox, holder: Sandbox
) -> tuple[dict[str, object], dict[str, int], ExecResult]:
    """Have ``holder`` take all it can and hold it; meanwhile try one of each as root and in ``other``."""
    await other.write_file("one.py", textwrap.dedent(_ONE_OF_EACH))
    taking = asyncio.ensure_future(holder.exec(py(_TAKE_ALL)))
    try:
        deadline = time.monotonic() + 120 * TIME_SCALE
        while True:
            with contextlib.suppress(FileNotFoundError):
                held: dict[str, object] = json.loads(await holder.read_file("held"))
                break
            assert not taking.done(), explain(taking.result())
            assert time.monotonic() < deadline, "the attack never said what it held"
            await asyncio.sleep(0.05)
        root = await asyncio.to_thread(_root_takes_one_of_each)
        second = await other.exec(["python3", "one.py", "/tmp"])
    finally:
        await holder.write_file("go", "")
        result = await taking
    assert result.status is Status.OK, explain(result)
    return held, root, second


@pytest.mark.timeout(120 * TIME_SCALE)  # a few seconds here; hundreds of thousands of syscalls where emulated
def test_one_sandbox_exhausts_neither_roots_nor_another_sandboxs_kernel_counters() -> None:
    # Each sandbox's counters are its own host uid's (its user namespace is made as that uid), and its ptys are a
    # devpts instance of its own with a maximum: what one sandbox takes, root and other sandboxes still have.
    async def main() -> tuple[dict[str, object], dict[str, int], ExecResult]:
        async with Sandbox(limits=_ROOMY) as holder, Sandbox(limits=_ROOMY) as other:
            return await _while_one_sandbox_holds_all(other, holder)

    held, root, second = run(main())
    # The attack did reach each limit (the machine's, or the sandbox's own).
    assert held["inotify_instances"][1] == "EMFILE", held  # type: ignore[index]
    assert held["inotify_watches"][1] == "ENOSPC", held  # type: ignore[index]
    assert held["signals"][1] == "EAGAIN", held  # type: ignore[index]
    assert held["ptys"][1] == "ENOSPC", held  # type: ignore[index]
    everything = {"inotify_instance": 0, "inotify_watch": 0, "sigqueue": 0, "pty": 0}
    assert root == everything, root
    assert second.status is Status.OK, explain(second)
    assert json.loads(second.stdout) == everything, second.stdout


# -- socket buffers -------------------------------------------------------------------------------------------------

#: Queues data on its own loopback TCP connections, never reading it, until sends block, it has queued ``argv[1]``
#: bytes or it has no descriptor left; with ``argv[2]`` "free", closes them all and waits a while; prints how much it
#: queued.
_TCP_BUFFERS = """
import json, socket, sys, time
most, queued, chunk = int(sys.argv[1]), 0, b"x" * 65536
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(1024)
held = []
while queued < most:
    try:
        client = socket.create_connection(server.getsockname())
        held += [client, server.accept()[0]]
    except OSError:
        break
    client.setblocking(False)
    before = queued
    while queued < most:
        try:
            queued += client.send(chunk)
        except BlockingIOError:
            break
    if queued == before:
        break
if sys.argv[2] == "free":
    for each in held:
        each.close()
    time.sleep(0.3)
print(json.dumps({"queued": queued}))
"""
#: The same with UDP datagrams that sit in receive queues nobody reads, counted as the kernel does (/proc/net/udp).
_UDP_BUFFERS = """
import json, socket, sys, time
most, chunk = int(sys.argv[1]), b"x" * 60000
table = open("/proc/net/udp")
def queued():
    table.seek(0)
    return sum(int(line.split()[4].split(":")[1], 16) for line in table.read().splitlines()[1:])
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
held, total = [], 0
while total < most:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    held.append(receiver)
    for _ in range(8):
        sender.sendto(chunk, receiver.getsockname())
    if len(held) % 16 == 0:
        before, total = total, queued()
        if total <= before:
            break
total = queued()
if sys.argv[2] == "free":
    for each in held:
        each.close()
    time.sleep(0.3)
print(json.dumps({"queued": total}))
"""


@pytest.mark.parametrize("then", ["end", "free"])
@pytest.mark.parametrize("program", [_TCP_BUFFERS, _UDP_BUFFERS], ids=["tcp", "udp"])
def test_socket_buffers_count_against_the_memory_limit_and_in_the_report(program: str, then: str) -> None:
    # Socket buffers are kernel memory outside any process: on cgroup v1 the kernel counted them nowhere unless
    # asked, and a command limited to 64 MiB queued hundreds of MiB on its own loopback sockets, status ok, peak 5 MB.
    # On v1 the host sees them go past the limit: a command that went past it and then freed them, or ended, before
    # the host looked was reported ok (or by its own exit status) until the host read their peak.
    memory = 64 * MiB
    lim = limits(memory_bytes=memory, open_files=1024, timeout_s=20 * TIME_SCALE, cpu_time_s=10 * TIME_SCALE)

    async def attack() -> ExecResult:
        async with Sandbox(limits=lim, network="loopback") as sb:
            return await sb.exec(py(program, str(4 * memory), then))

    result = run(attack())
    assert result.peak_memory_bytes is not None, explain(result)
    if result.status is Status.MEMORY_LIMIT:  # killed for it: by the OOM killer (v2), or by the host (v1's sockets)
        # The charge that fails is not counted: the OOM killer's peak can stop a few pages short of the limit.
        assert result.peak_memory_bytes >= memory - MiB, result
        return
    assert result.status is Status.OK, explain(result)
    queued = json.loads(result.stdout)["queued"]
    # Stopped near the limit (the kernel lets a charge or two past it), and counted in the report.
    assert queued <= memory * 5 // 4, (queued, result)
    assert result.peak_memory_bytes >= queued, (queued, result)


def test_socket_buffers_freed_before_the_host_looked_went_past_the_limit_all_the_same() -> None:
    # The host looks at v1's socket counter every 50 ms at most: what went past the limit between two looks (a
    # command that freed its buffers, or ended, in time) must still count. Here no host looks while the program
    # runs, in a cgroup made as a sandbox's command's is; once it has ended, the host reads the limit passed.
    from rollbox.sandbox.namespaces._cgroup import CgroupTree

    tree = CgroupTree.detect()
    if tree.version != 1:
        pytest.skip("cgroup v2 charges socket buffers to the memory counter, whose limit the kernel keeps itself")
    memory = 64 * MiB
    cgroup = tree.cgroup(f"test-sockets-{os.getpid()}", sockets=True)
    cgroup.create()
    try:
        cgroup.set_limits(memory_bytes=memory, pids=64)
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_TCP_BUFFERS), str(4 * memory), "free"],
            preexec_fn=lambda: cgroup.add(os.getpid()),
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert json.loads(done.stdout)["queued"] > memory, done  # the kernel let it past the limit
        assert cgroup._v1_socket_bytes("usage_in_bytes") < memory  # freed: nothing over the limit now
        assert cgroup.sockets_over_limit()
    finally:
        cgroup.remove()


# -- what rollbox's own process would pass on ----------------------------------------------------------------------

#: What every process of a sandbox has, whatever rollbox's own process had (``agent.c``, sandbox_rlimits).
_SANDBOX_RLIMITS = {
    "Max core file size": ("1", "1"),
    "Max locked memory": (str(8 * MiB), str(8 * MiB)),
    "Max pending signals": ("4096", "4096"),
    "Max msgqueue size": ("0", "0"),
    "Max nice priority": ("0", "0"),
    "Max realtime priority": ("0", "0"),
}


def _loosen_own_rlimits() -> None:
    """In rollbox's process (a child of the test's, before it starts): every limit as high as this process may set
    it. Hard limits rise only with CAP_SYS_RESOURCE, which some containers drop; soft ones rise to the hard."""
    for name in ("RTPRIO", "NICE", "MEMLOCK", "SIGPENDING", "MSGQUEUE", "CORE", "STACK", "NPROC"):
        number = getattr(resource, f"RLIMIT_{name}")
        for wanted in ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), (resource.getrlimit(number)[1],) * 2):
            try:
                resource.setrlimit(number, wanted)
                break
            except (OSError, ValueError):
                continue


def _limits_table(text: str) -> dict[str, tuple[str, str]]:
    rows = [line.split("  ") for line in text.splitlines()[1:]]
    return {cells[0]: tuple(cell.strip() for cell in cells[1:] if cell.strip())[:2] for cells in rows}  # type: ignore[misc]


def test_rlimits_of_rollboxs_own_process_never_reach_the_command() -> None:
    # A raised RTPRIO would let the program take a CPU with real-time scheduling, a raised MEMLOCK, SIGPENDING or
    # MSGQUEUE pin more kernel memory, a core limit other than 1 have the host's core_pattern helper run.
    done = subprocess.run(
        [sys.executable, "-m", "rollbox", "exec", "--json", "--", "sh", "-c", "cat /proc/self/limits"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        preexec_fn=_loosen_own_rlimits,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "ok", result
    table = _limits_table(result["stdout"])
    assert {name: table[name] for name in _SANDBOX_RLIMITS} == _SANDBOX_RLIMITS, result["stdout"]
    assert table["Max stack size"][0] == str(8 * MiB), result["stdout"]


# -- the host's core dump helper -----------------------------------------------------------------------------------


@pytest.fixture
def core_helper_marks() -> Iterator[Path]:
    """A pipe ``core_pattern`` whose helper (run by the kernel, as root, on the host) leaves a file named after the
    crashing process's uid and pid; the machine's own pattern is back when the test ends, whatever happens."""
    pattern = Path("/proc/sys/kernel/core_pattern")
    marks = Path(tempfile.mkdtemp(prefix="rollbox-core-marks-", dir="/run"))
    try:
        original = pattern.read_text()
        try:
            pattern.write_text(f"|{shutil.which('touch')} {marks}/%u-%P")
        except OSError as exc:
            pytest.skip(f"kernel.core_pattern cannot be set here ({exc.strerror})")
        try:
            yield marks
        finally:
            pattern.write_text(original)
    finally:
        shutil.rmtree(marks, ignore_errors=True)


def _marks_of(marks: Path, uid: int, *, wait_s: float) -> list[str]:
    """The helper's marks for crashes of ``uid``, waiting up to ``wait_s`` for one to appear."""
    deadline = time.monotonic() + wait_s
    while True:
        found = [p.name for p in marks.iterdir() if p.name.split("-")[0] == str(uid)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


#: Lowers RLIMIT_CORE (to 0, which has the kernel run a pipe helper) where it can, ignoring a refusal, then crashes.
_LOWER_THEN = (
    "import os, resource\ntry:\n    resource.prlimit({pid}, resource.RLIMIT_CORE, (0, 0))\nexcept OSError:\n    pass\n"
)
_CRASHES = [
    py("import os; os.abort()"),
    ["sh", "-c", "kill -SEGV $$"],
    py("import ctypes; ctypes.string_at(0)"),
    py(_LOWER_THEN.format(pid=0) + "os.abort()"),
    py(_LOWER_THEN.format(pid=1) + "os.kill(os.getpid(), 3)"),  # the agent's, which the command inherits, then SIGQUIT
]


def test_a_crash_inside_never_runs_the_hosts_core_dump_helper(core_helper_marks: Path) -> None:
    # The control: a crash on the host with RLIMIT_CORE 0 does run the helper (the kernel ignores the limit for a
    # pipe, but for the value 1), so that this test can fail.
    subprocess.run(
        [sys.executable, "-c", "import os, resource; resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); os.abort()"],
        check=False,
    )
    assert _marks_of(core_helper_marks, os.getuid(), wait_s=5), "the host's crash never ran the helper"

    async def crash() -> tuple[list[ExecResult], int]:
        async with Sandbox(limits=limits(timeout_s=20 * TIME_SCALE, cpu_time_s=10 * TIME_SCALE)) as sb:
            results = [await sb.exec(argv) for argv in _CRASHES]
            await sb.write_file("crash.py", "import os\nos.abort()\n")
            results.append(await sb.exec(["python3", "crash.py"], warm_python=True))
            return results, sb._impl.uid  # type: ignore[union-attr]

    results, uid = run(crash())
    for result in results:
        assert result.status is Status.SIGNALED, explain(result)
    assert _marks_of(core_helper_marks, uid, wait_s=1) == []
