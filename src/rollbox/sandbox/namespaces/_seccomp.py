"""A seccomp filter for the sandbox, written as classic BPF without libseccomp.

:func:`build_filter` returns the raw program that the launcher (``agent.c launch --seccomp FD``) installs right
before it executes the sandbox's agent, for the agent and everything it runs. The filter, in the order it decides:

1. A syscall made with a foreign ABI (``seccomp_data.arch`` is not the native audit arch, e.g. i386 through
   ``int 0x80``) or, on x86_64, with the x32 bit set in its number kills the whole process.
2. A syscall numbered above :data:`LAST_REVIEWED_SYSCALL` fails with ``ENOSYS``, as on a kernel that lacks it:
   whatever kernels add later stays out until it is reviewed (a deny list alone would let it in).
3. The syscalls in :data:`DENIED_SYSCALLS` fail with ``EPERM``: namespaces and mounts, tracing and other
   processes' memory, kernel keyrings, modules, kexec, the clock, BPF, perf, io_uring and the like.
4. A few are refused depending on their arguments:

   - ``clone`` with any ``CLONE_NEW*`` flag, or ``CLONE_PARENT`` (a child for the caller's parent to reap: the
     agent or the Python zygote, which would keep it, a zombie, past the command): ``EPERM`` (plain threads and
     fork still work);
   - ``clone3``: ``ENOSYS``, because its flags live in user memory that BPF cannot read; glibc then falls back
     to ``clone``, which rule 4 checks;
   - ``ioctl`` with ``TIOCSTI`` or ``TIOCLINUX`` (pushing keystrokes into a terminal): ``EPERM``;
   - ``personality`` with anything but ``PER_LINUX`` (0) or the query value ``0xffffffff``: ``EPERM``, so that
     nothing can, for example, switch off address-space randomisation for its children;
   - ``socket`` with a family other than ``AF_UNIX`` or ``AF_NETLINK`` (plus ``AF_INET`` and ``AF_INET6`` when
     ``allow_inet`` is true), and ``socketpair`` with any but ``AF_UNIX`` (``AF_VSOCK``, for one, ignores network
     namespaces): ``EACCES``. Within those families only what needs no module: ``AF_NETLINK`` with
     ``NETLINK_ROUTE`` alone (what the C library asks about interfaces and addresses; the kernel loads a module for
     an unknown netlink protocol, a generic netlink family or a socket-diag family on anyone's request), and
     ``AF_INET``/``AF_INET6`` as TCP or UDP streams and datagrams (another protocol or type, such as SCTP, DCCP or
     UDP-Lite, has the kernel look for its module, running ``modprobe`` on the host);
   - ``setrlimit`` and ``prlimit64`` setting ``RLIMIT_CORE`` (reading it is fine): ``EPERM``. The launcher sets it
     to 1, which stops a core file and also the host's ``core_pattern`` pipe helper; a program that lowered it to 0
     would have the kernel run that helper, as root on the host, for each of its crashes.

5. ``memfd_secret`` fails with ``ENOSYS``, as where the kernel was built without it: its pages leave the kernel's
   direct map (splitting it slows the whole machine) and keep the host from hibernating.
6. Everything else is allowed.

Only x86_64 and aarch64 are supported; their syscall numbers are hard-coded below from the kernel's
``arch/x86/entry/syscalls/syscall_64.tbl`` and ``include/uapi/asm-generic/unistd.h``.
"""

from __future__ import annotations

import errno
import functools
import platform
import struct
from dataclasses import dataclass

from rollbox.sandbox._errors import IsolationUnavailable

#: The highest syscall number reviewed for this filter (Linux 6.14's last, ``removexattrat``; x86_64 and aarch64
#: share the numbers from 403 on). Linux 6.15's ``open_tree_attr`` (467) and everything after it get ``ENOSYS``.
LAST_REVIEWED_SYSCALL = 466

