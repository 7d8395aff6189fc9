"""Attacks on the sandbox, run for real: bombs, floods, escapes, and the host file API.

Every test runs hostile code in a real sandbox with small limits and asserts the exact status the attack
must end with, and, where the attack aims outside the sandbox, that the host is untouched. Run the module
under the resource guard, so that a broken sandbox fails a test instead of taking the machine down::

    python scripts/guard.py --memory 6G --pids 4096 -- python -m pytest tests/test_attacks.py

"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

import rollbox
from conftest import TIME_SCALE, own_sandbox_processes
from oci_images import host_image
from rollbox import ExecResult, Limits, Sandbox, SandboxPool, Status

if os.geteuid() != 0:
    pytest.skip("the attacks need the namespaces backend, which needs root", allow_module_level=True)

pytestmark = pytest.mark.adversarial

KiB = 1024
MiB = 1024 * KiB
PROJECT_ROOT = Path(__file__).resolve().parent.parent

#: Small limits, so that every attack ends fast. Memory is well above the disk limit, because tmpfs pages
#: written in /workspace count against the memory limit too. The tests of the time limits set their own.
SMALL = Limits(
    timeout_s=3 * TIME_SCALE,
    cpu_time_s=1 * TIME_SCALE,
    memory_bytes=96 * MiB,
    pids=32,
    output_bytes=64 * KiB,
    disk_bytes=16 * MiB,
    open_files=256,
)

T = TypeVar("T")


# --------------------------------------------------------------------------------------------- helpers


#: Lowers the agent's CPU limit: the kernel kills it at its next tick (here, reaping the orphans a loop leaves).
CRIPPLE = "python3 -c 'import resource; resource.prlimit(1, resource.RLIMIT_CPU, (0, 0))'"


def limits(**changes: Any) -> Limits:
    """``SMALL`` with some fields changed."""
    return dataclasses.replace(SMALL, **changes)


def py(code: str, *args: str) -> list[str]:
    """argv that runs Python ``code`` (dedented) inside the sandbox."""
    return ["python3", "-c", textwrap.dedent(code), *args]


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def run(coro: Awaitable[T]) -> T:
    """Run a coroutine to its end (pytest-asyncio is deliberately not used)."""

    async def main() -> T:
        return await coro

    return asyncio.run(main())


#: Every attack made through ``with_sandbox`` runs three times: in a fresh sandbox, through the warm path, in a
#: pooled sandbox that an earlier user dirtied (files everywhere, a daemon, IPC objects) and that the pool then reset,
#: and in a fresh sandbox whose root is an image (of the host's own programs, see ``oci_images.host_image``), not
#: the host's /usr.
SANDBOX_PATHS = ("fresh", "warm", "image")
_path = {"current": "fresh"}


@pytest.fixture(autouse=True, params=SANDBOX_PATHS)
def sandbox_path(request: pytest.FixtureRequest) -> Iterator[str]:
    _path["current"] = request.param
    yield request.param
    _path["current"] = "fresh"


#: For a test that makes its sandboxes itself instead of through ``with_sandbox``, which alone takes the warm
#: path: it runs once.
own_sandboxes = pytest.mark.parametrize("sandbox_path", ["fresh"], indirect=True)


_DIRTY = (
    "echo left > /workspace/left; echo left > /tmp/left; echo left > /dev/shm/left; mkdir -p /workspace/d;"
    " chmod 000 /workspace/d; (sleep 1000 &) ;"
    " ipcmk -M 4096 >/dev/null"  # a SysV segment, without starting Python: the VM's emulation is slow enough
)


def with_sandbox(body: Callable[[Sandbox], Awaitable[T]], *, limits: Limits = SMALL, network: str = "none") -> T:
    """Run ``body(sb)`` in a fresh sandbox, or in a reused one (see ``SANDBOX_PATHS``)."""

    async def main() -> T:
        if _path["current"] in ("fresh", "image"):
            image = host_image() if _path["current"] == "image" else None
            async with Sandbox(limits=limits, network=network, image=image) as sb:
                return await body(sb)
        async with SandboxPool(size=1, limits=limits, network=network) as pool:
            async with pool.sandbox() as sb:
                assert (await sb.exec(["sh", "-c", _DIRTY])).status is Status.OK
            async with pool.sandbox() as sb:
                return await body(sb)

    return asyncio.run(main())


def exec_once(argv: Sequence[str], *, limits: Limits = SMALL, network: str = "none", **kw: Any) -> ExecResult:
    """One command in a fresh sandbox."""

    async def body(sb: Sandbox) -> ExecResult:
        return await sb.exec(argv, **kw)

    return with_sandbox(body, limits=limits, network=network)


def exec_then_alive(argv: Sequence[str], *, limits: Limits = SMALL, **kw: Any) -> ExecResult:
    """Run an attack, then check that the same sandbox still runs an ordinary command; return the attack's result."""

    async def body(sb: Sandbox) -> ExecResult:
        result = await sb.exec(argv, **kw)
        await assert_alive(sb)
        return result

    return with_sandbox(body, limits=limits)


async def assert_alive(sb: Sandbox) -> None:
    after = await sb.exec(["sh", "-c", "echo alive"])
    assert after.status is Status.OK, after
    assert after.stdout == b"alive\n"


def explain(result: ExecResult) -> str:
    return f"{result.status} exit={result.exit_code} signal={result.signal} stderr={result.stderr[-600:]!r}"


async def leftover_processes(sb: Sandbox) -> list[str]:
    """Command lines of every process in the sandbox except its init, its agent and the probe itself."""
    probe = await sb.exec(
        py(
            """
            import json, os
            found = []
            for name in os.listdir("/proc"):
                if name.isdigit() and int(name) not in (1, 2, os.getpid()):
                    try:
                        found.append(open(f"/proc/{name}/cmdline", "rb").read().decode(errors="replace"))
                    except OSError:
                        pass
            print(json.dumps(found))
            """
        )
    )
    assert probe.status is Status.OK, explain(probe)
    found: list[str] = json.loads(probe.stdout)
    return found


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_never_accepted(listeners: Sequence[socket.socket]) -> None:
    """No connection ever reached these host listeners (checked without blocking)."""
    readable, _, _ = select.select(list(listeners), [], [], 0.2)
    assert readable == [], f"a connection reached the host: {readable}"
    for listener in listeners:
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()


@pytest.fixture(autouse=True)
def nothing_survives_the_sandbox() -> Iterator[None]:
    """After each attack: no process of any sandbox this test made is still alive (closing waits for them)."""
    yield
    assert own_sandbox_processes() == set()


