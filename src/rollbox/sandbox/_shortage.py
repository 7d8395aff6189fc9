"""What the host ran short of: an OS error that means a resource ran out, said as the resource, its numbers now,
and what to raise.

Every place where the sandbox layer turns an ``OSError`` (or an errno a helper reported) into a message goes
through :func:`host_error`. The errno alone is ambiguous (``EAGAIN`` from a fork is a process limit, from a read
it is nothing; ``ENOSPC`` from a mkdir in a cgroup is the kernel's memory cgroup ids, in the state directory its
tmpfs), so each caller says what it was making. Every number is read when the error happens; where reading it
needs a descriptor and none is left, the message says so without it.
"""

from __future__ import annotations

import errno
import os
import re
import resource
from collections.abc import Callable
from pathlib import Path
from typing import Literal

__all__ = [
    "SHORTAGES",
    "Making",
    "agent_error",
    "agent_ran_short",
    "host_error",
    "machine_tasks",
    "own_cgroup_dirs",
    "shortage",
]

#: What a failed call was making, which decides what an ambiguous errno means.
Making = Literal["process", "namespace", "cgroup", "state", "other"]

#: The errnos that can mean the host ran short of something (which one depends on what was being made).
SHORTAGES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOSPC, errno.EAGAIN, errno.EUSERS})

_DOCTOR = "`rollbox doctor` says how many sandboxes this host can hold"
#: The kernel's memory cgroup ids (MEM_CGROUP_ID_MAX): a mkdir in the memory controller fails beyond them.
_MEMCG_IDS = 65_535


def host_error(what: str, cause: OSError | int, making: Making = "other") -> str:
    """``what`` failed with ``cause`` (an OSError, or an errno a helper reported): its message, with the resource
    that ran out and what to raise when the errno means one did.

    >>> host_error("cannot start a sandbox", OSError(errno.ENOENT, "No such file or directory"))
    'cannot start a sandbox: No such file or directory'
    """
    number = cause if isinstance(cause, int) else cause.errno
    if number is None:
        return f"{what}: {cause}"
    text = os.strerror(number) if isinstance(cause, int) or not cause.strerror else cause.strerror
    explained = shortage(number, making)
    return f"{what}: {text}" + (f": {explained}" if explained else "")


#: A failed step as ``agent.c`` reports it on stderr (``die``): what it was doing, the C library's words, the errno.
_AGENT_STEP = re.compile(r"^rollbox-agent: (?P<what>.+): [^:\n]+ \(errno (?P<errno>\d+)\)$", re.MULTILINE)


def agent_error(report: str) -> str:
    """What ``agent.c`` wrote on stderr, each failed step in it said as :func:`host_error` says it. In the agent
    only a fork or a clone fails with ``EAGAIN``, and ``ENOSPC`` is a namespace limit (a clone, an unshare): a
    mount namespace would need 100,000 mounts (``fs.mount-max``) first."""

    def said(step: re.Match[str]) -> str:
        number = int(step["errno"])
        return host_error(f"rollbox-agent: {step['what']}", number, _agent_making(number))

    return _AGENT_STEP.sub(said, report)


def agent_ran_short(report: str) -> bool:
    """Whether a step ``agent.c`` reported as failed (see :func:`agent_error`) failed for want of a resource."""
    return any(
        shortage(int(step["errno"]), _agent_making(int(step["errno"]))) is not None
        for step in _AGENT_STEP.finditer(report)
    )


def _agent_making(number: int) -> Making:
    return "process" if number == errno.EAGAIN else "namespace"


def shortage(number: int, making: Making = "other") -> str | None:
    """The resource behind errno ``number`` when it means one ran out, with its numbers and the fix; else None."""
    explain: Callable[[], str] | None = {
        errno.EMFILE: _open_files,
        errno.ENFILE: _machine_files,
        errno.ENOMEM: _memory,
        errno.EUSERS: _nesting,
    }.get(number)
    if explain is None and number == errno.EAGAIN:
        explain = {"process": _processes, "cgroup": _cgroup_descendants}.get(making)
    if explain is None and number == errno.ENOSPC:
        explain = {"namespace": _namespaces, "cgroup": _memory_cgroups, "state": _state_dir}.get(making)
    return None if explain is None else explain()


def _read(path: str | Path) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _open_files() -> str:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        held = f"{len(os.listdir('/proc/self/fd')):,} open now"
    except OSError:
        held = "every one of them open"
    return (
        f"this process reached its limit on open files (RLIMIT_NOFILE {_limit(soft)}, hard limit {_limit(hard)}; "
        f"{held}). rollbox raises its soft limit to the hard one; raise the hard limit (ulimit -Hn, systemd's "
        f"LimitNOFILE=, docker run --ulimit nofile=N:N). {_DOCTOR}"
    )


def _machine_files() -> str:
    counts = (_read("/proc/sys/fs/file-nr") or "").split()
    used = f"{int(counts[0]):,} of {int(counts[2]):,} in use" if len(counts) == 3 else "all in use"
    return f"the machine reached its limit on open files (fs.file-max: {used}): raise it (sysctl -w fs.file-max=N)"


def _memory() -> str:
    info = dict(line.split(":", 1) for line in (_read("/proc/meminfo") or "").splitlines() if ":" in line)
    available = info.get("MemAvailable", "").split()
    total = info.get("MemTotal", "").split()
    machine = (
        f"{int(available[0]) >> 10:,} MiB of {int(total[0]) >> 10:,} MiB available"
        if available and total
        else "its memory unreadable"
    )
    cgroup = _own_memory_cgroup()
    return (
        f"the kernel could not allocate memory (the machine: {machine}{cgroup}): close sandboxes, or give "
        f"rollbox more memory. {_DOCTOR}"
    )


