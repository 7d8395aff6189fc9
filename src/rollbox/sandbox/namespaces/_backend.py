"""The ``namespaces`` backend: Linux namespaces, cgroups, a syscall filter and an unprivileged uid.

What the program inside sees: a read-only root with the system directories and its Python under /opt/rollbox
(``python3`` on PATH: the one rollbox runs on, or a runtime layer's; see ``runtime._mounts``), a size-limited
writable /workspace, /tmp and /dev/shm, its own pid, ipc, uts, net, cgroup, mount and user namespaces, no
capabilities, no_new_privs, and a host uid of its own.

Process tree: rollbox → spawner (``agent.c spawner``, one per rollbox process, see ``_spawner``) → launcher
(``agent.c launch``, run in the spawner's child: adds the sandbox's own mounts to a copy of the root it
shares, makes the namespaces, writes the uid maps, then waits as the sandbox's monitor under the sandbox's host
uid) → agent (pid 1 inside, so that no signal from inside can kill or stop it;
it reaps orphans) → one command at a time. Each command's first process is forked ahead of the command (a spare,
while the sandbox is idle) and moved into its cgroup before it execs, so everything the program runs is counted,
limited and killed there. The spawner, the launcher and the agent run nothing of the program's; each dies with
its parent (parent-death signals from rollbox down), so none of them outlives rollbox.

The launcher does what bubblewrap did for earlier versions, with less work per sandbox: no ``pivot_root`` (each
walks every thread on the machine, and ten thousand open sandboxes make thirty thousand: the root, built once per
runtime, is pivoted to once; see ``_root``), no program to exec but the agent, no ``/proc/self/mountinfo`` to
parse, and no nested user namespace (the sandbox's ``user.max_user_namespaces`` is 0, and the syscall filter
refuses new namespaces besides). A live sandbox holds four of this process's descriptors (see ``_uids`` and
``Launched.watch_by_hangup``) and is three processes: the launcher, the agent and the next command's.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import resource
import secrets
import socket
import threading
from importlib import resources
from pathlib import Path

from rollbox.sandbox._config import SandboxConfig
from rollbox.sandbox._errors import IsolationUnavailable, SandboxError
from rollbox.sandbox._kernel import in_thread
from rollbox.sandbox._limits import Limits, Network
from rollbox.sandbox._settle import settled
from rollbox.sandbox._shortage import host_error
from rollbox.sandbox.agent._build import agent_binary
from rollbox.sandbox.agent._protocol import AgentConnection, ExecGroup, Exited, Usage, roomy_socketpair
from rollbox.sandbox.agent._spawner import Launched, Spawner
from rollbox.sandbox.images._image import Image
from rollbox.sandbox.runtime._mounts import ENV, PATH, SYSTEM_DIRS, RuntimeMounts, host_mounts
from rollbox.sandbox.runtime._store import Layer

from ._cgroup import Cgroup, CgroupStats, CgroupTree
from ._overlay import OverlayProbe, UpperState, open_merged
from ._root import SharedRoots
from ._seccomp import build_filter
from ._state import SANDBOX_UID, SandboxDir, StateDir

__all__ = ["PATH", "NamespaceHost", "NamespaceSandbox", "image_path", "reap_orphans"]

_DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
_DEVICE_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
)
#: Where each sandbox's writable tree is mounted (its workspace/, tmp/ and shm/).
_WRITABLE = ("/workspace", "/tmp", "/dev/shm")
#: What of an image's root a sandbox never sees: rollbox's own mounts take these places.
_NOT_FROM_IMAGE = frozenset({"proc", "dev", "sys", "tmp", "workspace"})
#: A command's PATH on an image that names none (Docker's default).
_IMAGE_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_path(image: Image, layer: Layer | None) -> str:
    """A command's PATH on ``image``: the image's own, after the runtime layer's scripts when there is one."""
    path = image.config.path or _IMAGE_DEFAULT_PATH
    return f"{ENV}/bin:{path}" if layer is not None else path