@pytest.fixture
def host_sleep() -> Iterator[subprocess.Popen[bytes]]:
    """A ``sleep 60`` on the host that the sandbox will try to kill; killed (by pid) and reaped afterwards."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()


# ------------------------------------------------------------------------------------------ fork bombs


def test_python_fork_bomb_hits_pids_limit() -> None:
    result = exec_then_alive(
        py(
            """
            import os
            while True:
                try:
                    os.fork()
                except OSError:
                    pass
            """
        )
    )
    assert result.status is Status.PIDS_LIMIT, explain(result)
    assert result.wall_s < 2.5 * TIME_SCALE  # Python's start-up included


def test_shell_fork_bomb_hits_pids_limit() -> None:
    # The shell that plants the bomb stays: alone, `b` returns at once, the command ends, and its processes
    # are killed, before or after they reach the limit (status ok or pids_limit, by a race).
    result = exec_then_alive(sh("b() { b | b & }; b; sleep 10"))
    assert result.status is Status.PIDS_LIMIT, explain(result)
    assert result.wall_s < 2.5 * TIME_SCALE


def test_thread_bomb_hits_pids_limit() -> None:
    result = exec_then_alive(
        py(
            """
            import threading, time
            while True:
                try:
                    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
                except RuntimeError:
                    pass
            """
        )
    )
    assert result.status is Status.PIDS_LIMIT, explain(result)


# ---------------------------------------------------------------------------------------- memory bombs

_MEMORY_BOMB = "chunks = []\nwhile True:\n    chunks.append(b'x' * (1 << 20))\n"
# Room in time, so that the memory limit is what stops the bomb even on an emulated machine (the cgroup v2 run
# of scripts/vm-cgroup2), where Python's start-up alone takes a second of CPU.
_BOMB_LIMITS = limits(memory_bytes=64 * MiB, cpu_time_s=10, timeout_s=20)


def test_memory_bomb_in_main_process_hits_memory_limit() -> None:
    result = exec_then_alive(py(_MEMORY_BOMB), limits=_BOMB_LIMITS)
    assert result.status is Status.MEMORY_LIMIT, explain(result)
    assert result.peak_memory_bytes is not None
    assert result.peak_memory_bytes <= 64 * MiB + 4 * MiB


def test_memory_bomb_in_grandchild_hits_memory_limit_while_parent_waits() -> None:
    # The parent survives the OOM kill of its grandchild and exits 0: the status still says memory_limit.
    result = exec_then_alive(
        py(
            f"""
            import shlex, subprocess
            inner = {_MEMORY_BOMB!r}
            done = subprocess.run(["sh", "-c", "python3 -c " + shlex.quote(inner)])
            print("grandchild ended with", done.returncode)
            """
        ),
        limits=_BOMB_LIMITS,
    )
    assert result.status is Status.MEMORY_LIMIT, explain(result)
    assert b"grandchild ended with" in result.stdout


# ------------------------------------------------------------------------------------------ time limits


def test_busy_loop_hits_cpu_limit() -> None:
    result = exec_once(py("while True: pass"), limits=limits(cpu_time_s=1, timeout_s=5 * TIME_SCALE))
    assert result.status is Status.CPU_TIME_LIMIT, explain(result)
    assert result.cpu_s >= 0.9  # RLIMIT_CPU (tick-based) may fire just before the cgroup counts a second
    assert result.wall_s < 3.0 * TIME_SCALE  # Python's start-up included, not all of it CPU time


def test_busy_loop_in_four_processes_hits_cpu_limit_fast() -> None:
    # Four spinning processes burn the summed 1 s of CPU in about half a second on two cores; RLIMIT_CPU
    # (per process) alone would let them run for a whole second of wall time each.
    result = exec_once(
        py(
            """
            import os
            for _ in range(3):
                if os.fork() == 0:
                    break
            while True:
                pass
            """
        ),
        limits=limits(cpu_time_s=1, timeout_s=10 * TIME_SCALE),
    )
    assert result.status is Status.CPU_TIME_LIMIT, explain(result)
    assert result.cpu_s >= 0.9
    assert result.wall_s < 3.0 * TIME_SCALE


@pytest.mark.parametrize(
    "argv",
    [["sleep", "1000"], py("import time; time.sleep(1000)")],
    ids=["sleep", "python-sleep"],
)
def test_sleeper_hits_wall_timeout(argv: list[str]) -> None:
    started = time.monotonic()
    result = exec_once(argv, limits=limits(timeout_s=1.5))
    assert result.status is Status.TIMEOUT, explain(result)
    # The limit, then the time to kill and reap, slower where emulated; the sandbox's start-up, slower still.
    assert 1.5 <= result.wall_s < 1.5 + 1.0 * TIME_SCALE
    assert time.monotonic() - started < 1.5 + 2.5 * TIME_SCALE


def test_busy_loop_with_cpu_limit_above_wall_limit_times_out() -> None:
    result = exec_once(py("while True: pass"), limits=limits(cpu_time_s=10, timeout_s=1.0))
    assert result.status is Status.TIMEOUT, explain(result)
    assert 1.0 <= result.wall_s < 1.0 + 1.0 * TIME_SCALE


# ------------------------------------------------------------------------------------------ output floods

_CAP = SMALL.output_bytes


def _assert_flood(result: ExecResult, stream: str, expected_prefix: bytes) -> None:
    assert result.status is Status.OUTPUT_LIMIT, explain(result)
    kept = result.stdout if stream == "stdout" else result.stderr
    other = result.stderr if stream == "stdout" else result.stdout
    assert len(kept) == _CAP
    assert kept == expected_prefix[:_CAP]
    assert getattr(result, f"{stream}_truncated") is True
    other_stream = "stderr" if stream == "stdout" else "stdout"
    assert getattr(result, f"{other_stream}_truncated") is False
    assert other == b""
    json.dumps(result.to_json())


@pytest.mark.parametrize(
    ("stream", "argv", "unit"),
    [
        ("stdout", ["yes"], b"y\n"),
        ("stderr", sh("yes >&2"), b"y\n"),
        ("stdout", py("import sys\nwhile True: sys.stdout.write('spam\\n')"), b"spam\n"),
        ("stderr", py("import sys\nwhile True: sys.stderr.write('spam\\n')"), b"spam\n"),
        ("stdout", py("import sys; sys.stdout.write('x' * (8 << 20))"), b"x"),
        ("stdout", py("import os\nwhile True: os.write(1, b'\\xff\\xfe\\xc3')"), b"\xff\xfe\xc3"),
    ],
    ids=["yes-stdout", "yes-stderr", "python-stdout", "python-stderr", "one-huge-line", "invalid-utf8"],
)
def test_output_flood_hits_output_limit(stream: str, argv: list[str], unit: bytes) -> None:
    result = exec_once(argv)
    _assert_flood(result, stream, unit * (_CAP // len(unit) + 1))


def test_output_of_exactly_the_cap_is_kept_whole() -> None:
    result = exec_once(py(f"import os, sys; sys.stdout.buffer.write(b'a' * {_CAP})"))
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b"a" * _CAP
    assert not result.stdout_truncated


def test_output_of_one_byte_over_the_cap_is_cut_at_the_cap() -> None:
    result = exec_once(py(f"import sys; sys.stdout.buffer.write(b'a' * {_CAP + 1})"))
    _assert_flood(result, "stdout", b"a" * _CAP)


def test_invalid_utf8_output_serializes_to_json() -> None:
    result = exec_once(py("import os; os.write(1, b'ok \\xff\\xc3'); os.write(2, b'\\x80\\x00end')"))
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b"ok \xff\xc3"
    assert result.stderr == b"\x80\x00end"
    encoded = json.loads(json.dumps(result.to_json()))
    assert encoded["status"] == "ok"
    assert encoded["stdout"].startswith("ok ")


# ----------------------------------------------------------------------------------------------- disk


@pytest.mark.parametrize("directory", ["/workspace", "/tmp", "/dev/shm"])
def test_dd_filling_writable_dir_hits_disk_limit(directory: str) -> None:
    result = exec_then_alive(["dd", "if=/dev/zero", f"of={directory}/fill", "bs=1M", "count=64"])
    assert result.status is Status.DISK_LIMIT, explain(result)


def test_python_filling_tmp_hits_disk_limit() -> None:
    result = exec_then_alive(
        py(
            """
            with open("/tmp/fill", "wb") as f:
                while True:
                    f.write(b"x" * (1 << 20))
                    f.flush()
            """
        )
    )
    assert result.status is Status.DISK_LIMIT, explain(result)


def test_many_empty_files_exhaust_inodes_and_hit_disk_limit() -> None:
    result = exec_then_alive(
        py(
            """
            import os
            os.mkdir("/workspace/many")
            for i in range(1_000_000):
                open(f"/workspace/many/{i}", "w").close()
            """
        ),
        limits=limits(timeout_s=10, cpu_time_s=5),
    )
    assert result.status is Status.DISK_LIMIT, explain(result)


#: How long each of these holds the full disk before it frees it: a few of the host's looks (every 50 ms at most).
_HOLD_S = 0.3 * TIME_SCALE


@pytest.mark.parametrize(
    "argv",
    [
        sh(f"dd if=/dev/zero of=/tmp/fill bs=1M 2>/dev/null; sleep {_HOLD_S}; rm /tmp/fill"),
        py(
            f"""
            import os, time
            try:
                with open("/dev/shm/fill", "wb") as f:
                    while True:
                        f.write(b"x" * (1 << 20))
                        f.flush()
            except OSError:
                time.sleep({_HOLD_S})
            os.unlink("/dev/shm/fill")
            """
        ),
        py(
            f"""
            import os, shutil, time
            os.mkdir("/workspace/many")
            try:
                for i in range(1_000_000):
                    open(f"/workspace/many/{{i}}", "w").close()
            except OSError:
                time.sleep({_HOLD_S})
            shutil.rmtree("/workspace/many")
            """
        ),
    ],
    ids=["dd-then-rm", "python-then-unlink", "inodes-then-rmtree"],
)
def test_a_disk_filled_then_freed_before_the_end_is_still_disk_limit(argv: list[str]) -> None:
    # The program hit the limit and cleaned up: the limit was still hit, and the status says so (not ok).
    result = exec_then_alive(argv, limits=limits(timeout_s=20 * TIME_SCALE, cpu_time_s=10 * TIME_SCALE))
    assert result.status is Status.DISK_LIMIT, explain(result)


def test_dd_beyond_file_size_limit_hits_disk_limit() -> None:
    result = exec_then_alive(
        ["dd", "if=/dev/zero", "of=/workspace/big", "bs=64K", "count=64"],
        limits=limits(file_size_bytes=1 * MiB),
    )
    assert result.status is Status.DISK_LIMIT, explain(result)
    assert result.signal == signal.SIGXFSZ


def test_python_beyond_file_size_limit_hits_disk_limit() -> None:
    result = exec_then_alive(
        py("open('/workspace/big', 'wb').write(b'x' * (2 << 20))"),
        limits=limits(file_size_bytes=1 * MiB),
    )
    assert result.status is Status.DISK_LIMIT, explain(result)


def test_dev_is_read_only_so_it_cannot_bypass_the_disk_limit() -> None:
    async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult]:
        # /dev is in the root's tmpfs, outside the disk limit: writing there must fail outright.
        fill = await sb.exec(sh("for i in 1 2 3 4; do dd if=/dev/zero of=/dev/fill$i bs=1M count=8 || exit 1; done"))
        seen = await sb.exec(sh("ls /dev/fill1"))
        return fill, seen

    fill, seen = with_sandbox(body)
    assert fill.status is Status.NONZERO_EXIT, explain(fill)
    assert b"Read-only file system" in fill.stderr
    assert seen.status is Status.NONZERO_EXIT, seen.stdout


# -------------------------------------------------------------------------------------------- network

_CONNECT = """
import json, socket, sys
port, path, abstract = int(sys.argv[1]), sys.argv[2], sys.argv[3]
results = {}
def attempt(name, family, address):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        results[name] = f"socket: errno {e.errno}"
        return
    s.settimeout(1)
    try:
        s.connect(address)
        results[name] = "connected"
    except OSError as e:
        results[name] = f"connect: errno {e.errno}"
    finally:
        s.close()
