"""Many live sandboxes on one host: what each costs, what runs out first, and what rollbox says when something does.

Each shortage is made real in a child process (a lower open files limit, a small pids cgroup, a full state
directory): the child opens sandboxes until one cannot be had, and its error must name the resource, its numbers,
and what to raise, never a hint that sends the user elsewhere (such as "needs root"). Shortages that only the
whole machine can run out of (fs.file-max, the kernel's namespaces and memory cgroup ids), which a test on a
shared machine must not exhaust, are said by the same function: its text is checked for each errno.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import errno
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rollbox.sandbox._shortage import SHORTAGES, host_error, shortage

SRC = Path(__file__).resolve().parent.parent / "src" / "rollbox" / "sandbox"

#: Opens sandboxes one after another (each runs `true`), keeping them open, until one cannot be opened or run or
#: argv[1] are open; prints how many, and the error.
_FILL = """
import asyncio, json, sys, rollbox
from rollbox.sandbox import SandboxError
LIMITS = rollbox.Limits(
    timeout_s=10, cpu_time_s=2, memory_bytes=64 << 20, pids=16, disk_bytes=4 << 20, open_files=64
)
async def main():
    opened, error = [], None
    try:
        while len(opened) < int(sys.argv[1]) and error is None:
            sb = rollbox.Sandbox(limits=LIMITS)
            try:
                await sb.__aenter__()
            except SandboxError as exc:
                error = str(exc)
                break
            opened.append(sb)
            result = await sb.exec(["true"])
            if not result.ok:
                error = result.error or result.status.value
    finally:
        for sb in opened:
            await sb.close()
    print(json.dumps({"opened": len(opened), "error": error}))
