"""rollbox's Python zygote: runs inside a sandbox and serves ``python3 SCRIPT ARGS...`` without starting Python.

    python3 -s zygote.py serve FD

Started once per sandbox by the agent (``agent.c``, ZYGOTE request), it imports what scripts commonly need, then
speaks the agent's protocol on FD: for each SPARE request it forks a child that does exactly what the agent's
spare does (a new session, announcing itself for the host to place it in the command's cgroup, waiting for the
command on its sync socket, then the command's stdin/stdout/stderr and rlimits) and then, instead of exec'ing a new
interpreter, runs the script in the copy of this already-started one, with the command's arguments, environment
and working directory.

The zygote never runs any of the program's code itself, so every child starts from the same pristine state; a
child changes only its own copy. Like the agent it is not trusted by the host: if the program kills it, rollbox
starts another. Only the standard library; it must stay importable by every Python rollbox supports.
"""

import array
import atexit
import builtins
import contextlib
import ctypes
import gc
import importlib
import importlib.machinery
import importlib.util
import marshal
import os
import resource
import runpy
import signal
import socket
import struct
import sys
import threading
import time
import traceback
import types
import zipimport

#: What scripts commonly import: paid for once here instead of in every child.
PRELOADED = (
    "base64", "bisect", "collections", "copy", "functools", "heapq", "itertools", "json", "math", "random", "re",
    "string", "typing",
)  # fmt: skip
for _name in PRELOADED:
    importlib.import_module(_name)
# The compiler sets itself up on first use; done here, a child's first compile costs microseconds, not 1.5 ms.
compile("import os\nx = [i for i in range(3)]\ndef f(a, *b, **c):\n    return {**c}\n", "<warm-up>", "exec")

_SPARE, _READY, _EXITED, _EXEC = 1, 2, 3, 6
_HEADER = struct.Struct("<IIIIqqq")
_EXITED_MSG = struct.Struct("<IiqqII")  # as agent.c's: type, wait status, CPU us, max RSS KiB, the spare's seq
_MAX_REQUEST = 1 << 20
_LIBC = ctypes.CDLL(None)
_PR_SET_DUMPABLE = 4
_SYS_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine, -1)
_SYS_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}.get(os.uname().machine, -1)
_RLIMITS = sorted(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_"))


def _standing() -> tuple[object, ...]:
    """What a program of the sandbox's uid can change about this zygote (it runs as that uid) and a child would
    inherit: rlimits, nice, scheduling policy and attributes, CPU affinity, I/O priority, OOM score."""
    attr = ctypes.create_string_buffer(56)
    _LIBC.syscall(_SYS_SCHED_GETATTR, 0, attr, 56, 0)
    with open("/proc/self/oom_score_adj") as f:
        oom = f.read()
    return (
        [resource.getrlimit(r) for r in _RLIMITS],
        os.getpriority(os.PRIO_PROCESS, 0),
        os.sched_getscheduler(0),
        os.sched_getaffinity(0),
        _LIBC.syscall(_SYS_IOPRIO_GET, 1, 0),  # IOPRIO_WHO_PROCESS, this process
        attr.raw,
        oom,
    )


def _rlimits(cpu_time_s: int, file_size_bytes: int) -> None:
    if cpu_time_s >= 0:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_time_s, cpu_time_s + 1))
    if file_size_bytes >= 0:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_bytes, file_size_bytes))
    # No core dump: the sandbox's launcher set RLIMIT_CORE for everything inside, and the syscall filter refuses to
    # change it (see agent.c, sandbox_rlimits).


