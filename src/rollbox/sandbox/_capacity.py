"""How many live sandboxes this host can hold: each limit that bounds them, read now, divided by what a sandbox
really takes of it, measured on sandboxes opened for the purpose.

What one live sandbox takes: host descriptors of the process that opened it (its open files limit bounds each
process), processes and threads (the pids cgroups rollbox runs in, ``kernel.pid_max``, ``kernel.threads-max``
bound the machine), memory cgroups (the kernel's ids, 65,535, bound the machine), and memory. Memory per sandbox is
the larger of what the probe's sandboxes add to the memory charged to rollbox's cgroup and what they add to the
machine's kernel and process memory in ``/proc/meminfo`` (slab, page tables, kernel stacks, per-CPU, anonymous and
shared pages): most of a sandbox is kernel memory that no cgroup is charged for (its namespaces, mounts and
cgroups), about a MiB, against a few tens of KiB charged. The kernel's share moves with the number of sandboxes
open and with what the machine has held since it booted (each memory cgroup keeps an array over every filesystem's
shrinker: docs/performance.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ._kernel import open_files_ceiling, read_kernel_file
from ._limits import Limits
from ._shortage import machine_tasks, own_cgroup_dirs

__all__ = ["Capacity", "Limit", "measure"]

#: Sandboxes the probe opens; and, for memory (read on the whole machine, where whatever else runs moves it too),
#: up to this many where the limits leave room for them.
_PROBE_SANDBOXES, _PROBE_MEMORY_SANDBOXES = 16, 64
#: What /proc/meminfo counts of a sandbox: the kernel's memory for it and its processes' pages.
_MEMINFO_PARTS = ("Slab", "PageTables", "KernelStack", "Percpu", "AnonPages", "Shmem")
_MEMCG_IDS = 65_535


@dataclass(frozen=True)
class Limit:
    """One limit on live sandboxes: what bounds them, its room now, what one sandbox takes, and so how many."""

    #: What it is (``open files``, ``processes``, ...).
    resource: str
    #: Where the limit is and its numbers, in words.
    detail: str
    #: Whether it bounds each process that opens sandboxes (open files), rather than the whole host.
    per_process: bool
    #: What one live sandbox takes of it, measured.
    each: float
    #: Sandboxes it allows beyond those open now.
    sandboxes: int
    #: What to raise for more.
    fix: str


@dataclass(frozen=True)
class Capacity:
    """The limits on live sandboxes here, each measured."""

    limits: tuple[Limit, ...]

    @property
    def per_process(self) -> Limit:
        """The tightest limit on one process's sandboxes."""
        return min(self.limits, key=lambda limit: limit.sandboxes)

    @property
    def host(self) -> Limit:
        """The tightest limit on the host's sandboxes, across processes."""
        return min((limit for limit in self.limits if not limit.per_process), key=lambda limit: limit.sandboxes)

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "per_process": self.per_process.sandboxes,
            "host": self.host.sandboxes,
            "limits": [asdict(limit) for limit in self.limits],
        }