asyncio.run(main())
"""


def _run(script: str, *args: str, preexec: Callable[[], None] | None = None, timeout_s: float = 120) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        preexec_fn=preexec,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict = json.loads(done.stdout.splitlines()[-1])
    return report


def _misleading(message: str) -> list[str]:
    """Hints that would send a user the wrong way for a shortage."""
    return [hint for hint in ("needs root", "Linux >= 5.12", "is gone or being removed") if hint in message]


def test_out_of_descriptors_names_the_limit_after_rollbox_lifted_its_soft_limit_to_the_hard_one() -> None:
    # Soft limit 64, hard 512: without lifting its soft limit rollbox would stop at about ten sandboxes; with it,
    # near (512 - what the interpreter holds) / 4. Then the error says RLIMIT_NOFILE, its value and how to raise it.
    report = _run(_FILL, "1000", preexec=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 512)))
    error = report["error"] or ""
    assert "Too many open files" in error and "RLIMIT_NOFILE" in error and "512" in error, report
    assert "ulimit -Hn" in error and not _misleading(error), report
    assert report["opened"] >= 80, report  # about four descriptors a sandbox, and the soft limit lifted


def _cgroup_dir(controller: str) -> tuple[Path, bool]:
    """Where a cgroup of ``controller`` can be made for a child: below this process's own on v1 (each hierarchy
    apart), beside it on v2 (a cgroup with processes hands no controller down). Returns (directory, is v2)."""
    from rollbox.sandbox.namespaces._cgroup import cgroup_mounts, own_cgroup_paths

    mounts, own = cgroup_mounts(), own_cgroup_paths()
    if controller in mounts:
        return mounts[controller] / own[controller].lstrip("/"), False
    unified = mounts[""] / own[""].lstrip("/")
    if controller not in (unified.parent / "cgroup.subtree_control").read_text().split():
        pytest.skip(f"no {controller} controller for a cgroup beside this test's ({unified.parent})")
    return unified.parent, True


@contextlib.contextmanager
def _cgroup(controller: str, limits: dict[str, str]) -> Iterator[Path]:
    """A cgroup of ``controller`` of its own with ``limits`` (file: value), for a child; emptied and removed after."""
    parent, _ = _cgroup_dir(controller)
    made = parent / f"rollbox-test-{controller}-{os.getpid()}"
    made.mkdir()
    try:
        for name, value in limits.items():
            (made / name).write_text(value)
        yield made
    finally:
        for _ in range(500):
            pids = [int(p) for p in (made / "cgroup.procs").read_text().split()]
            if not pids:
                break
            for pid in pids:  # what the child left: pinned first, so that a reused pid is never signalled
                with contextlib.suppress(ProcessLookupError):
                    pidfd = os.pidfd_open(pid)
                    try:
                        if made.name in Path(f"/proc/{pid}/cgroup").read_text():
                            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                    except (ProcessLookupError, FileNotFoundError):
                        pass
                    finally:
                        os.close(pidfd)
            time.sleep(0.01)
        for _ in range(500):
            with contextlib.suppress(FileNotFoundError):
                try:
                    made.rmdir()
                except OSError:
                    time.sleep(0.01)
                    continue
            break


def _join(cgroup: Path) -> Callable[[], None]:
    return lambda: (cgroup / "cgroup.procs").write_text(str(os.getpid())) and None


def test_out_of_processes_names_the_pids_cgroup_and_its_limit() -> None:
    # The child runs in a pids cgroup of 48: its interpreter and threads, the spawner, then three processes a
    # sandbox (launcher, agent, the next command's process; on v2 the last is in the sandbox's cgroup, beside it).
    # Whatever step forks first past the limit (the spawner's fork of a launcher, a launcher's clone, the agent's
    # fork of a spare), the error names that cgroup.
    with _cgroup("pids", {"pids.max": "48"}) as cgroup:
        report = _run(_FILL, "1000", preexec=_join(cgroup))
    error = report["error"] or ""
    assert "Resource temporarily unavailable" in error, report
    assert f"the pids cgroup {cgroup} is at its limit" in error and "pids.max" in error, report
    assert not _misleading(error) and 3 <= report["opened"] < 24, report


_FULL_STATE = """
import asyncio, ctypes, json, os, sys, rollbox
from rollbox.sandbox import SandboxError
libc = ctypes.CDLL(None, use_errno=True)
state = sys.argv[1]
LIMITS = rollbox.Limits(timeout_s=10, cpu_time_s=2, memory_bytes=64 << 20, pids=16, disk_bytes=4 << 20)
async def main():
    async with rollbox.Sandbox(limits=LIMITS) as sb:  # rollbox's own files made, with room
        await sb.exec(["true"])
    st = os.statvfs(state)
    used = st.f_files - st.f_ffree
    # Room for two more sandboxes' directories (two inodes each) and no more.
    if libc.mount(b"none", state.encode(), None, 0x20, f"nr_inodes={used + 4}".encode()) != 0:  # MS_REMOUNT
        raise OSError(ctypes.get_errno(), "remount")
    opened, error = [], None
    try:
        while len(opened) < 50 and error is None:
            sb = rollbox.Sandbox(limits=LIMITS)
            try:
                await sb.__aenter__()
            except SandboxError as exc:
                error = str(exc)
                break
            opened.append(sb)
    finally:
        for sb in opened:
            await sb.close()
    print(json.dumps({"opened": len(opened), "error": error}))
