"""The seccomp filter, proved by running real programs under bubblewrap with it installed.

Each refused call is made through ctypes ``syscall`` with arguments that the kernel itself would reject with
a different errno (a NULL pointer, a bad fd, an unknown command), so that a passing test means the filter
answered, not the kernel; ``test_probes_without_filter_get_other_answers`` checks exactly that. The syscall
numbers below are written out again on purpose rather than imported, so that a wrong number in the module
shows up here.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from rollbox.sandbox._errors import IsolationUnavailable
from rollbox.sandbox.namespaces._seccomp import DENIED_SYSCALLS, build_filter

if shutil.which("bwrap") is None:
    pytest.skip("bubblewrap (`bwrap`) is not on PATH; these tests run programs under it", allow_module_level=True)

PYTHON = os.path.realpath(sys.executable)

# Syscall numbers from arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
_NR = {
    "x86_64": {
        "ioctl": 16, "socket": 41, "clone": 56, "getpid": 39, "ptrace": 101, "personality": 135,
        "mount": 165, "init_module": 175, "clock_settime": 227, "kexec_load": 246, "keyctl": 250,
        "unshare": 272, "perf_event_open": 298, "setns": 308, "bpf": 321, "io_uring_setup": 425,
        "clone3": 435, "open_tree_attr": 467, "socketpair": 53, "setrlimit": 160, "prlimit64": 302,
        "memfd_secret": 447,
    },
    "aarch64": {
        "ioctl": 29, "socket": 198, "clone": 220, "getpid": 172, "ptrace": 117, "personality": 92,
        "mount": 40, "init_module": 105, "clock_settime": 112, "kexec_load": 104, "keyctl": 219,
        "unshare": 97, "perf_event_open": 241, "setns": 268, "bpf": 280, "io_uring_setup": 425, "clone3": 435,
        "open_tree_attr": 467, "socketpair": 199, "setrlimit": 164, "prlimit64": 261, "memfd_secret": 447,
    },
}  # fmt: skip

# Defines `call(name, *args)`, which returns the errno of a failed syscall or 0 on success.
_PRELUDE = f"""
import ctypes, json, os, platform
NR = {_NR!r}[platform.machine()]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(NR[name]), *(ctypes.c_long(a) for a in args))
    if result == 0 and name == "clone":
        os._exit(0)  # the child of a raw clone: leave before running any more Python
    if result > 0 and name == "clone":
        os.waitpid(result, 0)
    return ctypes.get_errno() if result == -1 else 0
