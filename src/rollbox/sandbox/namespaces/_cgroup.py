"""cgroups: where a sandbox's processes are counted, limited and killed, on cgroup v2 or v1.

A sandbox owns one cgroup directory, ``rollbox-<id>``, made under the cgroup rollbox itself runs in (so that
a cgroup around rollbox, such as the test suite's guard, also bounds every sandbox), with a limit on what its
commands leave behind. Inside it each command gets a fresh ``exec-<n>`` with its own limits, so that its
resource report is its own and killing it kills exactly what it started. (The sandbox's own supervisor runs
nothing of the program's and is in no cgroup of rollbox's.) On cgroup v1 the same relative
path exists once per hierarchy (pids, cpuacct), but for memory: there a command runs in its sandbox's own memory
cgroup, whose limit each command sets to its own plus what earlier commands left charged (see :meth:`Cgroup.begin`),
and its report counts from there. Each memory cgroup costs the kernel an array over every filesystem's shrinker,
and each sandbox mounts four filesystems: with two memory cgroups a sandbox, ten thousand sandboxes took a MiB
each in those arrays alone. On v2 the cgroup holds every controller, and the command's has its own memory.

A command's cgroup is passed on to the next command when its processes are all dead and it holds almost no
memory any more (see :meth:`Cgroup.recycle`): removing a memory cgroup makes the kernel walk every mounted
filesystem's object lists, and each sandbox mounts a few, so with a thousand sandboxes open a fresh cgroup per
command cost more CPU than a short command itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from rollbox.sandbox._errors import IsolationUnavailable, SandboxError
from rollbox.sandbox._kernel import read_kernel_file
from rollbox.sandbox._shortage import host_error

__all__ = ["Cgroup", "CgroupStats", "CgroupTree", "cgroup_mounts", "own_cgroup_paths"]

T = TypeVar("T")

_V1_CONTROLLERS = ("memory", "pids", "cpuacct")
_PARENT_ENV = "ROLLBOX_CGROUP_PARENT"
_MiB = 1 << 20
#: v1's counter of socket buffers (see :meth:`Cgroup.set_limits`).
_V1_TCP = "memory.kmem.tcp."


@dataclass(frozen=True)
class CgroupStats:
    """What a cgroup's processes used, read after they are all dead."""

    cpu_s: float
    peak_memory_bytes: int | None
    #: Processes killed by any out-of-memory killer: the cgroup's own, an ancestor's, or the whole machine's.
    oom_kills: int
    pids_limit_hits: int
    #: How many times its memory usage reached its limit (see :meth:`Cgroup.memory_limit_hits`).
    memory_limit_hits: int = 0


def _write(path: str | Path, value: str) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, value.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        raise SandboxError(host_error(f"cannot write {value!r} to {path}", exc)) from exc


def _keyed(text: str, key: str) -> int:
    """The value of ``key`` in a flat-keyed cgroup file such as ``memory.events``."""
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    return 0


def _mounts() -> Iterator[tuple[str, Path, set[str]]]:
    """(fstype, mount point, super options) of every cgroup mount this process sees."""
    for line in read_kernel_file(Path("/proc/self/mountinfo")).splitlines():
        before, _, after = line.partition(" - ")
        fstype, _source, options = [*after.split(" "), "", ""][:3]
        if fstype in ("cgroup", "cgroup2"):
            yield fstype, Path(before.split(" ")[4]), set(options.split(","))


def cgroup_mounts() -> dict[str, Path]:
    """The mount point of each v1 hierarchy, by controller, and under ``""`` the v2 hierarchy's (first seen)."""
    found: dict[str, Path] = {}
    for fstype, point, options in _mounts():
        for controller in options if fstype == "cgroup" else {""}:
            found.setdefault(controller, point)
    return found


def own_cgroup_paths() -> dict[str, str]:
    """This process's cgroup path per v1 controller, and under ``""`` its v2 path."""
    paths: dict[str, str] = {}
    for line in read_kernel_file(Path("/proc/self/cgroup")).splitlines():
        _id, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