#: Syscalls refused with ``EPERM`` whatever their arguments (skipped where an architecture lacks them).
DENIED_SYSCALLS: tuple[str, ...] = (
    # namespaces, mounts and the root directory
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "mount_setattr", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
    # other processes and file handles that bypass path permissions
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "open_by_handle_at", "name_to_handle_at",
    # kernel-wide state
    "bpf", "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load",
    "init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl",
    "syslog", "vhangup", "lookup_dcookie", "nfsservctl", "_sysctl", "uselib",
    # clocks
    "clock_settime", "clock_adjtime", "settimeofday", "adjtimex",
    # large attack surfaces
    "perf_event_open", "userfaultfd", "fanotify_init",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # POSIX message queues outlive their processes in the ipc namespace, which a reused sandbox keeps
    "mq_open",
    # x86 hardware access
    "iopl", "ioperm", "modify_ldt",
)  # fmt: skip


@dataclass(frozen=True)
class _Arch:
    """What the filter needs to know about one architecture."""

    audit_arch: int  # AUDIT_ARCH_* as seen in seccomp_data.arch
    has_x32: bool  # whether syscall numbers with the x32 bit reach the same kernel entry
    syscalls: dict[str, int]


_X86_64 = _Arch(
    audit_arch=0xC000003E,
    has_x32=True,
    syscalls={
        "ioctl": 16, "socket": 41, "socketpair": 53, "clone": 56, "mq_open": 240, "ptrace": 101, "syslog": 103,
        "uselib": 134, "personality": 135, "vhangup": 153, "modify_ldt": 154, "pivot_root": 155, "_sysctl": 156,
        "adjtimex": 159, "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
        "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173, "init_module": 175,
        "delete_module": 176, "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212,
        "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250,
        "unshare": 272, "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303,
        "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
        "process_vm_writev": 311, "kcmp": 312, "finit_module": 313, "kexec_file_load": 320, "bpf": 321,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "clone3": 435, "pidfd_getfd": 438, "mount_setattr": 442, "setrlimit": 160, "prlimit64": 302,
        "memfd_secret": 447,
    },
)  # fmt: skip

# asm-generic numbering; iopl, ioperm, modify_ldt, uselib and _sysctl do not exist here.
_AARCH64 = _Arch(
    audit_arch=0xC00000B7,
    has_x32=False,
    syscalls={
        "lookup_dcookie": 18, "ioctl": 29, "umount2": 39, "mount": 40, "pivot_root": 41, "nfsservctl": 42,
        "chroot": 51, "vhangup": 58, "quotactl": 60, "acct": 89, "personality": 92, "unshare": 97,
        "kexec_load": 104, "init_module": 105, "delete_module": 106, "clock_settime": 112, "syslog": 116,
        "ptrace": 117, "reboot": 142, "settimeofday": 170, "adjtimex": 171, "socket": 198, "socketpair": 199,
        "add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220, "swapon": 224, "swapoff": 225,
        "perf_event_open": 241, "fanotify_init": 262, "name_to_handle_at": 264, "open_by_handle_at": 265,
        "clock_adjtime": 266, "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271,
        "kcmp": 272, "finit_module": 273, "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
        "pidfd_getfd": 438, "mount_setattr": 442, "mq_open": 180, "setrlimit": 164, "prlimit64": 261,
        "memfd_secret": 447,
    },
)  # fmt: skip

_ARCHES = {"x86_64": _X86_64, "aarch64": _AARCH64}

# Classic BPF opcodes (linux/bpf_common.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x00 | 0x00 | 0x20
_JEQ_K = 0x05 | 0x10
_JSET_K = 0x05 | 0x40
_JGE_K = 0x05 | 0x30
_AND_K = 0x04 | 0x50  # BPF_ALU | BPF_AND | BPF_K
_RET_K = 0x06
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000
_RET_ALLOW = 0x7FFF0000
_MAX_INSNS = 4096  # BPF_MAXINSNS