attempt("tcp", socket.AF_INET, ("127.0.0.1", port))
attempt("tcp-any", socket.AF_INET, ("0.0.0.0", port))
attempt("tcp6", socket.AF_INET6, ("::1", port))
attempt("unix", socket.AF_UNIX, path)
attempt("abstract", socket.AF_UNIX, "\\0" + abstract)
print(json.dumps(results))
sys.exit(1 if "connected" in results.values() else 0)
"""


@pytest.mark.parametrize("network", ["none", "loopback"])
def test_sandbox_cannot_reach_host_listeners(network: str) -> None:
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    port = tcp.getsockname()[1]
    tempdir = tempfile.mkdtemp(prefix="rollbox-attack-")
    path = os.path.join(tempdir, "server.sock")
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(path)
    unix.listen(8)
    abstract_name = f"rollbox-attack-{secrets.token_hex(8)}"
    abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    abstract.bind("\0" + abstract_name)
    abstract.listen(8)
    listeners = [tcp, unix, abstract]
    try:
        result = exec_once(py(_CONNECT, str(port), path, abstract_name), network=network)
        assert result.status is Status.OK, f"{explain(result)} {result.stdout!r}"
        attempts = json.loads(result.stdout)
        assert set(attempts) == {"tcp", "tcp-any", "tcp6", "unix", "abstract"}
        assert "connected" not in attempts.values(), attempts
        if network == "none":
            assert attempts["tcp"].startswith("socket:"), attempts  # AF_INET refused outright
        assert_never_accepted(listeners)
    finally:
        for listener in listeners:
            listener.close()
        shutil.rmtree(tempdir, ignore_errors=True)


def test_loopback_server_and_client_inside_one_command_work() -> None:
    code = """
        import socket, threading
        for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
            server = socket.socket(family, socket.SOCK_STREAM)
            server.bind((host, 0))
            server.listen(1)
            def serve():
                conn, _ = server.accept()
                conn.sendall(conn.recv(100).upper())
                conn.close()
            thread = threading.Thread(target=serve)
            thread.start()
            client = socket.create_connection((host, server.getsockname()[1]), timeout=2)
            client.sendall(b"ping")
            print(client.recv(100).decode())
            thread.join()
        """
    result = exec_once(py(code), network="loopback")
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b"PING\nPING\n"


def test_no_network_refuses_inet_sockets_even_for_loopback() -> None:
    result = exec_once(py("import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM)"))
    assert result.status is Status.NONZERO_EXIT, explain(result)
    assert b"PermissionError" in result.stderr


# ------------------------------------------------------------------------------------------ host secrets

_SNOOP = """
import json, os, sys
request = json.loads(sys.stdin.read())
token, paths = request["token"], request["paths"]
found = []
for path in paths:
    try:
        with open(path) as f:
            f.read()
        found.append(["open", path])
    except OSError:
        pass
    try:
        if os.path.basename(path) in os.listdir(os.path.dirname(path)):
            found.append(["listdir", path])
    except OSError:
        pass