asyncio.run(main())
"""


def _private_tmpfs(path: Path) -> Callable[[], None]:
    """For a child: a mount namespace of its own, with a tmpfs at ``path`` (nothing the host sees)."""

    def setup() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        ms_rec, ms_private = 0x4000, 0x40000
        if libc.unshare(0x20000) != 0 or libc.mount(b"none", b"/", None, ms_rec | ms_private, None) != 0:
            raise OSError(ctypes.get_errno(), "a private mount namespace")
        if libc.mount(b"rollbox-test-state", str(path).encode(), b"tmpfs", 0, b"mode=0711,size=256m") != 0:
            raise OSError(ctypes.get_errno(), "a tmpfs")

    return setup


def test_a_full_state_directory_is_named_with_its_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setenv("ROLLBOX_STATE_DIR", str(state))
    report = _run(_FULL_STATE, str(state), preexec=_private_tmpfs(state))
    error = report["error"] or ""
    assert "No space left on device" in error, report
    assert f"rollbox's state directory {state} is full" in error and "inodes free" in error, report
    assert not _misleading(error) and report["opened"] <= 2, report


@pytest.mark.parametrize("number", sorted(SHORTAGES), ids=lambda n: errno.errorcode[n])
@pytest.mark.parametrize("making", ["process", "namespace", "cgroup", "state", "other"])
def test_each_shortage_is_said_as_its_resource(number: int, making: str) -> None:
    # What only the whole machine can run out of is not exhausted here (other work shares the machine); the words
    # for it come from the same function as for the shortages made real above, and read the same live numbers.
    explained = shortage(number, making)  # type: ignore[arg-type]
    message = host_error("cannot do it", number, making)  # type: ignore[arg-type]
    assert message.startswith(f"cannot do it: {os.strerror(number)}") and not _misleading(message)
    ambiguous = {errno.EAGAIN: {"process", "cgroup"}, errno.ENOSPC: {"namespace", "cgroup", "state"}}
    if number in ambiguous and making not in ambiguous[number]:
        assert explained is None  # EAGAIN from a read, ENOSPC on a sandbox's own disk: no host shortage
        return
    names = {
        errno.EMFILE: "RLIMIT_NOFILE",
        errno.ENFILE: "fs.file-max",
        errno.ENOMEM: "MiB available",
        errno.EUSERS: "32 deep",
        errno.EAGAIN: "kernel.pid_max" if making == "process" else "cgroup.max.descendants",
        errno.ENOSPC: {"namespace": "max_mnt_namespaces", "cgroup": "65,535", "state": "state directory"}.get(making),
    }
    assert explained is not None and names[number] in explained, explained


#: Calls that turn a failure into words for a user (an exception, an infra_error result).
_MESSAGES = {"SandboxError", "IsolationUnavailable", "infra_error"}


def _handler_os_errors(handler: ast.ExceptHandler) -> bool:
    """Whether an ``except`` clause catches OSError (alone or among others)."""
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught] if caught is not None else []
    return any(isinstance(n, ast.Name) and n.id == "OSError" for n in names)


def _leaks_os_error(node: ast.AST, name: str) -> bool:
    """Whether an f-string in ``node`` shows the OS error ``name`` (or its strerror) outside ``host_error``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("host_error", "_failed"):
        return False
    if isinstance(node, ast.FormattedValue):
        value = node.value
        if isinstance(value, ast.Attribute):
            value = value.value
        if isinstance(value, ast.Name) and value.id == name:
            return True
    return any(_leaks_os_error(child, name) for child in ast.iter_child_nodes(node))


def test_every_os_error_the_sandbox_layer_puts_into_words_goes_through_host_error() -> None:
    # The class, closed: an OSError caught anywhere in the sandbox layer and shown to a user in an exception or
    # an infra_error result is said by host_error (which names what ran out), never by its bare text; and nothing
    # but host_error turns an errno into words (os.strerror), except to make the OSError the OS would have raised.
    found: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name == "_shortage.py":
            continue
        tree = ast.parse(path.read_text())
        as_the_os_would = {
            id(arg)
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "OSError"
            for arg in node.args
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "strerror"
                and id(node) not in as_the_os_would
            ):
                found.append(f"{path.name}:{node.lineno}: os.strerror outside host_error")
            if not (isinstance(node, ast.ExceptHandler) and node.name and _handler_os_errors(node)):
                continue
            for call in ast.walk(node):
                callee = getattr(call, "func", None)
                called = getattr(callee, "id", None) or getattr(callee, "attr", None)
                if isinstance(call, ast.Call) and called in _MESSAGES and _leaks_os_error(call, node.name):
                    found.append(f"{path.name}:{call.lineno}: {ast.unparse(call)[:100]}")
    assert found == []