# struct seccomp_data offsets; the low 32 bits of args[i] sit at 16 + 8*i on little-endian machines.
_NR = 0
_ARCH = 4
_X32_BIT = 0x40000000
_CLONE_REFUSED = (
    0x00008000  # CLONE_PARENT
    | 0x00020000  # CLONE_NEWNS
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
    | 0x02000000  # CLONE_NEWCGROUP
    # CLONE_NEWTIME; in clone() this bit belongs to the exit signal, where it can only mean a signal >= 128,
    # which is invalid anyway, so refusing it costs nothing.
    | 0x00000080
)
_TIOCSTI = 0x5412
_TIOCLINUX = 0x541C
_PERSONALITY_QUERY = 0xFFFFFFFF
_AF_UNIX, _AF_INET, _AF_INET6, _AF_NETLINK = 1, 2, 10, 16
_NETLINK_ROUTE = 0
_SOCK_STREAM, _SOCK_DGRAM, _SOCK_TYPE_MASK = 1, 2, 0xF  # the type's other bits are SOCK_NONBLOCK, SOCK_CLOEXEC
_IPPROTO_TCP, _IPPROTO_UDP = 6, 17
_RLIMIT_CORE = 4


def _arg(index: int, *, high: bool = False) -> int:
    """Return the seccomp_data offset of the low (or ``high``) 32 bits of syscall argument ``index``."""
    return 16 + 8 * index + (4 if high else 0)


@dataclass(frozen=True)
class _Insn:
    """One BPF instruction whose jump targets are label names (``None`` means the next instruction)."""

    code: int
    k: int
    jt: str | None = None
    jf: str | None = None


@dataclass(frozen=True)
class _Label:
    """A position in the program that jumps can name."""

    name: str


def _load(offset: int) -> _Insn:
    return _Insn(_LD_W_ABS, offset)


def _ret(value: int) -> _Insn:
    return _Insn(_RET_K, value)


def _jeq(k: int, jt: str | None = None, jf: str | None = None) -> _Insn:
    return _Insn(_JEQ_K, k, jt, jf)


def _jset(k: int, jt: str | None = None, jf: str | None = None) -> _Insn:
    return _Insn(_JSET_K, k, jt, jf)


def _assemble(program: list[_Insn | _Label]) -> bytes:
    """Resolve labels to forward jump offsets and pack each instruction as a native ``struct sock_filter``."""
    positions: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in program:
        if isinstance(item, _Label):
            positions[item.name] = len(insns)
        else:
            insns.append(item)

    def offset(index: int, label: str | None) -> int:
        if label is None:
            return 0
        distance = positions[label] - index - 1
        # Classic BPF only jumps forward, by at most 255 instructions.
        if not 0 <= distance <= 0xFF:
            raise AssertionError(f"seccomp jump from {index} to {label!r} spans {distance} instructions")
        return distance

    if len(insns) > _MAX_INSNS:
        raise AssertionError(f"seccomp program has {len(insns)} instructions; the kernel allows {_MAX_INSNS}")
    return b"".join(
        struct.pack("=HBBI", insn.code, offset(i, insn.jt), offset(i, insn.jf), insn.k) for i, insn in enumerate(insns)
    )