names = [n for n in os.listdir("/proc") if n.isdigit()]
for env in [f"/proc/{n}/environ" for n in names] + ["/proc/self/environ", "/proc/1/environ"]:
    try:
        with open(env, "rb") as f:
            if token.encode() in f.read():
                found.append(["environ", env])
    except OSError:
        pass
if any(token in value for value in os.environ.values()) or request["variable"] in os.environ:
    found.append(["os.environ", request["variable"]])
cmdlines = []
for n in names:
    try:
        with open(f"/proc/{n}/cmdline", "rb") as f:
            cmdlines.append(f.read().decode(errors="replace"))
    except OSError:
        pass
print(json.dumps({"found": found, "cmdlines": cmdlines, "pids": names}))
"""


def test_host_secrets_are_invisible(monkeypatch: pytest.MonkeyPatch) -> None:
    token = secrets.token_hex(16)  # the secret: in the files' contents and the variable's value
    name = f"rollbox-attack-secret-{secrets.token_hex(8)}"
    planted = [
        Path("/root") / name,
        Path("/home") / name,
        Path(tempfile.gettempdir()) / name,
        Path("/var/tmp") / name,
        PROJECT_ROOT / name,
    ]
    variable = f"ROLLBOX_ATTACK_SECRET_{token[:8].upper()}"
    monkeypatch.setenv(variable, token)
    try:
        for path in planted:
            path.write_text(token)

        async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult]:
            request = json.dumps({"token": token, "paths": [str(p) for p in planted], "variable": variable})
            snoop = await sb.exec(py(_SNOOP), stdin=request)
            dirs = " ".join(sorted({shlex.quote(str(p.parent)) for p in planted}))
            files = " ".join(shlex.quote(str(p)) for p in planted)
            shell = await sb.exec(sh(f"cat {files}; ls -a {dirs}; env; cat /proc/1/environ /proc/self/environ"))
            return snoop, shell

        snoop, shell = with_sandbox(body)
    finally:
        for path in planted:
            path.unlink(missing_ok=True)

    assert snoop.status is Status.OK, explain(snoop)
    report = json.loads(snoop.stdout)
    assert report["found"] == []
    assert token.encode() not in shell.stdout + shell.stderr
    assert name.encode() not in shell.stdout  # no listing shows the planted files
    # Its own pid namespace: none of the host's processes, the test's own among them, is visible.
    own_cmdline = Path("/proc/self/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    assert all("pytest" not in c for c in report["cmdlines"]), report["cmdlines"]
    assert own_cmdline not in [c.replace("\0", " ").strip() for c in report["cmdlines"]]
    assert len(report["pids"]) <= 4, report["cmdlines"]


# ------------------------------------------------------------------------------------- system directories


@pytest.mark.parametrize("directory", ["/usr", "/usr/bin", "/etc", "/bin", "/", "/opt", "/work"])
def test_writing_into_system_directory_fails(directory: str) -> None:
    name = f"rollbox-attack-probe-{secrets.token_hex(6)}"
    target = os.path.join(directory, name)
    passwd = sha256(Path("/etc/passwd"))
    try:
        result = exec_then_alive(sh(f"echo pwned > {target} || mkdir {target} || exit 3; exit 0"))
        assert result.status is Status.NONZERO_EXIT, explain(result)
        assert result.exit_code == 3
        assert not os.path.lexists(target)
    finally:
        if os.path.isdir(target) and not os.path.islink(target):
            os.rmdir(target)
        elif os.path.lexists(target):
            os.unlink(target)
    assert sha256(Path("/etc/passwd")) == passwd


def test_appending_to_etc_passwd_fails_and_host_copy_is_unchanged() -> None:
    before = sha256(Path("/etc/passwd"))
    result = exec_then_alive(sh("echo 'evil::0:0::/:/bin/sh' >> /etc/passwd"))
    assert result.status is Status.NONZERO_EXIT, explain(result)
    assert sha256(Path("/etc/passwd")) == before


# --------------------------------------------------------------------------------------- host processes


def test_killing_a_host_process_fails(host_sleep: subprocess.Popen[bytes]) -> None:
    pid = host_sleep.pid
    result = exec_then_alive(
        py(
            """
            import os, signal, sys
            try:
                os.kill(int(sys.argv[1]), signal.SIGKILL)
            except OSError as e:
                print("refused", e.errno)
                sys.exit(3)
            print("killed")
            """,
            str(pid),
        )
    )
    assert result.status is Status.NONZERO_EXIT, explain(result)
    assert result.exit_code == 3
    time.sleep(0.1)
    assert host_sleep.poll() is None, "the sandbox killed a host process"


def test_kill_command_against_a_host_pid_fails(host_sleep: subprocess.Popen[bytes]) -> None:
    result = exec_then_alive(sh(f"kill -9 {host_sleep.pid}"))
    assert result.status is Status.NONZERO_EXIT, explain(result)
    time.sleep(0.1)
    assert host_sleep.poll() is None, "the sandbox killed a host process"


# --------------------------------------------------------------------------------------------- daemons

_DOUBLE_FORK_DAEMON = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        while True:
            time.sleep(1)
    os._exit(0)
time.sleep(0.1)
"""


@pytest.mark.parametrize(
    "argv",
    [
        sh("(sleep 1000 &)"),
        py(_DOUBLE_FORK_DAEMON),
        sh("nohup sleep 1000 >/dev/null 2>&1 &"),
        sh("setsid sleep 1000 </dev/null >/dev/null 2>&1 &"),
    ],
    ids=["subshell", "double-fork-setsid", "nohup", "setsid"],
)
def test_daemon_dies_with_its_command(argv: list[str]) -> None:
    async def body(sb: Sandbox) -> tuple[ExecResult, list[str]]:
        result = await sb.exec(argv, timeout_s=10)
        return result, await leftover_processes(sb)

    result, leftovers = with_sandbox(body)
    assert result.status is Status.OK, explain(result)
    assert result.wall_s < 2.0 * TIME_SCALE  # Python's start-up included
    assert leftovers == []


def test_daemon_writing_a_file_stops_when_its_command_ends() -> None:
    code = """
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                devnull = os.open("/dev/null", os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                fd = os.open("/workspace/ticks", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                while True:
                    os.write(fd, b"tick\\n")
                    time.sleep(0.05)
            os._exit(0)
        time.sleep(0.3)
        """

    async def body(sb: Sandbox) -> tuple[ExecResult, bytes, bytes]:
        result = await sb.exec(py(code))
        first = await sb.read_file("ticks")
        await asyncio.sleep(0.4)
        return result, first, await sb.read_file("ticks")

    result, first, second = with_sandbox(body)
    assert result.status is Status.OK, explain(result)
    assert first.count(b"tick\n") >= 2
    assert second == first


# ------------------------------------------------------------------------------------ privileged operations