def _exit_code(exc: SystemExit) -> int:
    """What a Python process exits with for ``SystemExit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _python_environment(env: dict[str, str]) -> None:
    """Apply what a fresh interpreter reads from its environment at start-up, where a fork still can.

    PYTHONPATH, PYTHONDONTWRITEBYTECODE and PYTHONUNBUFFERED are honoured. The hash seed is the zygote's
    (PYTHONHASHSEED=0, fixed so that runs are reproducible, unless the sandbox's ``interpreter_env`` starts it under
    another); other start-up options are not applied.
    """
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1] = extra
    if env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            stream.reconfigure(write_through=True)  # type: ignore[union-attr]


def _command(sync: socket.socket) -> tuple[list[int], str, list[str], dict[str, str]]:
    """Wait for the command on the sync socket: its stdin/stdout/stderr, cwd, argv and env."""
    fds = array.array("i")
    message, ancillary, _flags, _addr = sync.recvmsg(_MAX_REQUEST, socket.CMSG_SPACE(3 * fds.itemsize))
    if not message:
        os._exit(125)  # not needed after all: the host closed the socket
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    kind, argc, envc = _HEADER.unpack_from(message)[:3]
    strings = message[_HEADER.size :].split(b"\0")
    if kind != _EXEC or len(fds) != 3 or len(strings) < 1 + argc + envc or argc < 2:
        os._exit(125)
    argv = [os.fsdecode(s) for s in strings[1 : 1 + argc]]
    env = dict(os.fsdecode(s).partition("=")[::2] for s in strings[1 + argc : 1 + argc + envc])
    return list(fds), os.fsdecode(strings[0]), argv, env


def _is_archive(path: str, data: bytes) -> bool:
    """Whether ``data``, the file at ``path``, is a zip archive (a zipapp, even behind a shebang line)."""
    if b"PK\x05\x06" not in data[-(1 << 16) - 22 :]:  # the end record is in the last 64 KiB, or this is no zip
        return False
    try:
        zipimport.zipimporter(path)
    except zipimport.ZipImportError:
        return False
    return True


def _run_script(path: str) -> None:
    """Run ``path`` as ``python3 PATH`` does, with the same ``__main__`` globals, ``sys.path[0]`` and errors.

    A source file or a sourceless .pyc is read and run here: runpy's way (asking every import hook whether the path
    is an archive) would cost a fresh child more than half a millisecond, a third of its whole cost. A directory
    or a zip archive runs its ``__main__`` module through runpy, as the interpreter itself does.
    """
    absolute = os.path.abspath(path)  # __file__ and sys.path[0] are absolute; sys.argv[0] stays as given
    main = types.ModuleType("__main__")
    main.__dict__.update(__annotations__={}, __builtins__=builtins)
    sys.modules["__main__"] = main
    data = b""
    if not os.path.isdir(path):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as exc:
            print(f"python3: can't open file {absolute!r}: [Errno {exc.errno}] {exc.strerror}", file=sys.stderr)
            raise SystemExit(2) from None
    if not data or _is_archive(path, data):
        sys.path[0] = absolute
        runpy._run_module_as_main("__main__", alter_argv=False)  # type: ignore[attr-defined]
        return
    sys.path[0] = os.path.dirname(absolute)
    loader: importlib.machinery.SourceFileLoader | importlib.machinery.SourcelessFileLoader
    if data[:4] == importlib.util.MAGIC_NUMBER:
        code = marshal.loads(data[16:])  # magic, flags, then 8 bytes of source mtime and size, or of hash
        loader = importlib.machinery.SourcelessFileLoader("__main__", absolute)
    else:
        code = compile(data, absolute, "exec", dont_inherit=True)
        loader = importlib.machinery.SourceFileLoader("__main__", absolute)
    main.__dict__.update(__cached__=None, __file__=absolute, __loader__=loader, __spec__=None)
    exec(code, main.__dict__)


def _run(sync_fd: int, limits: tuple[int, int, int], standing: tuple[object, ...]) -> None:
    """The child: take the rlimits, announce, wait in the command's cgroup for the command, run the script, exit as
    Python would. A child that inherited anything but the zygote's ``standing`` when it started serving exits
    before it announces itself: a failed start, on which the host starts another zygote, so that no command runs
    crippled."""
    code = 1
    try:
        if _standing() != standing:
            os._exit(125)
        os.setsid()
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.dup2(sync_fd, 3)
        os.closerange(4, 2**31 - 1)  # not the soft limit: a program could have lowered the zygote's
        cpu_time_s, open_files, file_size_bytes = limits
        _rlimits(cpu_time_s, file_size_bytes)
        sync = socket.socket(fileno=3)
        sync.send(b"r")  # the kernel attaches our pid, in the host's pid namespace
        fds, cwd, argv, env = _command(sync)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        if open_files >= 0:  # only now, with the command's fds in place (a limit of a few must not stop them)
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))
        sync.send(b"x")  # the command starts: what ends it now is its own result
        sync.close()
        # The zygote keeps programs away from its /proc files (below); this child, which holds nothing of the
        # zygote's any more (its fds are the command's), owns its own again, as a fresh interpreter does.
        _LIBC.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        time.tzset()
        _python_environment(env)
        script = argv[1]
        sys.argv = argv[1:]
        code = 0
        try:
            _run_script(script)
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:
            traceback.print_exc()
            code = 1
        threading._shutdown()  # type: ignore[attr-defined]  # join non-daemon threads, as interpreter exit does
        atexit._run_exitfuncs()
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _serve(sock: socket.socket, standing: tuple[object, ...]) -> None:
    while True:
        fds = array.array("i")
        message, ancillary, _flags, _addr = sock.recvmsg(_HEADER.size, socket.CMSG_SPACE(fds.itemsize))
        if not message:
            return
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        if len(message) != _HEADER.size or _HEADER.unpack(message)[0] != _SPARE or len(fds) != 1:
            return  # a malformed request: the host restarts us
        _kind, _argc, _envc, seq, cpu_time_s, open_files, file_size_bytes = _HEADER.unpack(message)
        pid = os.fork()
        if pid == 0:
            sock.close()
            _run(fds[0], (cpu_time_s, open_files, file_size_bytes), standing)
        os.close(fds[0])
        _pid, status, usage = os.wait4(pid, 0)
        cpu_us = int((usage.ru_utime + usage.ru_stime) * 1_000_000)
        sock.send(_EXITED_MSG.pack(_EXITED, status, cpu_us, usage.ru_maxrss, seq, 0))


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] != "serve":
        sys.exit("usage: zygote.py serve FD")
    # Keep the programs this zygote runs away from its memory and fds through /proc.
    _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    sock = socket.socket(fileno=int(sys.argv[2]))
    os.set_inheritable(sock.fileno(), False)
    standing = _standing()
    gc.freeze()  # children never scan (and so never copy) what the zygote allocated
    sock.send(struct.pack("<I", _READY))
    _serve(sock, standing)


if __name__ == "__main__":
    main()