def _program(arch: _Arch, *, allow_inet: bool) -> list[_Insn | _Label]:
    """Return the filter for ``arch`` as instructions and labels, deciding in the module docstring's order."""
    nr = arch.syscalls
    inet_families = [_jeq(_AF_INET, jt="inet"), _jeq(_AF_INET6, jt="inet")] if allow_inet else []
    # (family, type, protocol): a TCP stream or a UDP datagram socket, no other kind.
    inet_kinds: list[_Insn | _Label] = [
        _Label("inet"),
        _load(_arg(1)),
        _Insn(_AND_K, _SOCK_TYPE_MASK),
        _jeq(_SOCK_STREAM, jt="stream"),
        _jeq(_SOCK_DGRAM, jf="eacces"),
        _load(_arg(2)),
        _jeq(0, jt="allow"),
        _jeq(_IPPROTO_UDP, jt="allow", jf="eacces"),
        _Label("stream"),
        _load(_arg(2)),
        _jeq(0, jt="allow"),
        _jeq(_IPPROTO_TCP, jt="allow", jf="eacces"),
    ]
    return [
        _load(_ARCH),
        _jeq(arch.audit_arch, jf="kill"),
        _load(_NR),
        *([_jset(_X32_BIT, jt="kill")] if arch.has_x32 else []),
        _Insn(_JGE_K, LAST_REVIEWED_SYSCALL + 1, jt="enosys"),
        *(_jeq(nr[name], jt="eperm") for name in DENIED_SYSCALLS if name in nr),
        _jeq(nr["clone"], jt="clone"),
        _jeq(nr["clone3"], jt="enosys"),
        _jeq(nr["memfd_secret"], jt="enosys"),
        _jeq(nr["ioctl"], jt="ioctl"),
        _jeq(nr["personality"], jt="personality"),
        _jeq(nr["socket"], jt="socket"),
        _jeq(nr["socketpair"], jt="socketpair"),
        _jeq(nr["setrlimit"], jt="setrlimit"),
        _jeq(nr["prlimit64"], jt="prlimit64"),
        _ret(_RET_ALLOW),
        _Label("setrlimit"),
        _load(_arg(0)),
        _jeq(_RLIMIT_CORE, jt="eperm", jf="allow"),
        _Label("prlimit64"),  # (pid, resource, new limit or NULL, old limit or NULL)
        _load(_arg(1)),
        _jeq(_RLIMIT_CORE, jf="allow"),
        _load(_arg(2)),
        _jeq(0, jf="eperm"),
        _load(_arg(2, high=True)),
        _jeq(0, jt="allow", jf="eperm"),
        _Label("clone"),
        _load(_arg(0)),
        _jset(_CLONE_REFUSED, jt="eperm", jf="allow"),
        _Label("ioctl"),
        _load(_arg(1)),
        _jeq(_TIOCSTI, jt="eperm"),
        _jeq(_TIOCLINUX, jt="eperm", jf="allow"),
        _Label("personality"),
        _load(_arg(0)),
        _jeq(0, jt="allow"),
        _jeq(_PERSONALITY_QUERY, jt="allow", jf="eperm"),
        _Label("socketpair"),
        _load(_arg(0)),
        _jeq(_AF_UNIX, jt="allow", jf="eacces"),
        _Label("socket"),  # (family, type, protocol)
        _load(_arg(0)),
        _jeq(_AF_UNIX, jt="allow"),
        _jeq(_AF_NETLINK, jt="netlink"),
        *inet_families,
        _ret(_RET_ERRNO | errno.EACCES),
        _Label("netlink"),
        _load(_arg(2)),
        _jeq(_NETLINK_ROUTE, jt="allow", jf="eacces"),
        *(inet_kinds if allow_inet else []),
        _Label("eacces"),
        _ret(_RET_ERRNO | errno.EACCES),
        _Label("allow"),
        _ret(_RET_ALLOW),
        _Label("eperm"),
        _ret(_RET_ERRNO | errno.EPERM),
        _Label("enosys"),
        _ret(_RET_ERRNO | errno.ENOSYS),
        _Label("kill"),
        _ret(_RET_KILL_PROCESS),
    ]


@functools.cache
def build_filter(*, allow_inet: bool) -> bytes:
    """Return the seccomp program for ``agent.c launch --seccomp FD`` on this machine.

    Args:
        allow_inet: Also allow ``AF_INET`` and ``AF_INET6`` sockets. Without it the sandboxed program has no
            network at all, not even the loopback interface of its network namespace.

    Returns:
        The raw classic-BPF program: concatenated ``struct sock_filter`` (8 bytes each, native endianness).

    Raises:
        IsolationUnavailable: The machine is neither x86_64 nor aarch64.
    """
    machine = platform.machine()
    arch = _ARCHES.get(machine)
    if arch is None:
        supported = ", ".join(sorted(_ARCHES))
        raise IsolationUnavailable(
            f"rollbox has no seccomp filter for architecture {machine!r}; "
            f"supported architectures: {supported}. Run the sandbox on one of those."
        )
    return _assemble(_program(arch, allow_inet=allow_inet))
