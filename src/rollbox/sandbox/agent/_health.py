"""Is a sandbox's helper still what it was? What another process of its uid could have changed about it.

The program in a sandbox runs as the same uid as the sandbox's agent and zygote, so it can lower their rlimits
(``prlimit``), renice them, move their CPU affinity or I/O priority, raise their OOM score, or stop them. None of
that reaches a host, but a reused sandbox must not hand it to its next user: before reuse the host compares each
helper's fingerprint with the one taken when it started, and restarts the sandbox when anything differs.
"""

from __future__ import annotations

import ctypes
import os
import platform

from rollbox.sandbox._kernel import read_kernel_file

__all__ = ["fingerprint", "start_time"]

_SYS_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(platform.machine())
_SYS_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}.get(platform.machine())
_SYS_SCHED_GETSCHEDULER = {"x86_64": 145, "aarch64": 120}.get(platform.machine())
_SCHED_ATTR_SIZE = 56
_IOPRIO_WHO_PROCESS = 1
_libc = ctypes.CDLL(None, use_errno=True)


def start_time(pid: int) -> str | None:
    """When process ``pid`` (host pid) started, in clock ticks since boot: with the pid, it names one process
    (a pid alone may have been reused). None when it is gone."""
    try:
        stat = read_kernel_file(f"/proc/{pid}/stat")
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[19]  # proc(5): field 22, here counted after comm


def fingerprint(pid: int) -> tuple[str, ...] | None:
    """The changeable attributes of process ``pid`` (host pid), or None when it is gone or unreadable."""
    try:
        stat = read_kernel_file(f"/proc/{pid}/stat")
        limits = read_kernel_file(f"/proc/{pid}/limits")
        oom = read_kernel_file(f"/proc/{pid}/oom_score_adj").strip()
        affinity = ",".join(map(str, sorted(os.sched_getaffinity(pid))))
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    # stopped or not, nice, rt_priority, policy (proc(5): fields 3, 19, 40, 41; here counted after comm)
    scheduling = ("stopped" if fields[0] in "Tt" else "live", fields[16], fields[37], fields[38])
    ioprio = str(_libc.syscall(_SYS_IOPRIO_GET, _IOPRIO_WHO_PROCESS, pid)) if _SYS_IOPRIO_GET else ""
    # The whole scheduling attribute (slice length, utilization clamps, flags) and the policy with its
    # SCHED_RESET_ON_FORK bit: children inherit them.
    attr = ctypes.create_string_buffer(_SCHED_ATTR_SIZE)
    if _SYS_SCHED_GETATTR is not None and _libc.syscall(_SYS_SCHED_GETATTR, pid, attr, _SCHED_ATTR_SIZE, 0) == 0:
        sched_attr = attr.raw.hex()
    else:
        sched_attr = "unreadable"
    policy = str(_libc.syscall(_SYS_SCHED_GETSCHEDULER, pid)) if _SYS_SCHED_GETSCHEDULER is not None else ""
    return (*scheduling, limits, affinity, oom, ioprio, sched_attr, policy)