_PTRACE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH = 16
sys.exit(0 if libc.ptrace(PTRACE_ATTACH, 1, 0, 0) == 0 else 1)
"""

_UNSHARE_CTYPES = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
sys.exit(0 if libc.unshare(0x10000000 | 0x40000000) == 0 else 1)  # CLONE_NEWUSER | CLONE_NEWNET
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["mount", "-t", "tmpfs", "none", "/workspace"],
        sh("unshare -U true") if shutil.which("unshare") else py(_UNSHARE_CTYPES),
        sh("unshare -n true") if shutil.which("unshare") else py(_UNSHARE_CTYPES),
        py(_UNSHARE_CTYPES),
        ["chroot", "/", "/bin/true"],
        py("import os; os.setuid(0)"),
        py(_PTRACE),
        ["cat", "/proc/kcore"],
        sh("echo 3 > /proc/sys/vm/drop_caches"),
        sh("echo 1 > /proc/sys/kernel/sysrq"),
    ],
    ids=[
        "mount",
        "unshare-user",
        "unshare-net",
        "unshare-ctypes",
        "chroot",
        "setuid0",
        "ptrace-attach",
        "read-kcore",
        "write-proc-sys-vm",
        "write-proc-sys-kernel",
    ],
)
def test_privileged_operation_fails_and_sandbox_survives(argv: list[str]) -> None:
    result = exec_then_alive(argv)
    assert result.status is Status.NONZERO_EXIT, explain(result)


#: Stops and kills the agent, then every other process it sees, one by one: never `kill -1`, a broadcast that,
#: without a pid namespace, would reach every host process of the sandbox's uid. It refuses (exit 3) unless its
#: parent, the agent, is pid 1: then the pids it names are its own namespace's.
_KILL_EVERY_OTHER = (
    "[ $PPID = 1 ] || exit 3; kill -STOP 1; kill -9 1; kill -9 $PPID;"
    " for p in /proc/[0-9]*; do [ ${p#/proc/} = $$ ] || kill -9 ${p#/proc/}; done; sleep 0.2; echo still here"
)


#: Sends pid 1 SIGCHLD every way a program can, in a loop: directly (the kernel drops all else it sends pid 1),
#: through a pipe's owner signal (F_SETOWN, F_SETSIG), and by stopping and continuing an orphan of pid 1's.
_SIGCHLD_FLOOD = """
import fcntl, os, signal, time
r, w = os.pipe()
fcntl.fcntl(r, fcntl.F_SETOWN, 1)
fcntl.fcntl(r, 10, signal.SIGCHLD)  # F_SETSIG
fcntl.fcntl(r, fcntl.F_SETFL, os.O_ASYNC | os.O_NONBLOCK)
feed, orphan = os.pipe()
if os.fork() == 0:
    if os.fork() == 0:
        os.write(orphan, b"%d" % os.getpid())
        signal.pause()  # an orphan: pid 1's child once its parent has gone
    os._exit(0)
os.wait()
grandchild = int(os.read(feed, 32))
end = time.monotonic() + 1.0
while time.monotonic() < end:
    os.kill(1, signal.SIGCHLD)
    os.write(w, b"x")
    os.read(r, 1)
    for stop in (signal.SIGSTOP, signal.SIGCONT):
        try:
            os.kill(grandchild, stop)
        except ProcessLookupError:
            pass