async def measure() -> Capacity:
    """Open a few sandboxes, see what each takes of every limit, and divide each limit's room by it.

    Raises:
        SandboxError: the probe's sandboxes could not be opened.
    """
    from ._sandbox import Sandbox
    from .namespaces._backend import NamespaceSandbox

    # What an idle sandbox takes does not depend on its limits; open files are kept to what can be given here.
    limits = Limits(disk_bytes=16 << 20, open_files=min(Limits().open_files, open_files_ceiling()))
    async with Sandbox(limits=limits) as first:  # what rollbox opens once (the spawner, the shared root)
        await first.exec(["true"])
    before_fds, before_memory = _open_fds(), _memory_counts()
    opened: list[Sandbox] = []

    async def open_idle(count: int) -> None:
        for _ in range(count):
            sandbox = Sandbox(limits=limits)
            await sandbox.__aenter__()
            opened.append(sandbox)
            await sandbox.exec(["true"])  # with its next command's process ready, as an idle sandbox is
            if sandbox._spare is not None:
                await sandbox._spare

    try:
        await open_idle(_PROBE_SANDBOXES)
        await asyncio.sleep(0.5)  # deferred kernel work (freed namespaces, RCU) settles
        impls = [sb._impl for sb in opened if isinstance(sb._impl, NamespaceSandbox)]
        fds = (_open_fds() - before_fds) / len(opened)
        # Each pids cgroup above rollbox counts what is below it: the launchers and agents, and the commands'
        # processes where the sandboxes' cgroups are below it too.
        where = _sandbox_tasks({impl.uid for impl in impls})
        tasks = len(where) / len(impls)
        limited = _pids_cgroups()
        each_below = {d: sum(1 for path in where if _below(path, d)) / len(impls) for d in limited}
        memcgs = sum(_memory_cgroups(impl.memory_cgroup) for impl in impls) / len(impls)
        # More for memory, within half of what the limits leave.
        rooms = [(open_files_ceiling() - _open_fds()) / max(fds, 1.0)]
        rooms += [(most - current) / each_below[d] for d, (most, current) in limited.items() if each_below[d] > 0]
        more = min(_PROBE_MEMORY_SANDBOXES - len(opened), int(min(rooms) / 2))
        if more > 0:
            await open_idle(more)
            await asyncio.sleep(0.5)
        memory, probed = _memory_taken(before_memory, _memory_counts()) / len(opened), len(opened)
    finally:
        for sandbox in opened:
            await sandbox.close()
    # Each limit's room is read with the probe's sandboxes closed again: how many more than are open now.
    pids = {d: (most, current, each_below[d]) for d, (most, current) in _pids_cgroups().items() if d in each_below}
    measured = (_open_files(fds), _processes(tasks, pids), _memcgs(memcgs))
    return Capacity((*measured, _memory(memory, probed)) if memory > 0 else measured)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _memory_counts() -> tuple[int | None, int]:
    """(the memory charged to the cgroup rollbox runs in, or None where it runs in none of its own; the kernel's and
    processes' memory of the machine, :data:`_MEMINFO_PARTS`)."""
    meminfo = _meminfo()
    machine = sum(meminfo.get(part, 0) for part in _MEMINFO_PARTS)
    for directory in own_cgroup_dirs("memory")[:1]:
        if directory.parent != directory:  # not the root, which counts the machine
            for name in ("memory.current", "memory.usage_in_bytes"):
                with contextlib.suppress(OSError):
                    return int(read_kernel_file(directory / name)), machine
    return None, machine


def _memory_taken(before: tuple[int | None, int], after: tuple[int | None, int]) -> int:
    """What the probe's sandboxes took of memory: the larger of the rise in the memory charged to rollbox's cgroup
    (which other work on the machine does not move, but which misses the kernel memory no cgroup is charged for:
    most of a sandbox) and the rise in the machine's kernel and process memory."""
    charged = after[0] - before[0] if after[0] is not None and before[0] is not None else 0
    return max(charged, after[1] - before[1], 0)


def _meminfo() -> dict[str, int]:
    """/proc/meminfo, in bytes."""
    return {
        line.split(":")[0]: int(line.split()[1]) << 10
        for line in read_kernel_file("/proc/meminfo").splitlines()
        if len(line.split()) >= 2
    }


def _mem_available() -> int:
    return _meminfo().get("MemAvailable", 0)


def _sandbox_tasks(uids: set[int]) -> list[Path]:
    """The pids cgroup directory of every process and thread running as one of ``uids`` (sandboxes' host uids: each
    is its sandbox's own, for its launcher, agent and next command's process)."""
    from .namespaces._cgroup import cgroup_mounts

    mounts = cgroup_mounts()
    mount, controller = (mounts["pids"], "pids") if "pids" in mounts else (mounts[""], "")
    found = []
    for entry in os.scandir("/proc"):
        try:
            if not entry.name.isdigit() or os.stat(entry.path).st_uid not in uids:
                continue
            for task in os.listdir(f"{entry.path}/task"):
                for line in read_kernel_file(f"{entry.path}/task/{task}/cgroup").splitlines():
                    _id, names, path = line.split(":", 2)
                    if controller in names.split(",") or names == controller:
                        found.append(mount / path.lstrip("/"))
        except OSError:
            continue
    return found