class CgroupTree:
    """The cgroup hierarchies rollbox uses on this machine, and the parent its sandboxes go under."""

    def __init__(self, version: int, mounts: dict[str, Path], parents: dict[str, str]) -> None:
        self.version = version
        #: Mount point per controller; on v2 a single entry under ``""``.
        self.mounts = mounts
        #: The parent cgroup's path inside each hierarchy.
        self.parents = parents
        own = own_cgroup_paths().get("memory" if version == 1 else "", "/")
        # Where the sandboxes' agents and zygotes run: rollbox's own cgroup, outside every sandbox's. The kernel
        # counts OOM kills there alone in v1's oom_control, in v2's memory.events.local (none at a v2 root).
        home = mounts["memory" if version == 1 else ""] / own.lstrip("/")
        self._helpers_oom_file = home / ("memory.oom_control" if version == 1 else "memory.events.local")

    @classmethod
    def detect(cls) -> CgroupTree:
        """Find a usable cgroup hierarchy: v2 when it has the memory and pids controllers, else v1.

        ``ROLLBOX_CGROUP_PARENT`` (a path inside the hierarchy, such as ``/rollbox.slice``) overrides the
        default parent, which is the cgroup rollbox runs in.

        Raises:
            IsolationUnavailable: neither version is usable; the message says what is missing.
        """
        override = os.environ.get(_PARENT_ENV)
        own = own_cgroup_paths()
        mounts = list(_mounts())
        for fstype, point, _ in mounts:
            if fstype == "cgroup2" and {"memory", "pids"} <= set(
                read_kernel_file(point / "cgroup.controllers").split()
            ):
                return cls._v2(point, override or own.get("", "/"), overridden=override is not None)
        v1: dict[str, Path] = {}
        for fstype, point, options in mounts:
            for controller in _V1_CONTROLLERS:
                if fstype == "cgroup" and controller in options:
                    v1.setdefault(controller, point)
        missing = [c for c in _V1_CONTROLLERS if c not in v1]
        if missing:
            raise IsolationUnavailable(
                "no usable cgroup hierarchy: cgroup v2 lacks the memory or pids controller and cgroup v1 lacks "
                f"{', '.join(missing)}. Mount cgroup2 at /sys/fs/cgroup (systemd does this by default) and run "
                "rollbox as root, or pass --backend process (which is not a security boundary)."
            )
        return cls(1, v1, {c: override or own.get(c, "/") for c in v1})

    @classmethod
    def _v2(cls, point: Path, parent: str, *, overridden: bool) -> CgroupTree:
        try:
            _enable_v2_controllers(point, parent)
        except SandboxError as own_error:
            if overridden or parent.strip("/") == "":
                raise IsolationUnavailable(f"{own_error}; set {_PARENT_ENV} to a delegated cgroup") from None
            # Our own cgroup holds processes (ours), so v2 will not delegate controllers below it; use a
            # cgroup of rollbox's own at the root of the hierarchy instead.
            parent = "/rollbox.slice"
            try:
                (point / parent.lstrip("/")).mkdir(exist_ok=True)
                _enable_v2_controllers(point, parent)
            except (OSError, SandboxError) as exc:
                why = host_error(f"{point / parent.lstrip('/')}", exc) if isinstance(exc, OSError) else str(exc)
                raise IsolationUnavailable(
                    f"cannot delegate the memory and pids controllers to sandboxes ({own_error}; {why}). Run "
                    f"rollbox as root, or set {_PARENT_ENV} to a delegated cgroup with no processes of its own."
                ) from exc
        return cls(2, {"": point}, {"": parent})

    def helpers_oom_kills(self) -> int | None:
        """How many processes out-of-memory killers have killed in the cgroup rollbox runs in, where the sandboxes'
        agents and zygotes live; None where the kernel keeps no such count."""
        try:
            return _keyed(read_kernel_file(self._helpers_oom_file), "oom_kill")
        except OSError:
            return None

    def cgroup(self, name: str, *, sockets: bool = False) -> Cgroup:
        """The cgroup ``name`` directly under the parent (it need not exist yet); ``sockets``: its processes may have
        sockets whose buffers v1 counts apart (TCP, UDP: a sandbox with a network), see :meth:`Cgroup.set_limits`."""
        paths = {c: f"{p.rstrip('/')}/{name}" for c, p in self.parents.items()}
        return Cgroup(self.version, self.mounts, paths, sockets=sockets)

    def sandbox_names(self) -> set[str]:
        """Names of the cgroups under the parent that look like rollbox sandboxes (for reaping leftovers)."""
        names: set[str] = set()
        for controller, mount in self.mounts.items():
            parent = mount / self.parents[controller].lstrip("/")
            with contextlib.suppress(FileNotFoundError):
                names.update(p.name for p in parent.iterdir() if p.name.startswith("rollbox-") and p.is_dir())
        return names