def test_every_failed_step_the_agent_reports_carries_its_errno() -> None:
    # rollbox reads the errno from the agent's report to say what ran out: every message agent.c writes with the C
    # library's words for an error carries the number too, but the two it writes to the program itself.
    source = (SRC / "agent" / "agent.c").read_text()
    lines = [line.strip() for line in source.splitlines() if "strerror(" in line]
    for_the_program = [line for line in lines if line.startswith('dprintf(2, "rollbox: ')]
    assert len(for_the_program) == 2 and all("(errno %d)" in line for line in lines if line not in for_the_program)


#: Measures what the doctor measures, then fills: prints the capacity predicted and the sandboxes really opened.
_PREDICT_THEN_FILL = (
    """
import asyncio, json
from rollbox.sandbox._capacity import measure
print(json.dumps(asyncio.run(measure()).to_json()))
"""
    + _FILL
)


@pytest.mark.parametrize("limit", ["open files", "processes"])
def test_the_doctors_capacity_is_what_really_fits(limit: str) -> None:
    # rollbox doctor says how many sandboxes this host can hold, from the real limits and what a sandbox really
    # takes: under a lower open files limit, and in a small pids cgroup, it says about what a process then opens.
    with contextlib.ExitStack() as stack:
        if limit == "open files":
            preexec = lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 512))  # noqa: E731
        else:
            preexec = _join(stack.enter_context(_cgroup("pids", {"pids.max": "96"})))
        done = subprocess.run(
            [sys.executable, "-c", _PREDICT_THEN_FILL, "1000"],
            capture_output=True,
            text=True,
            timeout=120,
            preexec_fn=preexec,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    predicted, filled = (json.loads(line) for line in done.stdout.splitlines()[-2:])
    by_name = {row["resource"]: row for row in predicted["limits"]}
    assert by_name[limit]["sandboxes"] == min(predicted["per_process"], predicted["host"]), predicted
    assert abs(filled["opened"] - by_name[limit]["sandboxes"]) <= max(2, filled["opened"] // 10), (predicted, filled)


#: Opens that many sandboxes and prints what the machine's kernel and process memory rose by, for each.
_MEMORY_AT_SCALE = """
import asyncio, json, sys, time, rollbox
PARTS = ("Slab", "PageTables", "KernelStack", "Percpu", "AnonPages", "Shmem")
def machine():
    info = {line.split(":")[0]: int(line.split()[1]) << 10 for line in open("/proc/meminfo")}
    return sum(info[part] for part in PARTS if part in info)
async def main():
    async with rollbox.Sandbox() as first:
        await first.exec(["true"])
    before, opened = machine(), []
    try:
        for _ in range(int(sys.argv[1])):
            sb = rollbox.Sandbox()
            await sb.__aenter__()
            opened.append(sb)
            await sb.exec(["true"])
        await asyncio.sleep(1)
        print(json.dumps({"each": (machine() - before) / len(opened)}))
    finally:
        for sb in opened:
            await sb.close()
asyncio.run(main())
"""


def test_the_doctors_memory_a_sandbox_is_what_hundreds_take() -> None:
    # Most of a sandbox's memory is the kernel's (namespaces, mounts, cgroups), which no cgroup is charged for: a
    # figure read from rollbox's cgroup alone said 0.02 MiB a sandbox, fifty times too little, and so fifty times
    # the room. What the doctor's probe measures must hold for hundreds opened at once.
    predicted = _run(
        "import asyncio, json\nfrom rollbox.sandbox._capacity import measure\n"
        "print(json.dumps(asyncio.run(measure()).to_json()))"
    )
    memory = next(row for row in predicted["limits"] if row["resource"] == "memory")
    at_scale = _run(_MEMORY_AT_SCALE, "300")
    assert memory["each"] >= 0.5 * at_scale["each"], (memory, at_scale)
