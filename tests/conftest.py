"""Test-session setup: a private rollbox state directory, and a check that nothing leaked when the run ends.

The leak check compares what exists after the session with what existed before it: sandbox cgroups and
processes under this session's cgroup parent, mounts and sandbox directories under its private state dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

STATE_DIR = Path(f"/run/rollbox-test-{os.getpid()}")
os.environ["ROLLBOX_STATE_DIR"] = str(STATE_DIR)
#: Every piece of rollbox's durable state (caches, layers, jobs, runs) lives under ROLLBOX_HOME: a session of its
#: own, so that tests never read or write the user's ~/.rollbox, and removed at the end.
HOME_DIR = Path(tempfile.mkdtemp(prefix="rollbox-test-home-"))
os.environ["ROLLBOX_HOME"] = str(HOME_DIR)
os.environ.pop("ROLLBOX_DB", None)  # the job store too: never a database the user named
#: A PostgreSQL server of the session's own, for the job store's tests (started at the first test that needs it).
pytest_plugins = ["postgres_server"]
# A suite started as a background job of a non-interactive shell (or under nohup) ignores SIGINT, and every
# program it starts would inherit that: the tests that interrupt a rollbox command need it to hear Ctrl-C.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from rollbox.sandbox import Limits, Network, Sandbox, SandboxConfig, SandboxPool, WarmSandboxes  # noqa: E402
from rollbox.sandbox.namespaces._cgroup import CgroupTree  # noqa: E402  (the state dir must be set first)
from rollbox.sandbox.namespaces._state import UID_BASE, UID_COUNT  # noqa: E402

#: How many times slower than this machine the tests' CPU is: the cgroup v2 run (scripts/vm-cgroup2) emulates its
#: CPU, where Python's start-up alone can take a second of CPU time; tests that give ordinary programs a time
#: budget multiply it by this.
TIME_SCALE = float(os.environ.get("ROLLBOX_TEST_TIME_SCALE", "1"))


def _processes() -> Iterator[tuple[Path, dict[str, str]]]:
    """Each process's /proc entry and status fields (those that end meanwhile are skipped)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                yield entry, dict(line.split(":", 1) for line in (entry / "status").read_text().splitlines())
            except (OSError, ValueError):
                continue


def _living_sandbox_uid(status: dict[str, str]) -> bool:
    """Alive and running as a sandbox's uid. A zombie is dead (reaping orphans is the host's pid 1's job), and so
    is a process in state X: one whose parent ignores SIGCHLD is "dead" from its exit report (which is when a
    pidfd says it ended) until it is released, a moment later."""
    alive = status["State"].strip()[:1] not in ("Z", "X")
    return alive and UID_BASE <= int(status["Uid"].split()[0]) < UID_BASE + UID_COUNT


def sandbox_processes() -> set[int]:
    """Live (not zombie) processes in a sandbox cgroup under this session's cgroup parent.

    Under the guard (scripts/guard.py) that parent is private to this run, so sandboxes of other rollbox
    users on the machine are not counted.
    """
    parents = [p.rstrip("/") + "/rollbox-" for p in CgroupTree.detect().parents.values()]
    found: set[int] = set()
    for entry, status in _processes():
        if not _living_sandbox_uid(status):
            continue
        with contextlib.suppress(OSError):
            cgroups = (entry / "cgroup").read_text()
            if any(f":{parent}" in cgroups for parent in parents):
                found.add(int(entry.name))
    return found


def own_sandbox_processes() -> set[int]:
    """Live (not zombie) processes that run as a sandbox uid and descend from this test process, whichever
    cgroup they are in: a sandbox's launcher and agent are in none of the sandbox's."""
    parent: dict[int, int] = {}
    sandboxed: set[int] = set()
    for entry, status in _processes():
        parent[int(entry.name)] = int(status["PPid"])
        if _living_sandbox_uid(status):
            sandboxed.add(int(entry.name))
    me = os.getpid()
    mine: set[int] = set()
    for pid in sandboxed:
        ancestor, hops = parent.get(pid, 0), 0
        while ancestor > 1 and ancestor != me and hops < 64:
            ancestor, hops = parent.get(ancestor, 0), hops + 1
        if ancestor == me:
            mine.add(pid)
    return mine


def living_children(pid: int) -> list[int]:
    """The children of process ``pid`` that are neither zombies nor gone. A child that ended is listed a moment
    longer as dead (state X) when its parent ignores SIGCHLD, as the spawner does: the kernel reaps it at once, and
    unlists it a moment after it said so through its pidfd."""
    living = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # reaped meanwhile
            if not Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].startswith((" Z", " X")):
                living.append(int(child))
    return living