"""


def test_a_sigchld_flood_costs_the_agent_almost_nothing() -> None:
    # The agent waits for SIGCHLD (its children's ends); every other signal sent to pid 1 the kernel drops. A
    # flood made it burn as much CPU as the flood's own, outside the command's accounting.
    def agent_cpu_s(pid: int) -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime

    async def body(sb: Sandbox) -> tuple[ExecResult, float]:
        await sb.exec(["true"])
        agent = sb._impl.agent.pid  # type: ignore[union-attr]
        before = agent_cpu_s(agent)
        result = await sb.exec(py(_SIGCHLD_FLOOD))
        return result, agent_cpu_s(agent) - before

    result, agent_s = with_sandbox(body, limits=limits(cpu_time_s=5 * TIME_SCALE, timeout_s=10 * TIME_SCALE))
    assert result.status is Status.OK and result.cpu_s > 0.5, explain(result)
    assert agent_s < result.cpu_s / 10, (agent_s, result.cpu_s)


#: Lowers what a program can lower about its helper (the agent, pid 1, or the zygote, its parent when warm), all
#: of which a forked command inherits: an address-space limit, the priority, the CPUs it may run on.
_CRIPPLE_HELPER = """
import os, resource, sys
helper = 1 if sys.argv[1] == "agent" else os.getppid()
resource.prlimit(helper, resource.RLIMIT_AS, (200 << 20, 200 << 20))
os.setpriority(os.PRIO_PROCESS, helper, 19)
os.sched_setaffinity(helper, {min(os.sched_getaffinity(helper))})
"""
_STANDING = """
import os, resource
print(resource.getrlimit(resource.RLIMIT_AS), os.getpriority(os.PRIO_PROCESS, 0), len(os.sched_getaffinity(0)))
"""


@pytest.mark.parametrize("helper", ["agent", "zygote"])
def test_a_helper_crippled_from_inside_is_replaced_before_the_next_command(helper: str) -> None:
    warm = helper == "zygote"

    async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult, ExecResult]:
        await sb.write_file("cripple.py", textwrap.dedent(_CRIPPLE_HELPER))
        await sb.write_file("standing.py", _STANDING)
        pristine = await sb.exec(["python3", "standing.py"], warm_python=warm)
        crippled = await sb.exec(["python3", "cripple.py", helper], warm_python=warm)
        return pristine, crippled, await sb.exec(["python3", "standing.py"], warm_python=warm)

    pristine, crippled, after = with_sandbox(body)
    assert pristine.ok and crippled.ok, (explain(pristine), explain(crippled))
    # The next command runs as the first did: on a new helper, never with what the program lowered.
    assert after.ok and after.stdout == pristine.stdout, (explain(after), pristine.stdout)


def test_the_agent_is_pid_1_and_no_signal_from_inside_stops_or_kills_it() -> None:
    async def body(sb: Sandbox) -> tuple[ExecResult, int | None, ExecResult, int | None]:
        await sb.exec(["true"])
        before = sb._impl.agent.pid  # type: ignore[union-attr]
        result = await sb.exec(sh(_KILL_EVERY_OTHER))
        return result, before, await sb.exec(["echo", "fine"]), sb._impl.agent.pid  # type: ignore[union-attr]

    result, before, after, agent = with_sandbox(body)
    assert result.status is Status.OK and result.stdout == b"still here\n", explain(result)
    assert after.ok and after.stdout == b"fine\n" and agent == before, explain(after)


@pytest.mark.parametrize(
    "argv",
    [sh("kill -9 $PPID; sleep 1"), py("import os, signal, time; os.kill(os.getppid(), signal.SIGKILL); time.sleep(1)")],
    ids=["sh", "python"],
)
def test_killing_the_agent_is_not_infra_error(argv: list[str]) -> None:
    async def body(sb: Sandbox) -> list[ExecResult]:
        results = [await sb.exec(argv)]
        for _ in range(2):
            await assert_alive(sb)
        results.append(await sb.exec(argv))
        await assert_alive(sb)
        return results

    for result in with_sandbox(body):
        assert result.status is Status.OK, explain(result)  # the signal cannot reach pid 1: the command goes on


@pytest.mark.parametrize("name", ["XCPU", "XFSZ"])
def test_self_sent_limit_signal_is_not_a_limit(name: str) -> None:
    result = exec_once(sh(f"kill -{name} $$"))
    assert result.status is Status.SIGNALED, explain(result)
    assert result.signal == signal.Signals[f"SIG{name}"]


def test_no_capabilities_no_new_privileges_and_seccomp() -> None:
    result = exec_once(["grep", "-E", "^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):", "/proc/self/status"])
    assert result.status is Status.OK, explain(result)
    status = dict(line.split(":\t") for line in result.stdout.decode().splitlines())
    assert status == {
        "CapPrm": "0000000000000000",
        "CapEff": "0000000000000000",
        "CapBnd": "0000000000000000",
        "NoNewPrivs": "1",
        "Seccomp": "2",
    }


def test_the_sandbox_sees_only_its_own_mounts() -> None:
    # The host's tree went with the old root, detached after the pivot: none of its mounts is left in the
    # sandbox's namespace, hidden under another or not.
    from rollbox.sandbox.namespaces._backend import NamespaceHost
    from rollbox.sandbox.runtime._mounts import SYSTEM_DIRS

    result = exec_once(["cat", "/proc/self/mountinfo"])
    assert result.status is Status.OK, explain(result)
    points = [line.split()[4] for line in result.stdout_text.splitlines()]
    expected = {"/", "/etc", "/proc", "/proc/sys", "/dev/pts", "/workspace", "/tmp", "/dev/shm"}
    expected |= {"/opt/rollbox/agent", "/opt/rollbox/zygote.py", *(d for _, d in NamespaceHost.get().runtime.binds)}
    expected |= {d for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)}
    if _path["current"] == "image":  # the image's top-level directories and files, each bound read-only
        rollboxs = {"/proc", "/dev", "/sys", "/tmp", "/workspace"}
        expected |= {f"/{e.name}" for e in os.scandir(host_image().root) if not e.is_symlink()} - rollboxs
    assert len(points) == len(set(points)) and set(points) <= expected, points


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_nothing_outside_has_power_over_the_sandboxs_namespaces() -> None:
    # Its user namespace belongs to its host uid (so that the kernel charges the sandbox's per-user counters to that
    # uid, never to root's), whose one process outside the sandbox, the launcher that made it, waits unprivileged
    # and out of the program's reach; and no user namespace can be made inside.
    ns_get_owner_uid = 0xB704

    async def body(sb: Sandbox) -> tuple[ExecResult, int, dict[str, str], int]:
        result = await sb.exec(["cat", "/proc/sys/user/max_user_namespaces"])
        agent = sb._impl.agent.pid  # type: ignore[union-attr]
        assert agent is not None
        fd = os.open(f"/proc/{agent}/ns/user", os.O_RDONLY)
        try:
            owner = int.from_bytes(fcntl.ioctl(fd, ns_get_owner_uid, bytes(4)), sys.byteorder)
        finally:
            os.close(fd)
        launcher = Path(f"/proc/{_parent(agent)}/status").read_text().splitlines()
        return result, owner, dict(line.split(":\t", 1) for line in launcher), sb._impl.uid  # type: ignore[union-attr]

    result, owner, launcher, uid = with_sandbox(body)
    assert result.stdout_text == "0\n", explain(result)
    assert owner == uid
    assert launcher["Uid"].split() == [str(uid)] * 4 and launcher["Gid"].split() == [str(uid)] * 4
    assert int(launcher["CapEff"], 16) == 0 and int(launcher["CapPrm"], 16) == 0


@pytest.mark.parametrize("warm_python", [False, True], ids=["plain", "warm-python"])
def test_the_sandbox_dies_with_its_launcher(warm_python: bool) -> None:
    # The launcher is what rollbox watches and kills: the agent and the command must not outlive it (parent-death
    # signal; rollbox may start a new sandbox meanwhile, whose processes are not these).
    # The command was killed by the host, not by itself: that is rollbox's failure, never the program's, whether
    # the agent ran it or the zygote forked it (the zygote dies with the agent, and reports nothing either).
    program = ["python3", "hold.py"] if warm_python else sh("sleep 30 & sleep 30")

    async def body(sb: Sandbox) -> tuple[ExecResult, set[int], ExecResult]:
        agent = sb._impl.agent.pid  # type: ignore[union-attr]
        assert agent is not None
        await sb.write_file("hold.py", "import subprocess, time\nsubprocess.Popen(['sleep', '30'])\ntime.sleep(30)\n")
        command = asyncio.ensure_future(sb.exec(program, warm_python=warm_python))
        # The launcher, the agent, then the shell and its two sleeps, or the zygote, its fork and the sleep.
        deadline = time.monotonic() + 10 * TIME_SCALE
        while len(doomed := own_sandbox_processes()) < 5 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert agent in doomed and len(doomed) >= 5, doomed
        os.kill(_parent(agent), signal.SIGKILL)  # started by this test, through rollbox, and signalled by pid
        result = await asyncio.wait_for(command, 10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and doomed & own_sandbox_processes():
            await asyncio.sleep(0.05)
        return result, doomed & own_sandbox_processes(), await sb.exec(["echo", "again"])

    result, left, after = with_sandbox(body)
    assert result.status is Status.INFRA_ERROR and "outside the sandbox" in (result.error or ""), explain(result)
    assert left == set()
    assert after.ok and after.stdout == b"again\n", explain(after)  # restarted


@pytest.fixture
def runtime_in_tmp() -> Iterator[tuple[Path, Path]]:
    """A runtime mounted inside each sandbox's own /tmp, which the program owns (rollbox mounts runtimes under
    /opt/rollbox, but the launcher must stay safe whatever it is given). Yields (that runtime's parent, an empty
    host decoy directory)."""
    from rollbox.sandbox.namespaces._backend import NamespaceHost
    from rollbox.sandbox.runtime._mounts import RuntimeMounts

    base = Path(tempfile.mkdtemp(prefix="rollbox-test-runtime-", dir="/tmp"))
    (base / "rt").mkdir()
    decoy = Path(tempfile.mkdtemp(prefix="rollbox-test-decoy-", dir="/tmp"))
    host = NamespaceHost.get()
    saved = host.runtime
    host.runtime = RuntimeMounts((*saved.binds, (str(base / "rt"), str(base / "rt"))))
    try:
        yield base, decoy
    finally:
        host.runtime = saved
        shutil.rmtree(base)
        shutil.rmtree(decoy)


@pytest.mark.parametrize("sandbox_path", ["fresh", "warm"], indirect=True)  # an image's root has no host runtime
def test_a_link_planted_where_the_runtime_is_mounted_never_leads_the_launcher_out(
    runtime_in_tmp: tuple[Path, Path],
) -> None:
    # The program swaps the runtime's parent for a link to a host directory, then kills its agent: the restart's
    # launcher, root on the host and not yet pivoted, makes the mount point again. It must not follow the link.
    base, decoy = runtime_in_tmp
    plant = f"mv {base} {base}.old && ln -s {decoy} {base} && {CRIPPLE}; while true; do (true &); done"

    async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult, int | None, int | None]:
        await sb.reset(fresh=True)  # the mount point is made at a start (an in-place reset would empty it away)
        before = sb._impl.agent.pid  # type: ignore[union-attr]
        planted = await sb.exec(sh(plant), timeout_s=20)
        after = await sb.exec(sh(f"test -d {base}/rt && ! test -L {base} && echo remade"))
        return planted, after, before, sb._impl.agent.pid  # type: ignore[union-attr]

    planted, after, before, agent = with_sandbox(body, limits=limits(timeout_s=20, cpu_time_s=20))
    assert planted.status is not Status.INFRA_ERROR, explain(planted)
    assert agent != before  # the agent died and its launcher was restarted, over the link
    assert list(decoy.iterdir()) == []  # nothing made on the host
    assert after.status is Status.OK and after.stdout == b"remade\n", explain(after)  # the mount point again


_STRAYS = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
made = 0
for i in range(14):
    pid = libc.syscall(ctypes.c_long(56), ctypes.c_long(0x00008000 | 17), 0, 0, 0, 0)  # clone(CLONE_PARENT|SIGCHLD)
    if pid == 0:
        libc.prctl(15, b"leftover-%d" % i, 0, 0, 0)  # PR_SET_NAME: a name the next user could read
        libc.syscall(ctypes.c_long(60), 0)
    if pid < 0:
        break
    made += 1
print(made, ctypes.get_errno())
"""