def _own_memory_cgroup() -> str:
    """'; the memory cgroup rollbox runs in: X of Y MiB' where it has a limit, else ''."""
    for directory in own_cgroup_dirs("memory"):
        for usage_name, limit_name in (
            ("memory.current", "memory.max"),
            ("memory.usage_in_bytes", "memory.limit_in_bytes"),
        ):
            usage, limit = _read(directory / usage_name), _read(directory / limit_name)
            if usage is not None and limit is not None and limit != "max" and int(limit) < 1 << 60:
                return f"; the memory cgroup {directory}: {int(usage) >> 20:,} of {int(limit) >> 20:,} MiB"
    return ""


def _processes() -> str:
    """Which process limit is reached: a pids cgroup rollbox runs in, kernel.pid_max, kernel.threads-max."""
    tasks = machine_tasks()
    found: list[str] = []
    for directory in own_cgroup_dirs("pids"):
        current, most = _read(directory / "pids.current"), _read(directory / "pids.max")
        if current is None or most is None or most == "max":
            continue
        # Read a moment after the refused fork, what failed may have ended already (a launcher that gave up): a
        # cgroup whose limit refused a fork ever (pids.events) and that is still near it counts as at it.
        refused = _keyed_count(_read(directory / "pids.events") or "", "max") > 0
        if int(current) >= int(most) - 2 or (refused and int(current) >= int(most) * 9 // 10):
            found.append(
                f"the pids cgroup {directory} is at its limit ({int(current):,} of {int(most):,} processes and "
                "threads): raise pids.max there (systemd's TasksMax=, docker run --pids-limit, the test guard's "
                "--pids)"
            )
    pid_max, threads_max = _read("/proc/sys/kernel/pid_max"), _read("/proc/sys/kernel/threads-max")
    if tasks is not None and pid_max is not None and tasks >= int(pid_max) - 400:
        found.append(
            f"the machine's process ids are all but used up (kernel.pid_max {int(pid_max):,}, {tasks:,} processes "
            "and threads): raise it (sysctl -w kernel.pid_max=4194304)"
        )
    if tasks is not None and threads_max is not None and tasks >= int(threads_max) - 100:
        found.append(
            f"the machine is at kernel.threads-max ({int(threads_max):,}; {tasks:,} processes and threads): raise "
            "it (sysctl -w kernel.threads-max=N)"
        )
    if not found:
        found.append(
            f"a process limit was reached, though none of the machine's is (kernel.pid_max {pid_max}, "
            f"kernel.threads-max {threads_max}, {tasks if tasks is not None else 'an unknown number of'} processes "
            "and threads now, the pids cgroups rollbox runs in below theirs): the RLIMIT_NPROC of the process that "
            "forked"
        )
    return "; ".join(found) + f". Each open sandbox is three processes. {_DOCTOR}"


def _keyed_count(text: str, key: str) -> int:
    """The value of ``key`` in a flat-keyed file such as ``pids.events``; 0 when absent."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def machine_tasks() -> int | None:
    """Processes and threads on the machine now (the kernel's own count, in /proc/loadavg)."""
    fields = (_read("/proc/loadavg") or "").split()
    return int(fields[3].split("/")[1]) if len(fields) > 3 and "/" in fields[3] else None


def _cgroup_descendants() -> str:
    return (
        "the cgroup rollbox makes sandboxes under allows no more descendants (cgroup.max.descendants or "
        "cgroup.max.depth there, or above): raise it"
    )


def _memory_cgroups() -> str:
    count = next(
        (line.split()[2] for line in (_read("/proc/cgroups") or "").splitlines() if line.startswith("memory\t")),
        None,
    )
    now = f"{int(count):,} exist now, besides those still being freed" if count is not None else "all in use"
    return (
        f"the kernel's memory cgroups are all in use (at most {_MEMCG_IDS:,} at once, counting those still being "
        f"freed; {now}); each open sandbox uses two: close sandboxes. {_DOCTOR}"
    )


def _namespaces() -> str:
    limits = ", ".join(f"{path.name}={_read(path)}" for path in sorted(Path("/proc/sys/user").glob("max_*_namespaces")))
    return (
        f"the kernel refused a new namespace: a limit in /proc/sys/user is reached ({limits or 'unreadable'}); "
        "each sandbox makes one namespace of each kind, and its launcher one more mount namespace, counted for "
        "root: raise the one that ran out (sysctl -w user.max_mnt_namespaces=N, ...)"
    )


def _nesting() -> str:
    return "user namespaces nest at most 32 deep, and rollbox already runs 32 deep: run it in a less nested container"


def _state_dir() -> str:
    root = Path(os.environ.get("ROLLBOX_STATE_DIR", "/run/rollbox"))
    try:
        st = os.statvfs(root)
        room = f"{st.f_bavail * st.f_frsize >> 10:,} KiB and {st.f_favail:,} inodes free"
    except OSError:
        room = "its room unreadable"
    return f"rollbox's state directory {root} is full ({room}): free room there, or set ROLLBOX_STATE_DIR"


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else f"{value:,}"


def own_cgroup_dirs(controller: str) -> list[Path]:
    """The cgroup directories of ``controller`` this process is in, and their ancestors, deepest first."""
    from .namespaces._cgroup import cgroup_mounts, own_cgroup_paths

    try:
        mounts, own = cgroup_mounts(), own_cgroup_paths()
    except OSError:
        return []
    mount = mounts.get(controller) or mounts.get("")
    path = own.get(controller) or own.get("")
    if mount is None or path is None:
        return []
    directories = []
    relative = Path(path.lstrip("/"))
    while True:
        directories.append(mount / relative)
        if relative == Path("."):
            return directories
        relative = relative.parent