def _below(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


def _memory_cgroups(directory: str) -> int:
    """A sandbox's memory cgroups: its own (``directory``) and those of its commands (the next one's, made ahead)."""
    return 1 + sum(1 for entry in os.scandir(directory) if entry.is_dir())


def _sandboxes(room: float, each: float) -> int:
    return int(room // each) if each > 0 else 0


def _open_files(each: float) -> Limit:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = hard - _open_fds()
    return Limit(
        "open files",
        f"RLIMIT_NOFILE {hard:,} (the hard limit: rollbox lifts its soft limit to it), {room:,} free in this "
        f"process; {each:.1f} descriptors a sandbox",
        True,
        each,
        _sandboxes(room, each),
        "raise the hard limit (ulimit -Hn, systemd's LimitNOFILE=), or open sandboxes from several processes",
    )


def _pids_cgroups() -> dict[Path, tuple[int, int]]:
    """(pids.max, pids.current) of each pids cgroup rollbox runs in that has a limit."""
    found = {}
    for directory in own_cgroup_dirs("pids"):
        try:
            most, current = (
                read_kernel_file(directory / "pids.max").strip(),
                read_kernel_file(directory / "pids.current"),
            )
        except OSError:
            continue
        if most != "max":
            found[directory] = (int(most), int(current))
    return found


def _processes(each: float, cgroups: dict[Path, tuple[int, int, float]]) -> Limit:
    """The first process limit to run out: the machine's (``each`` processes and threads a sandbox), or a pids
    cgroup's (what its count rose by, a sandbox)."""
    tasks = machine_tasks() or 0
    limits = [
        (int(read_kernel_file("/proc/sys/kernel/pid_max")) - 300 - tasks, each, "kernel.pid_max"),
        (int(read_kernel_file("/proc/sys/kernel/threads-max")) - tasks, each, "kernel.threads-max"),
        *((most - current, rose, f"pids.max of {directory}") for directory, (most, current, rose) in cgroups.items()),
    ]
    room, taken, where = min(limits, key=lambda limit: _sandboxes(limit[0], limit[1]))
    return Limit(
        "processes",
        f"{room:,} more processes and threads before {where} ({tasks:,} on the machine now); {taken:.1f} a "
        f"sandbox there ({each:.1f} in all: its launcher, its agent, its next command's process)",
        False,
        taken,
        _sandboxes(room, taken),
        f"raise {where}",
    )


def _memcgs(each: float) -> Limit:
    count = next(
        (
            int(line.split()[2])
            for line in read_kernel_file("/proc/cgroups").splitlines()
            if line.startswith("memory\t")
        ),
        0,
    )
    room = _MEMCG_IDS - count
    return Limit(
        "memory cgroups",
        f"{count:,} of the kernel's {_MEMCG_IDS:,} in use; {each:.1f} a sandbox",
        False,
        each,
        _sandboxes(room, each),
        "none: the kernel's limit (close sandboxes)",
    )


def _memory(each: float, probed: int) -> Limit:
    room, where = _mem_available(), "MemAvailable"
    for directory in own_cgroup_dirs("memory"):
        for usage_name, limit_name in (
            ("memory.current", "memory.max"),
            ("memory.usage_in_bytes", "memory.limit_in_bytes"),
        ):
            try:
                usage, most = (
                    read_kernel_file(Path(directory, usage_name)),
                    read_kernel_file(Path(directory, limit_name)),
                )
            except OSError:
                continue
            if most.strip() != "max" and int(most) < 1 << 60 and int(most) - int(usage) < room:
                room, where = int(most) - int(usage), f"the memory cgroup {directory}"
    return Limit(
        "memory",
        f"{room >> 20:,} MiB free ({where}); {each / 2**20:.2f} MiB a sandbox (measured with {probed} "
        "open; the kernel's share grows with the number open)",
        False,
        each,
        _sandboxes(room, each),
        "more memory, or a higher memory limit on rollbox's cgroup",
    )