@own_sandboxes
def test_children_handed_to_the_zygote_never_reach_the_next_user() -> None:
    # With CLONE_PARENT a warm command's children are the zygote's, which waits only for the command it forked:
    # they stayed zombies past the command's end, counted against the next user's pids, their names readable.
    pids = limits(pids=16)

    async def main() -> tuple[ExecResult, ExecResult, ExecResult]:
        async with SandboxPool(size=1, limits=pids, warm_python=True) as pool:
            async with pool.sandbox() as sb:
                await sb.write_file("strays.py", _STRAYS)
                made = await sb.exec(["python3", "strays.py"], warm_python=True)
            async with pool.sandbox() as sb:  # the next user
                seen = await sb.exec(sh("cat /proc/[0-9]*/comm | grep -c leftover || true"))
                ten = await sb.exec(sh("for i in 1 2 3 4 5 6 7 8 9 10; do sleep 0.2 & done; wait; echo ok"))
        return made, seen, ten

    made, seen, ten = run(main())
    assert made.stdout == f"0 {errno.EPERM}\n".encode(), explain(made)  # refused, not made
    assert seen.stdout == b"0\n" and ten.status is Status.OK, (explain(seen), explain(ten))


# ------------------------------------------------------------------------------------------ descriptors


def test_fd_exhaustion_is_the_programs_own_error() -> None:
    result = exec_then_alive(
        py("files = []\nwhile True: files.append(open('/dev/null'))"), limits=limits(open_files=64)
    )
    assert result.status is Status.NONZERO_EXIT, explain(result)
    assert b"Too many open files" in result.stderr


# ----------------------------------------------------------------------------------------------- stdin


def test_cat_without_stdin_returns_at_once() -> None:
    result = exec_once(["cat"])
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b""
    assert result.wall_s < 1.0 * TIME_SCALE


def test_stdin_is_echoed_exactly() -> None:
    result = exec_once(["cat"], stdin=b"hello\x00\xff world\n")
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b"hello\x00\xff world\n"


def test_one_mebibyte_of_stdin_is_echoed_exactly() -> None:
    data = os.urandom(1 * MiB)
    result = exec_once(["cat"], stdin=data, limits=limits(output_bytes=2 * MiB))
    assert result.status is Status.OK, explain(result)
    assert result.stdout == data


def test_stdin_that_is_never_read_does_not_hang() -> None:
    result = exec_once(["true"], stdin=os.urandom(4 * MiB))
    assert result.status is Status.OK, explain(result)
    assert result.wall_s < 1.0 * TIME_SCALE


# -------------------------------------------------------------------------------------- ordinary programs


def test_threads_work() -> None:
    code = """
        import threading
        results = [0] * 8
        def work(i):
            results[i] = sum(range(i * 1000))
        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print(sum(results))
        """
    result = exec_once(py(code))
    assert result.status is Status.OK, explain(result)
    assert int(result.stdout) == sum(sum(range(i * 1000)) for i in range(8))


def test_subprocesses_work() -> None:
    code = """
        import subprocess
        out = subprocess.run(["sh", "-c", "echo from child; exit 7"], capture_output=True)
        print(out.stdout.decode().strip(), out.returncode)
        """
    result = exec_once(py(code))
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b"from child 7\n"


def test_nonzero_exit_code_is_reported() -> None:
    result = exec_once(sh("echo out; echo err >&2; exit 42"))
    assert result.status is Status.NONZERO_EXIT
    assert (result.exit_code, result.stdout, result.stderr) == (42, b"out\n", b"err\n")


def test_files_persist_between_commands() -> None:
    async def body(sb: Sandbox) -> ExecResult:
        first = await sb.exec(sh("echo one > /workspace/a.txt && echo two > /tmp/b.txt && mkdir -p d/e"))
        assert first.status is Status.OK, explain(first)
        return await sb.exec(sh("cat a.txt /tmp/b.txt && test -d d/e"))

    result = with_sandbox(body)
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b"one\ntwo\n"


def test_write_file_read_file_round_trip() -> None:
    payload = os.urandom(100 * KiB)

    async def body(sb: Sandbox) -> None:
        await sb.write_file("pkg/sub/main.py", "print('from write_file')\n")
        await sb.write_file("/tmp/blob.bin", payload)
        ran = await sb.exec(["python3", "pkg/sub/main.py"])
        assert ran.status is Status.OK, explain(ran)
        assert ran.stdout == b"from write_file\n"
        assert await sb.read_file("/tmp/blob.bin") == payload
        made = await sb.exec(sh("printf 'made inside' > out.txt && id -u > uid.txt && stat -c %u pkg/sub/main.py"))
        assert made.status is Status.OK, explain(made)
        assert made.stdout == b"1000\n"  # written by the host, owned by the sandbox's user
        assert await sb.read_file("out.txt") == b"made inside"
        assert await sb.read_file("/workspace/out.txt") == b"made inside"

    with_sandbox(body)


@own_sandboxes
def test_one_shot_run_with_files() -> None:
    result = run(rollbox.run(["python3", "main.py"], files={"main.py": "print(6 * 7)"}, limits=SMALL))
    assert result.status is Status.OK, explain(result)
    assert result.stdout == b"42\n"


# ------------------------------------------------------------------------------ bombs beside ordinary work

_ORDINARY: list[list[str]] = [
    py("print(sum(i * i for i in range(200_000)))"),
    sh("echo hello; printf '%s\\n' 3 1 2 | sort; seq 1000 | tail -1"),
    py("import hashlib, json; print(hashlib.sha256(b'x' * 1_000_000).hexdigest()); print(json.dumps([1, 2]))"),
]
_ORDINARY_LIMITS = Limits(timeout_s=20, cpu_time_s=10, memory_bytes=256 * MiB, pids=32)