"""

CLONE_NEWUSER = 0x10000000
CLONE_PARENT, CLONE_THREAD = 0x00008000, 0x00010000
# name -> (call arguments, errno the filter must produce)
_REFUSED: dict[str, tuple[str, int]] = {
    "mount": ('"mount", 0, 0, 0, 0, 0', errno.EPERM),
    "setns": ('"setns", -1, 0', errno.EPERM),
    "ptrace": ('"ptrace", 2, 999999, 0, 0', errno.EPERM),  # PTRACE_PEEKDATA on a pid that does not exist
    "bpf": ('"bpf", 9999, 0, 0', errno.EPERM),
    "keyctl": ('"keyctl", 9999, 0, 0, 0, 0', errno.EPERM),
    "kexec_load": ('"kexec_load", 0, 0, 0, 0xFFFF0000', errno.EPERM),
    "init_module": ('"init_module", 0, 0, 0', errno.EPERM),
    "clock_settime": ('"clock_settime", 9999, 0', errno.EPERM),
    "perf_event_open": ('"perf_event_open", 0, 0, -1, -1, 0', errno.EPERM),
    "io_uring_setup": ('"io_uring_setup", 0, 0', errno.EPERM),
    "clone_newuser": (f'"clone", {CLONE_NEWUSER | signal.SIGCHLD}, 0, 0, 0, 0', errno.EPERM),
    # CLONE_THREAD without CLONE_SIGHAND: the kernel alone refuses it (EINVAL), so no child is ever made here.
    "clone_parent": (f'"clone", {CLONE_PARENT | CLONE_THREAD | signal.SIGCHLD}, 0, 0, 0, 0', errno.EPERM),
    "clone3": ('"clone3", 0, 0', errno.ENOSYS),
    # Newer than the filter's review (LAST_REVIEWED_SYSCALL): refused as if the kernel lacked it.
    "beyond_review": ('"open_tree_attr", -1, 0, 0, 0, 0', errno.ENOSYS),
    "ioctl_tiocsti": ('"ioctl", -1, 0x5412, 0', errno.EPERM),
    "ioctl_tioclinux": ('"ioctl", -1, 0x541C, 0', errno.EPERM),
    "personality_no_aslr": ('"personality", 0x0040000', errno.EPERM),  # ADDR_NO_RANDOMIZE
    "socket_af_inet6": ('"socket", 10, 1, 0', errno.EACCES),
    "socket_af_packet": ('"socket", 17, 3, 0', errno.EACCES),
    "socketpair_af_vsock": ('"socketpair", 40, 2, 0, 0', errno.EACCES),  # AF_VSOCK ignores network namespaces
    # Netlink protocols but NETLINK_ROUTE: the kernel loads modules for them on anyone's request (SOCK_RAW).
    "netlink_generic": ('"socket", 16, 3, 16', errno.EACCES),
    "netlink_sock_diag": ('"socket", 16, 3, 4', errno.EACCES),
    "netlink_unregistered": ('"socket", 16, 3, 31', errno.EACCES),
    # Inet sockets but TCP and UDP (refused with or without allow_inet): SCTP, UDP-Lite, DCCP, MPTCP, a TCP
    # datagram (a kind the kernel looks for a module for), SOCK_SEQPACKET.
    "inet_sctp": ('"socket", 2, 1, 132', errno.EACCES),
    "inet6_udplite": ('"socket", 10, 2, 136', errno.EACCES),
    "inet_dccp": ('"socket", 2, 6, 33', errno.EACCES),
    "inet6_mptcp": ('"socket", 10, 1, 262', errno.EACCES),
    "inet_tcp_datagram": ('"socket", 2, 2, 6', errno.EACCES),
    "inet_seqpacket": ('"socket", 2, 5, 0', errno.EACCES),
    # RLIMIT_CORE stays 1 (no core_pattern helper): setting it is refused, however the pointer is spelled.
    "setrlimit_core": ('"setrlimit", 4, 0', errno.EPERM),
    "prlimit_core": ('"prlimit64", 0, 4, 1, 0', errno.EPERM),
    "prlimit_core_high_pointer": (f'"prlimit64", 0, 4, {1 << 32}, 0', errno.EPERM),
    "prlimit_other_pid_core": ('"prlimit64", 1, 4, 1, 0', errno.EPERM),
    "memfd_secret": ('"memfd_secret", 0', errno.ENOSYS),
    # Last: without the filter it succeeds and would change what the calls after it see.
    "unshare_newuser": (f'"unshare", {CLONE_NEWUSER}', errno.EPERM),
}
# Where the kernel may itself answer EPERM to an unprivileged caller (depending on version and sysctls), the
# unfiltered run cannot tell the two apart.
_KERNEL_MAY_REFUSE = frozenset(
    [
        *("bpf", "kexec_load", "init_module", "io_uring_setup", "clone_newuser", "unshare_newuser", "beyond_review"),
        "memfd_secret",  # ENOSYS where the kernel keeps it off (secretmem.enable=0)
    ]
)  # (a kernel older than 6.15 lacks open_tree_attr)


def _run(code: str, *, allow_inet: bool = False, seccomp: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``_PRELUDE`` then Python ``code`` in a bubblewrap sandbox, filtered unless ``seccomp`` is false."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--die-with-parent"]
    argv += ["--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    fds: tuple[int, ...] = ()
    if seccomp:
        fd = os.memfd_create("rollbox-seccomp")
        os.write(fd, build_filter(allow_inet=allow_inet))
        os.lseek(fd, 0, os.SEEK_SET)
        argv += ["--seccomp", str(fd)]
        fds = (fd,)
    argv += ["--", PYTHON, "-I", "-S", "-c", _PRELUDE + textwrap.dedent(code)]
    try:
        return subprocess.run(argv, pass_fds=fds, capture_output=True, text=True, timeout=60, check=False)
    finally:
        for fd in fds:
            os.close(fd)


def _probe(names: list[str], *, allow_inet: bool = False, seccomp: bool = True) -> dict[str, int]:
    """Return the errno (0 for success) of each named probe from ``_REFUSED``, made in one sandbox."""
    calls = ", ".join(f"{name!r}: call({_REFUSED[name][0]})" for name in names)
    proc = _run(f"print(json.dumps({{{calls}}}))", allow_inet=allow_inet, seccomp=seccomp)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, int] = json.loads(proc.stdout)
    return result


def test_refused_syscalls_get_the_documented_errno() -> None:
    got = _probe(list(_REFUSED))
    expected = {name: want for name, (_, want) in _REFUSED.items()}
    assert {k: errno.errorcode.get(v, v) for k, v in got.items()} == {
        k: errno.errorcode[v] for k, v in expected.items()
    }


def test_probes_without_filter_get_other_answers() -> None:
    got = _probe(list(_REFUSED), seccomp=False)
    for name, (_, filtered) in _REFUSED.items():
        if name not in _KERNEL_MAY_REFUSE:
            assert got[name] != filtered, f"{name}: the kernel alone answers {errno.errorcode.get(got[name])}"


def test_denied_list_names_the_probed_calls() -> None:
    probed = {"mount", "setns", "ptrace", "bpf", "keyctl", "kexec_load", "init_module", "clock_settime"}
    assert probed | {"perf_event_open", "io_uring_setup", "unshare"} <= set(DENIED_SYSCALLS)
    assert not {"clone", "clone3", "ioctl", "socket", "personality"} & set(DENIED_SYSCALLS)


@pytest.mark.parametrize("allow_inet", [False, True])
def test_sockets_that_would_load_modules_are_refused_with_or_without_inet(allow_inet: bool) -> None:
    names = [name for name in _REFUSED if name.startswith(("netlink_", "inet"))]
    assert _probe(names, allow_inet=allow_inet) == dict.fromkeys(names, errno.EACCES)


def test_what_the_c_library_and_python_need_stays_allowed() -> None:
    # NETLINK_ROUTE (getaddrinfo, if_nameindex), TCP and UDP with their type flags, reading RLIMIT_CORE.
    nonblock_cloexec = 0o4000 | 0o2000000
    code = f"""
        import resource, socket
        print(json.dumps([
            call("socket", 16, 3, 0), call("socket", 16, 2, 0),
            call("socket", 2, 1 | {nonblock_cloexec}, 6), call("socket", 10, 2 | {nonblock_cloexec}, 17),
            call("socket", 2, 1, 0), call("socket", 10, 2, 0), call("prlimit64", 0, 4, 0, 0),
            len(socket.if_nameindex()) > 0, resource.getrlimit(resource.RLIMIT_CORE) is not None,
        ]))
    """
    proc = _run(code, allow_inet=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [0, 0, 0, 0, 0, 0, 0, True, True]


@pytest.mark.parametrize("allow_inet", [False, True])
def test_af_inet_socket_follows_allow_inet(allow_inet: bool) -> None:
    got = _probe(["socket_af_inet6", "socket_af_packet"], allow_inet=allow_inet)
    assert got == {"socket_af_inet6": 0 if allow_inet else errno.EACCES, "socket_af_packet": errno.EACCES}
    proc = _run("print(call('socket', 2, 1, 0))", allow_inet=allow_inet)  # AF_INET, SOCK_STREAM
    assert proc.stdout.strip() == ("0" if allow_inet else str(errno.EACCES)), proc.stderr


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the x32 ABI exists only on x86_64")
def test_x32_syscall_kills_the_process() -> None:
    code = """
        pid = os.fork()
        if pid == 0:
            libc.syscall(ctypes.c_long(0x40000000 | NR["getpid"]))
            os._exit(0)
        print(os.waitpid(pid, 0)[1])
    """
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr
    status = int(proc.stdout)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSYS


_WORKS = {
    "thread": """
        import threading
        box = []
        t = threading.Thread(target=box.append, args=["ok"])
        t.start(); t.join()
        print(box[0])
    """,
    "fork": """
        import os
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        print("ok" if os.WEXITSTATUS(os.waitpid(pid, 0)[1]) == 7 else "bad exit")
    """,
    "subprocess": """
        import subprocess
        out = subprocess.run(["/bin/sh", "-c", "echo hi"], capture_output=True, text=True, check=True).stdout
        print("ok" if out == "hi\\n" else repr(out))
    """,
    "socketpair": """
        import socket
        a, b = socket.socketpair()
        a.sendall(b"ok")
        print(b.recv(2).decode())
    """,
    "netlink": """
        import socket
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE).close()
        print("ok")
    """,
    "uname": """
        import os
        print("ok" if os.uname().sysname == "Linux" else "bad uname")
    """,
    "personality_query": """
        print("ok" if libc.personality(ctypes.c_ulong(0xFFFFFFFF)) != -1 else ctypes.get_errno())
    """,
    "ioctl_other_request": f"""
        print("ok" if call("ioctl", -1, 0x541B, 0) == {errno.EBADF} else "filtered")  # FIONREAD
    """,
}


@pytest.mark.parametrize("name", sorted(_WORKS))
def test_ordinary_things_keep_working(name: str) -> None:
    proc = _run(_WORKS[name])
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr


def test_loopback_tcp_works_when_inet_is_allowed() -> None:
    code = """
        import socket
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.bind(("127.0.0.1", 0))
        server.listen()
        client = socket.create_connection(server.getsockname(), timeout=5)
        conn, _ = server.accept()
        client.sendall(b"ok")
        print(conn.recv(2).decode())
    """
    proc = _run(code, allow_inet=True)
    assert (proc.returncode, proc.stdout.strip()) == (0, "ok"), proc.stderr


@pytest.mark.parametrize("allow_inet", [False, True])
def test_program_fits_the_kernel_limits(allow_inet: bool) -> None:
    program = build_filter(allow_inet=allow_inet)
    assert len(program) % 8 == 0
    assert 0 < len(program) // 8 < 4096


def test_unknown_architecture_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    build_filter.cache_clear()  # the filter is built once per process; build it afresh for this machine
    try:
        with pytest.raises(IsolationUnavailable, match=r"'riscv64'.*aarch64, x86_64"):
            build_filter(allow_inet=False)
    finally:
        build_filter.cache_clear()