def _enable_v2_controllers(point: Path, parent: str) -> None:
    """Enable memory and pids for the children of ``parent`` and of each of its ancestors."""
    directory = point
    for part in [""] + [p for p in parent.split("/") if p]:
        directory = directory / part if part else directory
        control = directory / "cgroup.subtree_control"
        if {"memory", "pids"} <= set(read_kernel_file(control).split()):
            continue
        try:
            with open(control, "w") as f:
                f.write("+memory +pids")
        except OSError as exc:
            what = f"cannot enable memory and pids below {directory}"
            if exc.errno == errno.EBUSY:
                raise SandboxError(f"{what}: it holds processes") from exc
            raise SandboxError(host_error(what, exc)) from exc


_features: dict[str, bool] = {}


def _has(path: str) -> bool:
    """Whether a cgroup interface file exists, remembered by name (it depends on the kernel, not the cgroup)."""
    name = os.path.basename(path)
    if name not in _features:
        _features[name] = os.path.exists(path)
    return _features[name]


class Cgroup:
    """One cgroup: the same path in each hierarchy (one on v2, memory + pids + cpuacct on v1).

    Paths are plain strings: a command's cgroup is made or passed on, and used, on every exec, on the hot path.
    """

    def __init__(
        self,
        version: int,
        mounts: dict[str, Path],
        paths: dict[str, str],
        *,
        sockets: bool = False,
        shared: frozenset[str] = frozenset(),
    ) -> None:
        self.version = version
        #: The v1 controllers whose directory is its parent's, which this cgroup neither makes nor removes.
        self.shared = shared
        #: Whether its processes may have sockets whose buffers v1 counts apart (see :meth:`set_limits`); its
        #: children inherit it.
        self.sockets = sockets
        self._mounts = mounts
        #: The cgroup's path inside each hierarchy, by controller (``""`` on v2).
        self.paths = paths
        self._dirs = {c: f"{mounts[c]}{p}" for c, p in paths.items()}
        self._memory_limit: int | None = None
        self._socket_limit: int | None = None  # v1's, where set
        # v2 restarts a peak only for reads through the file descriptor that asked for it (Linux 6.12+).
        self._peak_fd: int | None = None

    def directory(self, controller: str) -> str:
        """The cgroup's directory in ``controller``'s hierarchy (the one directory on v2)."""
        return self._dirs["" if self.version == 2 else controller]

    def _file(self, controller: str, name: str) -> str:
        return f"{self.directory(controller)}/{name}"

    @property
    def dirs(self) -> list[str]:
        """The cgroup's directory in each hierarchy."""
        return list(self._dirs.values())

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` file of each hierarchy (a process joins by writing its pid to all of them)."""
        return [f"{d}/cgroup.procs" for d in self._dirs.values()]

    def child(self, name: str, *, share_memory: bool = False) -> Cgroup:
        """The child cgroup ``name`` (it need not exist yet); with ``share_memory``, on v1, one whose memory
        controller is this cgroup's own (see the module's docstring)."""
        shared = frozenset({"memory"}) if share_memory and self.version == 1 else frozenset()
        paths = {c: p if c in shared else f"{p}/{name}" for c, p in self.paths.items()}
        return Cgroup(self.version, self._mounts, paths, sockets=self.sockets, shared=shared)

    @property
    def _own_dirs(self) -> list[str]:
        """Its directories that are its own, not a parent's (see ``shared``)."""
        return [d for c, d in self._dirs.items() if c not in self.shared]

    def create(self, *, delegate: bool = False) -> None:
        """Make the cgroup in every hierarchy; with ``delegate``, let its children use memory and pids (v2).

        Raises:
            SandboxError: the kernel refused.
        """
        made: list[str] = []
        try:
            for d in self._own_dirs:
                os.mkdir(d)
                made.append(d)
            if delegate and self.version == 2:
                _write(self._file("", "cgroup.subtree_control"), "+memory +pids")
        except (OSError, SandboxError) as exc:
            for d in reversed(made):
                with contextlib.suppress(OSError):
                    os.rmdir(d)
            if isinstance(exc, SandboxError):
                raise
            raise SandboxError(host_error(f"cannot create cgroup {exc.filename}", exc, "cgroup")) from exc

    def set_limits(self, *, memory_bytes: int | None, pids: int) -> None:
        """Limit memory including swap, and processes plus threads. Out of memory, the kernel kills the process
        that allocated, on v2 as on v1 (no ``memory.oom.group``): a parent waiting for it sees it die.

        Socket buffers count too. v2 charges them to the memory counter. v1 keeps TCP's and UDP's in a counter of
        their own, and only where it has a limit: without one, a command's own loopback connections held hundreds
        of MiB beyond its memory limit, unseen. For a cgroup with ``sockets`` the same limit is set there, the report
        adds the two peaks, and as the kernel lets each socket's first buffer past that limit (many sockets go as
        far past it as they like), the host kills a command whose socket buffers went past it, and reports one that
        went past it and ended before the host looked as it (:meth:`sockets_over_limit`). A command's memory and
        its socket buffers together can reach twice the limit on v1. (A sandbox without a network has no such
        sockets: its cgroups spend no file access on them.)
        """
        if memory_bytes is not None:
            if self.version == 2 and _has(swap := self._file("", "memory.swap.max")):
                _write(swap, "0")
            self._set_memory_limit(memory_bytes)
            self._set_socket_limit(memory_bytes)
        _write(self._file("pids", "pids.max"), str(pids))

    def _set_socket_limit(self, memory_bytes: int) -> None:
        if self.sockets and self.version == 1 and _has(tcp := self._file("memory", _V1_TCP + "limit_in_bytes")):
            _write(tcp, str(memory_bytes))
            self._socket_limit = memory_bytes

    def sockets_over_limit(self) -> bool:
        """Whether, on v1, the socket buffers charged here went past their limit (see :meth:`set_limits`) since the
        peak last restarted: a command that went past it and freed them again, or ended, before the host looked
        went past it all the same."""
        return self._socket_limit is not None and self._v1_socket_bytes("max_usage_in_bytes") > self._socket_limit

    def _set_memory_limit(self, memory_bytes: int) -> None:
        if self.version == 2:
            _write(self._file("", "memory.max"), str(memory_bytes))
        else:
            files = [self._file("memory", "memory.limit_in_bytes")]
            if _has(memsw := self._file("memory", "memory.memsw.limit_in_bytes")):
                files.append(memsw)
            # v1 refuses a memory limit above the memory+swap one: raise memory+swap first, lower memory first. A
            # memory cgroup shared with the sandbox (``shared``) had its limit set by another command's cgroup.
            now = self._memory_limit
            if now is None and "memory" in self.shared:
                now = int(read_kernel_file(files[0]))
            if now is not None and memory_bytes > now:
                files.reverse()
            for path in files:
                _write(path, str(memory_bytes))
        self._memory_limit = memory_bytes

    def recycle(self, *, memory_bytes: int, most_left: int) -> CgroupStats | None:
        """Ready this cgroup, whose processes are all dead, for another command; None when it must be replaced.

        It is reused when what the commands before left charged to it (kernel objects such as dentries, cache,
        small files they wrote) is at most ``most_left`` bytes: its memory limit becomes ``memory_bytes`` plus that
        much, so the next command has the room a fresh cgroup would give, and its peak restarts. The counters
        returned are where the next command's report starts (``peak_memory_bytes``: what was left charged).

        Raises:
            SandboxError: a limit could not be set.
        """
        try:
            if self.pids():
                return None
            left = self._charged_bytes()
            if left > most_left or not self._restart_peak():
                return None
        except OSError:  # gone, or not what it was: a fresh one serves
            return None
        self._set_memory_limit(memory_bytes + left)
        return dataclasses.replace(self.stats(), peak_memory_bytes=left)

    def begin(self, *, memory_bytes: int, most_left: int) -> CgroupStats:
        """Ready this cgroup, whose memory cgroup is its sandbox's (``shared``), for a command: the memory limit
        becomes ``memory_bytes`` plus what earlier commands left charged there, at most ``most_left`` (the
        sandbox's disk: what it leaves is bounded by memory and disk together, as before), the memory peak restarts,
        and the counters returned are where the command's report starts (``peak_memory_bytes``: what was left).

        Raises:
            SandboxError: a limit could not be set, or the memory cgroup read.
        """
        try:
            left = self._charged_bytes()
        except OSError as exc:
            raise SandboxError(host_error(f"cannot read {self.directory('memory')}", exc)) from exc
        self._set_memory_limit(memory_bytes + min(left, most_left))
        self._set_socket_limit(memory_bytes)
        self._restart_peak()
        return dataclasses.replace(self.stats(), peak_memory_bytes=left)

    def _charged_bytes(self) -> int:
        if self.version == 2:
            return int(read_kernel_file(self._file("", "memory.current")))
        memsw = self._file("memory", "memory.memsw.usage_in_bytes")
        charged = int(read_kernel_file(memsw if _has(memsw) else self._file("memory", "memory.usage_in_bytes")))
        return charged + self._v1_socket_bytes("usage_in_bytes")

    def _v1_socket_bytes(self, name: str) -> int:
        """v1's socket buffer counter's ``name`` (usage or peak); 0 where it counts nothing (see set_limits)."""
        if not self.sockets:
            return 0
        path = self._file("memory", _V1_TCP + name)
        return int(read_kernel_file(path)) if _has(path) else 0

    def _restart_peak(self) -> bool:
        """Make the memory peak start again from what is charged now; False when the kernel cannot."""
        if self.version == 1:
            peaks = ["memory.max_usage_in_bytes", "memory.memsw.max_usage_in_bytes"]
            for name in peaks + ([_V1_TCP + "max_usage_in_bytes"] if self.sockets else []):
                if _has(peak_file := self._file("memory", name)):
                    _write(peak_file, "0")
            return True
        if not _has(peak := self._file("", "memory.peak")):
            return True  # no peak is reported at all
        self._close_peak()
        try:
            self._peak_fd = os.open(peak, os.O_RDWR | os.O_CLOEXEC)
            os.write(self._peak_fd, b"reset\n")
        except OSError:
            self._close_peak()
            return False
        return True

    def _close_peak(self) -> None:
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None

    def add(self, pid: int) -> None:
        """Move a process into this cgroup."""
        for procs in self.procs_files:
            _write(procs, str(pid))

    def cpu_s(self) -> float:
        """CPU seconds used so far by every process that was ever in this cgroup."""
        if self.version == 2:
            return _keyed(read_kernel_file(self._file("", "cpu.stat")), "usage_usec") / 1e6
        return int(read_kernel_file(self._file("cpuacct", "cpuacct.usage"))) / 1e9

    def pids_limit_hits(self) -> int:
        """How many forks or clones the pids limit has refused."""
        return _keyed(read_kernel_file(self._file("pids", "pids.events")), "max")

    def memory_limit_hits(self, *, local: bool = False) -> int:
        """How many times the memory usage reached the limit, whether reclaim then made room or not.

        v2 counts them (``max`` in memory.events; with ``local``, this cgroup's own, not its descendants'). v1 keeps
        no count that works (``failcnt`` stays 0 on recent kernels): there it is 1 when the peak since the peak last
        restarted came within a MiB (more than any one charge) of the limit, else 0.
        """
        if self.version == 2:
            events = self._file("", "memory.events.local" if local else "memory.events")
            return _keyed(read_kernel_file(events if _has(events) else self._file("", "memory.events")), "max")
        prefix = "memory.memsw." if _has(self._file("memory", "memory.memsw.limit_in_bytes")) else "memory."
        peak = int(read_kernel_file(self._file("memory", prefix + "max_usage_in_bytes")))
        return int(peak >= int(read_kernel_file(self._file("memory", prefix + "limit_in_bytes"))) - _MiB)

    def stats(self) -> CgroupStats:
        """Read the resource report."""
        if self.version == 2:
            peak_file = self._file("", "memory.peak")
            if self._peak_fd is not None:
                peak: int | None = int(os.pread(self._peak_fd, 64, 0))
            else:
                peak = int(read_kernel_file(peak_file)) if _has(peak_file) else None
            events = read_kernel_file(self._file("", "memory.events"))
            oom, limit_hits = _keyed(events, "oom_kill"), _keyed(events, "max")
        else:
            memsw_peak = self._file("memory", "memory.memsw.max_usage_in_bytes")
            peak = int(
                read_kernel_file(memsw_peak if _has(memsw_peak) else self._file("memory", "memory.max_usage_in_bytes"))
            )
            peak += self._v1_socket_bytes("max_usage_in_bytes")
            oom = _keyed(read_kernel_file(self._file("memory", "memory.oom_control")), "oom_kill")
            limit_hits = self.memory_limit_hits()
        return CgroupStats(
            cpu_s=self.cpu_s(),
            peak_memory_bytes=peak,
            oom_kills=oom,
            pids_limit_hits=self.pids_limit_hits(),
            memory_limit_hits=limit_hits,
        )

    def pids(self) -> list[int]:
        """The processes in this cgroup now."""
        with contextlib.suppress(FileNotFoundError):
            return [int(p) for p in read_kernel_file(self._file("pids", "cgroup.procs")).split()]
        return []

    def kill(self, *, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in this cgroup and wait until none is left (blocking: see :meth:`killed`).

        Raises:
            SandboxError: processes were still alive after ``timeout_s`` (a host problem: unkillable tasks).
        """
        for delay in self._killing(timeout_s):
            time.sleep(delay)

    async def killed(self, *, timeout_s: float = 5.0) -> None:
        """:meth:`kill`, waiting in the event loop: a process dying with a gigabyte to free takes ~80 ms to leave,
        which must not hold up every other sandbox's commands.

        Raises:
            SandboxError: processes were still alive after ``timeout_s`` (a host problem: unkillable tasks).
        """
        for delay in self._killing(timeout_s):
            await asyncio.sleep(delay)

    def send_kill(self) -> list[int]:
        """SIGKILL every process in this cgroup now, once, and return their pids; where ``cgroup.kill`` is missing
        (v1), a fork racing this may survive it (:meth:`kill` repeats until none is left).

        Raises:
            SandboxError: the host could not (out of descriptors, say).
        """
        try:
            pids = self.pids()
            kill_file = self._file("pids", "cgroup.kill")
            if pids and self.version == 2 and _has(kill_file):
                _write(kill_file, "1")
            else:
                for pid in pids:
                    self._kill_member(pid)
        except OSError as exc:
            raise SandboxError(host_error(f"cannot kill the processes in {self.dirs[0]}", exc)) from exc
        return pids

    def _killing(self, timeout_s: float) -> Iterator[float]:
        """Kill rounds until the cgroup is empty, yielding how long to wait before each next one."""
        deadline = time.monotonic() + timeout_s
        delay = 0.0002
        while pids := self.send_kill():
            if time.monotonic() > deadline:
                raise SandboxError(f"processes {pids[:10]} in {self.dirs[0]} survived SIGKILL for {timeout_s} s")
            yield delay
            delay = min(delay * 2, 0.01)

    def _kill_member(self, pid: int) -> None:
        # A pid read from cgroup.procs may have exited and been reused by a host process; the pidfd pins the
        # process, and the membership check runs while it is pinned. SIGKILL to the pidfd kills every thread.
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        try:
            if self._contains(pid) or self._contains_thread_of(pid):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os.close(pidfd)

    def _contains(self, pid: int, task: str = "") -> bool:
        """Whether process ``pid`` (or its thread ``task``, a path such as ``task/123/``) is in this cgroup."""
        controller = "" if self.version == 2 else "pids"
        mine = self.paths[controller]
        try:
            lines = read_kernel_file(f"/proc/{pid}/{task}cgroup").splitlines()
        except (FileNotFoundError, ProcessLookupError):
            return False
        for line in lines:
            _id, controllers, path = line.split(":", 2)
            if controller in controllers.split(",") or (controller == "" and controllers == ""):
                return path == mine or path.startswith(mine + "/")
        return False

    def _contains_thread_of(self, pid: int) -> bool:
        """Whether any thread of process ``pid`` is in this cgroup. A process whose main thread exited alone (the raw
        ``exit`` syscall) while others run on still lists under the main thread's pid, and on v1 that zombie's own
        file names the root cgroup: without this look at its threads, nothing of it would be killed."""
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except (FileNotFoundError, ProcessLookupError):
            return False
        return any(self._contains(pid, f"task/{tid}/") for tid in threads if tid != str(pid))

    def remove(self, *, timeout_s: float = 5.0) -> None:
        """Kill what is left, then remove this cgroup and its children (deepest first); absent is fine.

        Raises:
            SandboxError: the cgroup could not be removed.
        """
        self._close_peak()
        self.kill(timeout_s=timeout_s)
        children: set[str] = set()
        for d in self._own_dirs:
            with contextlib.suppress(FileNotFoundError), os.scandir(d) as entries:
                children.update(e.name for e in entries if e.is_dir(follow_symlinks=False))
        for name in sorted(children):
            self.child(name).remove(timeout_s=timeout_s)
        deadline = time.monotonic() + timeout_s
        for d in self._own_dirs:
            while True:
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise SandboxError(host_error(f"cannot remove cgroup {d}", exc)) from exc
                    time.sleep(0.001)