_AGENT_PATH = "/opt/rollbox/agent"
_ZYGOTE_PATH = "/opt/rollbox/zygote.py"
_ZYGOTE_SOURCE = str(resources.files("rollbox.sandbox.agent").joinpath("zygote.py"))
# A command's cgroup is reused by the next command when at most this share of the memory limit is still charged to
# it (kernel objects, some freed only after an RCU grace period, and cache: a few hundred KiB after most commands,
# a few MiB after a burst of forks); the next command's limit is raised by as much.
_MOST_LEFT_SHARE = 1 / 32


class NamespaceHost:
    """What every sandbox of this backend on this host shares: the agent, cgroups, the state dir."""

    _instance: NamespaceHost | None = None

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise IsolationUnavailable(
                "the namespaces backend makes namespaces and manages cgroups, and needs root; run rollbox as root "
                "(for example in its container), or pass backend='process', which is not a security boundary."
            )
        _raise_open_files_limit()
        self.agent = agent_binary()
        self.cgroups = CgroupTree.detect()
        self.state = StateDir()
        self.state.ensure()
        self.state.reap(self.cgroups)
        #: The Python rollbox runs on, as every sandbox without a runtime layer mounts it.
        self.runtime = host_mounts(self.state.runtime)
        self._layer_mounts: dict[str, RuntimeMounts] = {}
        #: Whether a workspace's filesystem can be overlaid here (see ``_overlay``).
        self.overlays = OverlayProbe(self.agent, self.state.stage)
        #: The read-only roots sandboxes share, one per runtime (see ``_root``).
        self.roots = SharedRoots(self.agent, self.state.stage)
        #: Sandboxes whose close failed part-way for want of descriptors or memory: closed again at the next start.
        #: (Other failures, such as processes that survive SIGKILL, are left to the next process's ``reap``.)
        self.unclosed: list[NamespaceSandbox] = []
        self._unclosed_lock = threading.Lock()  # sandboxes may be opened from several threads

    def mounts(self, layer: Layer | None, image: Image | None = None) -> RuntimeMounts:
        """What a sandbox mounts for ``layer`` (for None: the host's own Python on the host's root, nothing on an
        image's, which has its own), worked out once per layer.

        Raises:
            SandboxError: the layer's interpreter cannot be mounted (see ``runtime._mounts``), or, on an image, it
                is the host's system Python, which lives in the host's /usr.
        """
        if layer is None:
            return self.runtime if image is None else RuntimeMounts(())
        if image is not None and any(
            layer.python.executable == Path(d) or Path(d) in layer.python.executable.parents for d in SYSTEM_DIRS
        ):
            raise SandboxError(
                f"the runtime layer {layer.key[:12]} runs on the host's system Python ({layer.python.executable}), "
                "which lives in the host's /usr, not in an image: build the layer with a Python of uv's "
                "('uv python install 3.12') to use it on an image, or use the image's own Python"
            )
        if layer.key not in self._layer_mounts:
            self._layer_mounts[layer.key] = layer.mounts(self.state.runtime)
        return self._layer_mounts[layer.key]

    def close_later(self, sandbox: NamespaceSandbox) -> None:
        """Have the next start close ``sandbox`` again."""
        with self._unclosed_lock:
            if sandbox not in self.unclosed:
                self.unclosed.append(sandbox)

    def close_unclosed(self) -> None:
        """Close again what failed to close for a shortage; one still short is put back by its own ``close``."""
        with self._unclosed_lock:
            pending, self.unclosed = self.unclosed, []
        for sandbox in pending:
            with contextlib.suppress(Exception):
                sandbox.close()

    @classmethod
    def get(cls) -> NamespaceHost:
        """The host, probed once per process (and leftovers of dead rollbox processes reaped then)."""
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance


def reap_orphans() -> list[str]:
    """Remove what the sandboxes of rollbox processes that died left behind (cgroups, mounts, directories), as a
    process does the first time it makes a sandbox; returns the sandboxes' ids. For a process that saw another die
    (a worker process of its own) and may make no sandbox itself.

    Raises:
        IsolationUnavailable: this host cannot make sandboxes (nor can have left any).
    """
    host = NamespaceHost.get()
    return host.state.reap(host.cgroups)


async def _spawn(argv: list[str], pass_fds: list[int], tree: str | None = None, *, launch: bool = False) -> Launched:
    """Start ``argv`` through this process's spawner, started (again) first if need be: its failure to start is the
    spawn's, so that the caller's cleanup covers it."""
    return await Spawner.get().spawn(argv, pass_fds=pass_fds, tree=tree, launch=launch)


def _below_writable(dest: str) -> bool:
    """Whether a mount at ``dest`` is made inside a sandbox's writable tree, so in each sandbox's own copy."""
    return any(dest == w or dest.startswith(f"{w}/") for w in _WRITABLE)


def _short_of_resources(exc: BaseException | None) -> bool:
    """Whether ``exc``, or what caused it, is the host running out of descriptors or memory (which passes)."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM):
            return True
        exc = exc.__cause__
    return False


def _raise_open_files_limit() -> None:
    """Lift the soft limit on open files to the hard one: each live sandbox holds a few fds on the host, and the
    usual soft limit of 1024 would stop a process at a few hundred sandboxes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if 0 <= soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _largest_file(root: Path, budget: int = 10_000) -> int:
    """The size of the largest regular file under ``root``, looking at no more than ``budget`` entries.

    Iterative, and bounded over directories too: the program may have made a tree thousands of levels deep.
    """
    largest = 0
    stack = [str(root)]
    while stack and budget > 0:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                budget -= 1
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    largest = max(largest, entry.stat(follow_symlinks=False).st_size)
                if budget <= 0:
                    break
    return largest


class _CgroupExecGroup:
    """A command's processes as one cgroup, with its own limits and its own resource report.

    The cgroup is ready when it adopts the command's first process: the cgroup of the command before (``finished``),
    when it can be reused (see ``Cgroup.recycle``), else a fresh one, the other removed. Its report counts from
    there. All of a command's cgroup changes happen in that one call, which the caller makes off the event loop
    (see ``in_thread``).
    """

    cpu_watched = True

    def __init__(self, cgroup: Cgroup, sandbox: Cgroup, limits: Limits, finished: _CgroupExecGroup | None) -> None:
        self.cgroup = cgroup
        #: The sandbox's cgroup, the command's parent: its memory limit is the sandbox's too.
        self._sandbox = sandbox
        self._limits = limits
        self._finished = finished
        self._before = CgroupStats(cpu_s=0.0, peak_memory_bytes=0, oom_kills=0, pids_limit_hits=0)

    def adopt(self, pid: int) -> None:
        finished, self._finished = self._finished, None
        if self.cgroup.shared:  # v1: the command's memory is its sandbox's (see ``_cgroup``)
            if finished is not None and not finished.cgroup.pids():
                self.cgroup = finished.cgroup  # its pids and cpuacct cgroups serve again, counted from here
            else:
                if finished is not None:
                    finished.cgroup.remove()
                self.cgroup.create()
                self.cgroup.set_limits(memory_bytes=None, pids=self._limits.pids)  # memory: begin's
            self._before = self.cgroup.begin(memory_bytes=self._limits.memory_bytes, most_left=self._limits.disk_bytes)
            self.cgroup.add(pid)
            return
        if finished is not None:
            memory = self._limits.memory_bytes
            before = finished.cgroup.recycle(memory_bytes=memory, most_left=int(memory * _MOST_LEFT_SHARE))
            if before is not None:
                self.cgroup, self._before = finished.cgroup, before
                self.cgroup.add(pid)
                return
            finished.cgroup.remove()
        self.cgroup.create()
        self.cgroup.set_limits(memory_bytes=self._limits.memory_bytes, pids=self._limits.pids)
        self.cgroup.add(pid)

    def remove(self) -> None:
        """Remove the group of the command before (if still there), then this one's (if made)."""
        if self._finished is not None:
            self._finished.cgroup.remove()
            self._finished = None
        self.cgroup.remove()

    def kill(self) -> None:
        self.cgroup.send_kill()

    async def ended(self) -> None:
        await self.cgroup.killed()

    def cpu_s(self) -> float:
        return self.cgroup.cpu_s() - self._before.cpu_s

    def pids_limit_hits(self) -> int:
        return self.cgroup.pids_limit_hits() - self._before.pids_limit_hits

    def memory_limit_exceeded(self) -> bool:
        return self.cgroup.sockets_over_limit()

    def usage(self, exited: Exited | None) -> Usage:
        now, before = self.cgroup.stats(), self._before
        peak = (
            None if now.peak_memory_bytes is None else max(0, now.peak_memory_bytes - (before.peak_memory_bytes or 0))
        )
        oom_kills, limit_hits = now.oom_kills - before.oom_kills, now.memory_limit_hits - before.memory_limit_hits
        if oom_kills and not limit_hits:
            # Was it the sandbox's limit, reached by this command or an earlier one (what a session leaves charged
            # is its own doing)? Only an OOM kill with no limit of the sandbox's reached is the host's.
            limit_hits = self._sandbox.memory_limit_hits(local=True)
        return Usage(
            now.cpu_s - before.cpu_s,
            peak,
            oom_kills,
            now.pids_limit_hits - before.pids_limit_hits,
            memory_limit_hits=limit_hits,
            memory_over_limit=self.cgroup.sockets_over_limit(),
        )