class _Closeable(Protocol):
    async def close(self) -> None: ...


async def cancel_while_opening(opening: Awaitable[_Closeable], delay_s: float, *, times: int = 1) -> None:
    """Cancel ``opening`` (a sandbox's or a pool's entry) ``delay_s`` after it starts, ``times`` times in a row,
    and close what it opened if it finished first."""
    task = asyncio.ensure_future(opening)
    await asyncio.sleep(delay_s)
    for _ in range(times):
        task.cancel()
        await asyncio.sleep(0)
    with contextlib.suppress(asyncio.CancelledError):
        await (await task).close()


def rollbox_mounts() -> list[str]:
    """Mount points under this session's state directory (not the tmpfs rollbox may mount on it)."""
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4].startswith(f"{STATE_DIR}/")
    ]


@pytest.fixture(scope="session", autouse=True)
def no_leaks() -> Iterator[None]:
    """After the whole session: no process, cgroup, mount or directory left behind by any sandbox."""
    cgroups_before = CgroupTree.detect().sandbox_names()
    processes_before = sandbox_processes()
    yield
    shutil.rmtree(HOME_DIR, ignore_errors=True)
    leaked_cgroups = CgroupTree.detect().sandbox_names() - cgroups_before
    leaked_processes = sandbox_processes() - processes_before
    mounts = rollbox_mounts()
    sandboxes = list((STATE_DIR / "sandboxes").iterdir()) if (STATE_DIR / "sandboxes").exists() else []
    assert not leaked_processes, f"sandbox processes still running: {sorted(leaked_processes)}"
    assert not leaked_cgroups, f"sandbox cgroups left behind: {sorted(leaked_cgroups)}"
    assert not mounts, f"mounts left behind: {mounts}"
    assert not sandboxes, f"sandbox directories left behind: {sandboxes}"
    while os.path.ismount(STATE_DIR):
        subprocess.run(["umount", "--lazy", str(STATE_DIR)], check=True)
    shutil.rmtree(STATE_DIR, ignore_errors=True)


@pytest.fixture
def reap() -> Iterator[None]:
    """For a test that kills a rollbox process: what its sandboxes left (cgroups, directories) is reaped at the end,
    as the next rollbox process on this machine would."""
    from rollbox.sandbox.namespaces._backend import NamespaceHost

    yield
    host = NamespaceHost.get()
    host.state.reap(host.cgroups)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A filesystem of 16 MiB of its own (tmpfs), mounted for the test and unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a filesystem needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "rollbox-test-disk", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.fixture
def held_openings(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """A gate that every pool's opening waits at until it is set: a borrower that waited for another
    configuration's opening is then never served (the test fails on its timeout) whatever the machine's load,
    where a race between one sandbox and a pool's opening could go either way."""
    gate = asyncio.Event()
    enter = SandboxPool.__aenter__

    async def held(pool: SandboxPool) -> SandboxPool:
        await gate.wait()
        return await enter(pool)

    monkeypatch.setattr(SandboxPool, "__aenter__", held)
    return gate


class CountingSandboxes:
    """Warm sandboxes that count those borrowed one at a time: how many are out now, and how many in all."""

    def __init__(self, inner: WarmSandboxes) -> None:
        self.inner, self.out, self.borrowed = inner, 0, 0

    @contextlib.asynccontextmanager
    async def sandbox(self, config: SandboxConfig) -> AsyncIterator[Sandbox]:
        self.out += 1
        self.borrowed += 1
        try:
            async with self.inner.sandbox(config) as sb:
                yield sb
        finally:
            self.out -= 1

    def sandboxes(
        self, count: int, config: SandboxConfig, **kw: Any
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        return self.inner.sandboxes(count, config, **kw)


async def start_without_fds(limits: Limits, network: Network) -> None:
    """Start a real sandbox with no file descriptor to be had (this process's limit at 0 meanwhile), as on a host
    that ran out of them: the start really fails."""
    from rollbox.sandbox.namespaces._backend import NamespaceHost

    NamespaceHost.get()  # set up first: it lifts the limit, once per process
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))
    try:
        sandbox = Sandbox(limits=limits, network=network)
        await sandbox.__aenter__()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    await sandbox.close()
    raise AssertionError("a sandbox started without a file descriptor")