@own_sandboxes
def test_bombs_do_not_disturb_ordinary_commands_beside_them() -> None:
    async def ordinary(argv: list[str]) -> ExecResult:
        async with Sandbox(limits=_ORDINARY_LIMITS) as sb:
            return await sb.exec(argv)

    async def bomb(argv: list[str], bomb_limits: Limits) -> ExecResult:
        async with Sandbox(limits=bomb_limits) as sb:
            return await sb.exec(argv)

    fork_bomb = py("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass")
    memory_bomb = py(_MEMORY_BOMB)

    async def main() -> tuple[list[ExecResult], list[ExecResult]]:
        alone = [await ordinary(argv) for argv in _ORDINARY]
        together = await asyncio.gather(
            bomb(fork_bomb, SMALL),
            bomb(memory_bomb, _BOMB_LIMITS),
            *(ordinary(argv) for argv in _ORDINARY),
        )
        return alone, list(together)

    alone, together = asyncio.run(main())
    assert together[0].status is Status.PIDS_LIMIT, explain(together[0])
    assert together[1].status is Status.MEMORY_LIMIT, explain(together[1])
    for solo, beside in zip(alone, together[2:], strict=True):
        assert solo.status is Status.OK, explain(solo)
        assert beside.status is Status.OK, explain(beside)
        assert beside.stdout == solo.stdout
        assert beside.stderr == solo.stderr == b""


# ------------------------------------------------------------------------------------ host file API attacks


def _host_file_fingerprint(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return sha256(path), st.st_mtime_ns, st.st_mode


@pytest.mark.parametrize(
    ("setup", "path"),
    [
        ("ln -s /etc/shadow /workspace/x", "x"),
        ("ln -s /etc /workspace/etcdir", "etcdir/shadow"),
        ("mkdir -p /workspace/a && ln -s /etc /workspace/a/b", "a/b/shadow"),
        ("ln -s /etc/shadow /tmp/x", "/tmp/x"),
        ("ln -s /workspace/../etc/shadow /workspace/rel", "rel"),
    ],
    ids=["file-link", "dir-link", "nested-dir-link", "tmp-link", "relative-link"],
)
def test_symlink_cannot_lead_host_file_api_outside(setup: str, path: str) -> None:
    shadow = Path("/etc/shadow")
    before = _host_file_fingerprint(shadow)

    async def body(sb: Sandbox) -> None:
        planted = await sb.exec(sh(setup))
        assert planted.status is Status.OK, explain(planted)
        with pytest.raises(OSError):
            await sb.read_file(path)
        with pytest.raises(OSError):
            await sb.write_file(path, "root::0:0:99999:7:::\n")
        with pytest.raises(OSError):
            await sb.write_file(f"{path}/child", "x")  # through the link as a directory
        await assert_alive(sb)

    with_sandbox(body)
    assert _host_file_fingerprint(shadow) == before
    assert not Path("/etc/child").exists()


def _in_thread(coro: Awaitable[T]) -> tuple[threading.Thread, list[Any]]:
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(run(coro))
        except BaseException as exc:
            box.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


@pytest.mark.parametrize("operation", ["read", "write"])
def test_fifo_does_not_block_host_file_api(operation: str) -> None:
    async def body(sb: Sandbox) -> None:
        planted = await sb.exec(["mkfifo", "/workspace/pipe"])
        assert planted.status is Status.OK, explain(planted)
        call = sb.read_file("pipe") if operation == "read" else sb.write_file("pipe", "x")
        thread, box = _in_thread(call)
        thread.join(1.0 * TIME_SCALE)
        blocked = thread.is_alive()
        if blocked:
            # Unblock the host by opening the other end from inside, so that nothing is left hanging.
            other_end = "cat pipe >/dev/null" if operation == "write" else "echo x > pipe"
            released = await sb.exec(sh(other_end), timeout_s=2)
            thread.join(5.0)
            assert released.status is Status.OK, explain(released)
        assert not blocked, f"the host's {operation}_file blocked on a FIFO the sandbox planted"
        assert box and isinstance(box[0], OSError), box

    with_sandbox(body)


def test_symlinked_directory_cannot_redirect_write_file_into_host() -> None:
    tempdir = Path(tempfile.mkdtemp(prefix="rollbox-attack-"))
    try:

        async def body(sb: Sandbox) -> None:
            planted = await sb.exec(sh(f"ln -s {tempdir} /workspace/out"))
            assert planted.status is Status.OK, explain(planted)
            with pytest.raises(OSError):
                await sb.write_file("out/planted.txt", "x")
            with pytest.raises(OSError):
                await sb.write_file("out/deeper/planted.txt", "x")

        with_sandbox(body)
        assert list(tempdir.iterdir()) == []
    finally:
        shutil.rmtree(tempdir, ignore_errors=True)


# ------------------------------------------------------------------------- crippling the sandbox's own helpers


@pytest.mark.parametrize(
    "cripple",
    [
        "kill -STOP $PPID",  # the agent, stopped (it is pid 1: the signal never arrives)
        "python3 -c 'import resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (3, 3))'",  # starved of fds
        "python3 -c 'import resource; resource.prlimit(1, resource.RLIMIT_CPU, (0, 0))'",  # killed at its next tick
    ],
)
def test_a_crippled_agent_never_turns_the_next_command_into_an_infra_error(cripple: str) -> None:
    async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult]:
        first = await sb.exec(sh(cripple))
        return first, await sb.exec(sh("echo still fine"))

    first, after = with_sandbox(body)
    assert first.status is not Status.INFRA_ERROR, explain(first)
    assert after.status is Status.OK and after.stdout == b"still fine\n", explain(after)


def test_an_agent_made_to_die_from_inside_is_the_programs_failure() -> None:
    # pid 1 ignores every signal from inside, but the program can lower its CPU limit, and the kernel then kills it
    # as soon as it runs (here, reaping the orphans the program leaves). Its end is the program's doing: never an
    # infra_error, which a policy could learn to hide its failures behind.
    async def body(sb: Sandbox) -> tuple[ExecResult, bool]:
        agent = sb._impl.agent.pid  # type: ignore[union-attr]
        result = await sb.exec(sh(f"{CRIPPLE}; while true; do (true &); done"))
        return result, os.path.exists(f"/proc/{agent}")

    result, agent_alive = with_sandbox(body, limits=limits(timeout_s=20, cpu_time_s=20))
    assert not agent_alive  # it did die: this test can fail
    # On a loaded machine the loop can fill the pids limit before the agent runs out of CPU: the program's doing too.
    assert result.status in (Status.SIGNALED, Status.PIDS_LIMIT), explain(result)


def test_a_tree_thousands_of_levels_deep_breaks_nothing() -> None:
    deep = "import os\nfor _ in range(3000):\n    os.mkdir('d')\n    os.chdir('d')\nopen('f', 'w').write('x')\n"

    async def body(sb: Sandbox) -> tuple[ExecResult, ExecResult]:
        made = await sb.exec(py(deep))
        return made, await sb.exec(sh("echo ok"))

    made, after = with_sandbox(body, limits=limits(file_size_bytes=1 * MiB))
    assert made.status is Status.OK, explain(made)
    assert after.status is Status.OK