class NamespaceSandbox:
    """One sandbox of this backend: its directory, uid, cgroup, and (while started) its agent."""

    def __init__(self, config: SandboxConfig) -> None:
        self.limits = config.limits
        self.network = network = config.network
        self.host = NamespaceHost.get()
        self.layer = config.runtime
        #: The image whose root is the sandbox's, or None (the host's system directories).
        self.image = config.image
        self._interpreter_env = dict(config.interpreter_env)
        #: What the sandbox mounts for its Python: the layer's, or the host's (none on an image).
        self.runtime = self.host.mounts(config.runtime, config.image)
        self._layer_lock: int | None = None
        self._image_lock: int | None = None
        workspace = config.workspace
        #: Why ``workspace`` cannot be overlaid here (the caller copies it then), or None.
        self.overlay_unavailable = self.host.overlays.unavailable(workspace) if workspace is not None else None
        #: The host directory overlaid at /workspace, or None (an empty /workspace of the writable tree's).
        self.workspace = workspace if self.overlay_unavailable is None else None
        self._merged: int | None = None  # the overlay's merged view, while the agent runs
        self._pristine: UpperState | None = None
        self._launcher: Launched | None = None
        self.id = secrets.token_hex(6)
        self.uid = -1
        self._cgroup = self.host.cgroups.cgroup(f"rollbox-{self.id}", sockets=network is Network.LOOPBACK)
        self._dir: SandboxDir | None = None
        self._agent: AgentConnection | None = None
        self._zygote: AgentConnection | None = None
        self._execs = 0

    @property
    def memory_cgroup(self) -> str:
        """The directory of the sandbox's cgroup in the memory controller's hierarchy."""
        return self._cgroup.directory("memory")

    @property
    def writable_root(self) -> Path:
        """The host directory holding workspace/, tmp/ and shm/."""
        assert self._dir is not None
        return self._dir.fs

    @property
    def workspace_view(self) -> str | None:
        """Where the host reaches /workspace when it is an overlay (the merged view), else None."""
        return None if self._merged is None else f"/proc/self/fd/{self._merged}"

    async def start(self) -> None:
        """Build the sandbox and start its agent.

        Raises:
            SandboxError: any step failed (the host's own error, an ``OSError`` such as running out of file
                descriptors, is its cause); everything made so far is removed, or, where removing it failed too,
                removed at the next start.
        """
        self.host.close_unclosed()
        made: asyncio.Future[None] | None = None
        try:
            self._hold_layer()
            self._hold_image()
            self.uid = self.host.state.uids.take()
            self._dir = SandboxDir.create(self.host.state, self.id, self.host.cgroups, uid=self.uid)
            self._dir.record_cgroup(self._cgroup)
            # The agent is in no cgroup of rollbox's: the sandbox's cgroup is made in a thread (see ``in_thread``)
            # while the launcher starts, and is there before the first command's cgroup is made inside it.
            made = asyncio.ensure_future(in_thread(self._make_cgroup))
            self._dir.make_writable_tree(
                size_bytes=self.limits.disk_bytes, uid=self.uid, gid=self.uid, overlay=self.workspace is not None
            )
            await self._start_agent()
            await made
        except BaseException as exc:
            if made is not None:
                made.cancel()  # a cgroup change under way finishes first
                with contextlib.suppress(BaseException):
                    await made
            try:
                self.close()
            except Exception as cleanup:  # the same shortage, often: the first error is the one to see
                exc.add_note(f"removing what was made failed too ({cleanup}); the next sandbox start retries it")
            if isinstance(exc, OSError):
                raise SandboxError(host_error("cannot start a sandbox", exc)) from exc
            raise

    def _hold_layer(self) -> None:
        """Take the layer's shared lock for as long as the sandbox lives, so that no ``gc`` removes it meanwhile."""
        if self.layer is None:
            return
        try:
            self._layer_lock = self.layer.hold()
        except (FileNotFoundError, BlockingIOError) as exc:
            raise SandboxError(
                f"the runtime layer {self.layer.key[:12]} ({self.layer.path}) is gone or being removed; "
                "build it again with LayerStore().ensure(spec) or 'rollbox env build TASK'"
            ) from exc
        except OSError as exc:
            raise SandboxError(host_error(f"cannot hold the runtime layer {self.layer.key[:12]}", exc)) from exc

    def _hold_image(self) -> None:
        """Take the image root's shared lock for as long as the sandbox lives, so that no ``gc`` removes it."""
        if self.image is None:
            return
        try:
            self._image_lock = self.image.hold()
        except (FileNotFoundError, BlockingIOError) as exc:
            raise SandboxError(
                f"the root of the image {self.image.digest} ({self.image.root}) is gone or being removed; "
                "import the image again ('rollbox images import' or 'rollbox images pull')"
            ) from exc
        except OSError as exc:
            raise SandboxError(host_error(f"cannot hold the root of the image {self.image.digest}", exc)) from exc

    def _make_cgroup(self) -> None:
        self._cgroup.create(delegate=True)
        # What commands leave charged to the sandbox outlives them (tmpfs pages, IPC objects): bound it too.
        self._cgroup.set_limits(
            memory_bytes=self.limits.memory_bytes + self.limits.disk_bytes, pids=self.limits.pids + 8
        )

    async def _start_agent(self) -> None:
        assert self._dir is not None
        # Descriptors passed to the launcher are closed here once it has them; those the sandbox keeps, only on
        # failure (which may be the host running out of descriptors at any of these steps).
        with contextlib.ExitStack() as passed_fds, contextlib.ExitStack() as kept:
            root = await self.host.roots.get(self._shared_ops(), _spawn)
            passed_fds.callback(os.close, root)
            host_end, sandbox_end = roomy_socketpair()
            kept.callback(host_end.close)
            passed_fds.callback(sandbox_end.close)
            host_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # the hello then says who the agent is
            seccomp_r, seccomp_w = os.pipe2(os.O_CLOEXEC)
            passed_fds.callback(os.close, seccomp_r)
            try:
                os.write(seccomp_w, build_filter(allow_inet=self.network is Network.LOOPBACK))
            finally:
                os.close(seccomp_w)
            status_r, status_w = os.pipe2(os.O_CLOEXEC)
            kept.callback(os.close, status_r)
            passed_fds.callback(os.close, status_w)
            fs_fd, held = self._dir.fs_fd, self._dir.held_as
            assert fs_fd is not None
            # The launcher gets the agent's socket as fd 3, the filter as 4, the pipe for its report of the agent's
            # end as 5, the shared root as 6, and the writable tree as 7: the host's detached mount, or the
            # spawner's clone of the tree it holds.
            passed = [sandbox_end.fileno(), seccomp_r, status_w, root, *([] if held else [fs_fd])]
            launcher = [str(self.host.agent), "launch", "--uid", str(self.uid), "--gid", str(self.uid)]
            launcher += ["--id", str(SANDBOX_UID), "--seccomp", "4", "--status", "5", "--hostname", "rollbox"]
            launcher += ["--chdir", "/workspace", "--net", self.network.value, "--stage", str(self.host.state.stage)]
            launcher += ["--root", "6", "--fs-tree" if held else "--fs", "7"]
            argv = [*launcher, *self._own_ops(), "--", _AGENT_PATH, "serve", "3"]
            # Cancelled meanwhile, the spawn still ends (the spawner answers within moments), and the launcher is
            # then ended as a close ends it (the agent sees its socket close and exits, and the launcher reaps it):
            # killed instead, it would leave its agent to die in its own time, after the sandbox has closed.
            spawning = asyncio.ensure_future(_spawn(argv, passed, held, launch=True))
            cancelled = await settled(spawning)
            try:
                process = spawning.result()
            except BaseException as exc:
                if cancelled:
                    raise asyncio.CancelledError from exc
                if isinstance(exc, SandboxError):
                    raise SandboxError(f"cannot start the sandbox launcher {self.host.agent}: {exc}") from exc
                raise
            process.watch_by_hangup(status_r)
            self._agent = AgentConnection(
                host_end, process, monitor=status_r, oom_kills=self.host.cgroups.helpers_oom_kills
            )
            self._launcher = process
            kept.pop_all()
        if cancelled:
            raise asyncio.CancelledError
        await self._agent.wait_ready()
        if self.workspace is not None:
            self._open_merged()

    def _open_merged(self) -> None:
        """Open the overlay's merged view; over a new tree, note how its upper directory looks: pristine."""
        assert self._launcher is not None and self._dir is not None and self._dir.fs_fd is not None
        merged = open_merged(self._launcher.pid)
        if self._launcher.exited():
            os.close(merged)
            raise SandboxError("the sandbox's launcher ended while its workspace overlay was being opened")
        self._merged = merged
        if self._pristine is None:  # a restart that kept the tree keeps what it was at first
            self._pristine = UpperState.of(self._dir.fs_fd)

    def _close_merged(self) -> None:
        if self._merged is not None:
            os.close(self._merged)
            self._merged = None

    def _shared_ops(self) -> list[str]:
        """The operations of the read-only root this sandbox shares with every other of its runtime (``agent.c
        template``): the system directories, /etc, the devices, the runtime and the agent, and the mount points of
        the sandbox's own mounts."""
        ops = self._image_ops() if self.image is not None else self._host_ops()
        ops += ["--dir", "/proc"]
        for device in _DEVICES:
            ops += ["--dev", device]
        for name, target in _DEVICE_LINKS:
            ops += ["--symlink", target, f"/dev/{name}"]
        for point in ("/dev/pts", *_WRITABLE):
            ops += ["--dir", point]
        for source, dest in self.runtime.binds:
            if not _below_writable(dest):
                ops += ["--ro", source, dest]
        ops += ["--ro", str(self.host.agent), _AGENT_PATH, "--ro", _ZYGOTE_SOURCE, _ZYGOTE_PATH]
        return ops

    def _host_ops(self) -> list[str]:
        """The host's system directories, and rollbox's /etc for them."""
        ops: list[str] = []
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                ops += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                ops += ["--ro", path, path]
        return [*ops, "--ro", str(self.host.state.etc), "/etc"]

    def _image_ops(self) -> list[str]:
        """The image's root, entry by entry at the top (so that rollbox's own mounts take their places): its
        directories and files bound read-only, its links made again (an image's /etc is its own, with the
        sandbox's user; see ``images._compose``)."""
        assert self.image is not None
        ops: list[str] = []
        with os.scandir(self.image.root) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name in _NOT_FROM_IMAGE:
                    continue
                if entry.is_symlink():
                    ops += ["--symlink", os.readlink(entry.path), f"/{entry.name}"]
                elif entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                    ops += ["--ro", entry.path, f"/{entry.name}"]
        return ops

    def _own_ops(self) -> list[str]:
        """The launcher's operations for this sandbox's own mounts, in its copy of the shared root: its writable tree
        (its directories by name), its ptys, and any runtime bound below a writable directory."""
        if self.workspace is None:
            ops = ["--rw", "workspace", "/workspace"]
        else:
            ops = ["--overlay", str(self.workspace), "workspace", ".work", "/workspace"]
        ops += ["--rw", "tmp", "/tmp", "--rw", "shm", "/dev/shm", "--devpts", "/dev/pts"]
        for source, dest in self.runtime.binds:
            if _below_writable(dest):
                ops += ["--ro", source, dest]
        return ops

    async def reset(self, *, fresh: bool = False) -> bool:
        """Make the sandbox as good as new for its next user; True when it restarted (new namespaces).

        Every process of every command is already dead (each command's cgroup is killed when it ends). When the
        sandbox has no network and the agent, its parent and the zygote are exactly as they started
        (``_health``: not stopped, same priority, scheduling, rlimits, affinity, OOM score, I/O priority), the
        agent removes the SysV IPC objects (POSIX queues are refused by the syscall filter, namespaced sysctls are
        read-only) and the tree is emptied in place, with its directories' attributes (ACLs, xattrs, times):
        about a millisecond. Otherwise, or if any step fails, the sandbox restarts with new namespaces, a new
        agent and a new tree; ``fresh`` asks for that always. What stays visible after an in-place reset is only
        how much ran before: pid numbers, IPC ids and inode numbers continue, and the agent's counted child CPU
        time (a few bits a user can set on purpose, for the next one to read).
        """
        assert self._dir is not None
        helpers = [self._agent, *([self._zygote] if self._zygote is not None else [])]
        # A loopback network namespace keeps what its sockets did (TIME_WAIT ports, counters): never emptied in place.
        reusable = not fresh and self.network is Network.NONE and all(h is not None and h.unchanged for h in helpers)
        # An overlaid workspace is pristine again only by a new overlay, unless nothing in it changed.
        overlay_pristine = self.workspace is None or (
            self._merged is not None
            and self._dir.fs_fd is not None
            and UpperState.of(self._dir.fs_fd) == self._pristine
        )
        if reusable and overlay_pristine and self._agent is not None:
            try:
                await self._agent.remove_ipc_objects()
                self._dir.empty_writable_tree(uid=self.uid, gid=self.uid, keep_workspace=self.workspace is not None)
                return False
            except (SandboxError, OSError):
                pass
        await self._restart(new_tree=True)
        return True

    async def _restart(self, *, new_tree: bool = False) -> None:
        """Stop the agent and the zygote, optionally replace the writable tree, and start a new agent."""
        assert self._dir is not None
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        self._close_merged()  # it holds the old overlay, and so the old tree, alive
        if self._agent is not None:
            await self._agent.aclose()
            self._agent = None
        if new_tree:
            self._pristine = None
            self._dir.replace_writable_tree(
                size_bytes=self.limits.disk_bytes, uid=self.uid, gid=self.uid, overlay=self.workspace is not None
            )
        await self._start_agent()

    def disk_full(self) -> bool:
        """True when the writable tree has no block or no inode left, or a file reached the file size limit."""
        if self._dir is None:
            return False
        assert self._dir.fs_fd is not None
        st = os.fstatvfs(self._dir.fs_fd)  # the mount's fd: no path to build and look up, twice a command
        if st.f_bavail == 0 or st.f_favail == 0:
            return True
        # Without an explicit file size limit, RLIMIT_FSIZE is the disk size: reaching it fills the disk.
        return self.limits.file_size_bytes is not None and _largest_file(self._dir.fs) >= self.limits.file_size_bytes

    async def exec_group(self, finished: ExecGroup | None = None) -> ExecGroup:
        """The cgroup for the next command, restarting the agent first if something killed or stopped it. It is
        made when it adopts the command's process, and ``finished``, the cgroup of a command that ended, is removed
        then (``SandboxError`` there if either fails)."""
        if self._agent is None or not self._agent.alive:
            await self._restart()
        assert finished is None or isinstance(finished, _CgroupExecGroup)
        self._execs += 1
        command = self._cgroup.child(f"exec-{self._execs}", share_memory=True)
        return _CgroupExecGroup(command, self._cgroup, self.limits, finished)

    @property
    def agent(self) -> AgentConnection:
        """The running agent."""
        assert self._agent is not None
        return self._agent

    def finish_exec(self, group: ExecGroup) -> None:
        """Remove a command's cgroup once its result is read (and the one before it, if that is still there)."""
        assert isinstance(group, _CgroupExecGroup)
        group.remove()

    @property
    def agent_alive(self) -> bool:
        """Whether the agent is running and answering."""
        return self._agent is not None and self._agent.alive

    @property
    def zygote_alive(self) -> bool:
        """Whether the zygote is running (it starts on first use)."""
        return self._zygote is not None and self._zygote.alive

    async def zygote(self) -> AgentConnection:
        """The sandbox's Python zygote, started on first use and again if something killed it.

        Raises:
            SandboxError: it could not be started.
        """
        if self._zygote is not None and self._zygote.alive:
            return self._zygote
        if self._zygote is not None:
            self._zygote.close()
        env = {"PATH": PATH, "PYTHONHASHSEED": "0", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": "/workspace"}
        env.update(self._interpreter_env)  # what a fork cannot take: the configuration's hash seed, a preload
        argv = ["python3", "-s", _ZYGOTE_PATH, "serve", "3"]
        self._zygote = await self.agent.start_zygote(argv, env, self.limits)
        return self._zygote

    def close(self) -> None:
        """Kill everything, remove the cgroup, free the tree, free the uid (idempotent).

        Raises:
            SandboxError, OSError: part of it failed; where for want of descriptors or memory, the next sandbox
                start of this process tries again.
        """
        try:
            self._close()
        except Exception as exc:
            if _short_of_resources(exc):
                self.host.close_later(self)
            raise

    def _close(self) -> None:
        # Closing the socket ends the agent (pid 1 inside: the kernel kills what is left there), then the launcher,
        # each reaped by its parent (killing them all at once would orphan the agent to the spawner). The
        # host's side of the tree goes while they exit: their mount namespace holds its own reference to the tmpfs.
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None
        self._close_merged()
        if self._agent is not None:
            self._agent.shutdown()
        try:
            if self._dir is not None:
                self._dir.destroy()
                self._dir = None
            else:
                with contextlib.suppress(SandboxError):
                    self._cgroup.remove()
        finally:  # the agent is reaped whatever failed; the uid stays taken while processes of it may live
            if self._agent is not None:
                self._agent.reap()
                self._agent = None
        if self.uid >= 0:
            self.host.state.uids.release(self.uid)
            self.uid = -1
        if self._layer_lock is not None:
            os.close(self._layer_lock)
            self._layer_lock = None
        if self._image_lock is not None:
            os.close(self._image_lock)
            self._image_lock = None
