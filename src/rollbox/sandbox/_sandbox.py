"""The public sandbox: a single-use async context manager that runs any number of commands, one at a time.

    async with Sandbox(limits=Limits(timeout_s=5)) as sb:
        await sb.write_file("main.py", "print(6 * 7)")
        result = await sb.exec(["python3", "main.py"])
        assert result.stdout == b"42\\n"

State lives in the filesystem (/workspace and /tmp persist between commands); every process a command starts
dies when it ends. ``run`` is the one-shot form.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, Protocol

from rollbox import telemetry

from ._changes import WorkspaceChanges, tree_size
from ._config import SandboxConfig
from ._errors import IsolationUnavailable, SandboxError, SandboxStateError
from ._files import (
    OverlayNotPlain,
    copy_out_beneath,
    copy_upper_out,
    read_beneath,
    remove_beneath,
    resolve_sandbox_path,
    symlink_beneath,
    write_beneath,
)
from ._kernel import open_files_ceiling
from ._limits import Limits, Network
from ._process import ProcessSandbox
from ._result import ExecResult, Status
from ._settle import settled
from ._shortage import host_error
from .agent._protocol import AgentConnection, ExecGroup, ExecRequest, Spare
from .images._image import Image
from .namespaces._backend import PATH, NamespaceSandbox, image_path
from .runtime._store import Layer

__all__ = ["Backend", "Sandbox", "run"]

#: How a sandbox isolates: ``"namespaces"`` (the real boundary) or ``"process"`` (rlimits only; no boundary).
Backend = Literal["namespaces", "process"]
#: How a sandbox's /workspace holds the host directory it was given (``Sandbox(workspace=...)``).
WorkspaceMode = Literal["overlay", "copy"]
_RENAMED_BACKENDS: dict[str, Backend] = {"bwrap": "namespaces"}  # rollbox makes the namespaces itself now


class _Backend(Protocol):
    limits: Limits
    uid: int

    @property
    def writable_root(self) -> os.PathLike[str]: ...
    @property
    def agent(self) -> AgentConnection: ...
    async def start(self) -> None: ...
    async def reset(self, *, fresh: bool = False) -> bool: ...
    async def exec_group(self, finished: ExecGroup | None = None) -> ExecGroup: ...
    async def zygote(self) -> AgentConnection: ...
    @property
    def agent_alive(self) -> bool: ...
    @property
    def zygote_alive(self) -> bool: ...
    def finish_exec(self, group: ExecGroup) -> None: ...
    def disk_full(self) -> bool: ...
    def close(self) -> None: ...


class _State(enum.Enum):
    NEW = "new"
    OPEN = "open"
    CLOSED = "closed"


class Sandbox:
    """An isolated place to run commands: namespaces, cgroups, a syscall filter, no network by default.

    Args:
        config: What the sandbox is made with, as one value (see :class:`SandboxConfig`); or give its fields as
            the keyword arguments below (``limits``, ``network``, ``env``, ``runtime``, ``workspace``, ``image``).
        limits: What every command may use (defaults: :class:`Limits`).
        network: ``"none"`` (default) or ``"loopback"`` (a loopback of the sandbox's own).
        backend: ``"namespaces"`` (default) or ``"process"`` (rlimits only; not a security boundary, warns).
        env: Extra environment variables for every command (nothing of the host's environment is passed).
        runtime: A runtime layer: its Python and packages (see :mod:`rollbox.sandbox.runtime`).
        workspace: A host directory /workspace starts as, copy-on-write (never written).
        image: An image whose root is the sandbox's ``/``, read-only (see :mod:`rollbox.sandbox.images`); its
            ``Env`` starts every command's environment, its ``PATH`` is the commands' PATH.
        warm_python: Expect ``warm_python`` commands (see :meth:`exec`): the sandbox's Python zygote starts with
            the sandbox, in the background, and again whenever the sandbox restarts, so that no command waits for
            it. Off by default: a zygote costs more CPU than one plain ``python3``, and pays off from a few
            commands on.

    Raises:
        IsolationUnavailable: on entry, when the machine cannot give the isolation asked for (or the limits: a
            command's open files beyond what rollbox may allow here).
        SandboxError: on entry, when the sandbox could not be built.
    """

    def __init__(
        self,
        config: SandboxConfig | None = None,
        *,
        limits: Limits | None = None,
        network: Network | str | None = None,
        backend: Backend = "namespaces",
        env: Mapping[str, str] | None = None,
        warm_python: bool = False,
        runtime: Layer | None = None,
        workspace: str | os.PathLike[str] | None = None,
        image: Image | None = None,
    ) -> None:
        #: What the sandbox is made with (the keyword arguments, when no ``config`` is given, make one).
        self.config = SandboxConfig.of(
            config, limits=limits, network=network, env=env, runtime=runtime, workspace=workspace, image=image
        )
        if backend not in ("namespaces", "process"):
            renamed = _RENAMED_BACKENDS.get(backend)
            hint = f" ({backend!r} is now {renamed!r})" if renamed else ""
            raise ValueError(f"unknown backend {backend!r}: expected 'namespaces' or 'process'{hint}")
        if backend == "process" and self.network is not Network.NONE:
            raise ValueError("the process backend cannot give a private loopback: use backend='namespaces'")
        if backend == "process" and self.runtime is not None:
            raise ValueError("the process backend runs the host's own Python and cannot mount a runtime layer")
        if backend == "process" and self.config.image is not None:
            raise ValueError("the process backend runs on the host's own files and cannot mount an image")
        self.backend: Backend = backend
        if self.workspace is not None and not self.workspace.is_dir():
            raise ValueError(f"workspace {str(self.workspace)!r} is not a directory; give a directory to start from")
        #: ``"overlay"`` or ``"copy"`` once open with a ``workspace`` (see above); None without one.
        self.workspace_mode: WorkspaceMode | None = None
        self._impl: _Backend | None = None
        self._state = _State.NEW
        self._lock = asyncio.Lock()
        self._spare: asyncio.Future[Spare | ExecResult] | None = None
        self.warm_python = warm_python
        self._spare_warm = warm_python
        #: Labels its users put here, kept until the sandbox's namespaces are made anew (a restart, or
        #: ``reset(fresh=True)``): a user that must not meet what an earlier one of a kind could leave in the
        #: kernel's counters (pid numbers, IPC ids) looks here first. The judge marks check variants this way.
        self.history: set[str] = set()

    @property
    def limits(self) -> Limits:
        """What every command may use (``config.limits``)."""
        return self.config.limits

    def disk_full(self) -> bool:
        """Whether the sandbox's own writable tree (/workspace, /tmp and /dev/shm) has reached its disk limit: no
        block or no inode left. Always False on a backend with no disk limit of its own (``process``), whose files
        are on the host's disk: a write failing there for want of room is the host's full disk, not the limit's."""
        return self._open().disk_full()

    @property
    def network(self) -> Network:
        """``config.network``."""
        return self.config.network

    @property
    def runtime(self) -> Layer | None:
        """``config.runtime``."""
        return self.config.runtime

    @property
    def workspace(self) -> Path | None:
        """``config.workspace``: the host directory /workspace starts as, or None."""
        return self.config.workspace

    @property
    def image(self) -> Image | None:
        """``config.image``: the image whose root the sandbox runs on, or None (the host's)."""
        return self.config.image

    async def __aenter__(self) -> Sandbox:
        if self._state is not _State.NEW:
            raise SandboxStateError(f"this sandbox is {self._state.value}; a Sandbox can be entered only once")
        if self.limits.open_files > (ceiling := open_files_ceiling()):
            raise IsolationUnavailable(
                f"a command may have {self.limits.open_files} open files (Limits.open_files), but rollbox can give "
                f"at most {ceiling} here: its own hard limit on open files, which it cannot raise (no "
                "CAP_SYS_RESOURCE). Lower Limits.open_files, or start rollbox with a higher hard limit (ulimit -Hn)"
            )
        impl: _Backend = NamespaceSandbox(self.config) if self.backend == "namespaces" else ProcessSandbox(self.limits)
        await impl.start()
        self._impl = impl
        self._state = _State.OPEN
        try:
            await self._fill_workspace(impl)
        except BaseException:
            await self.close()
            raise
        self._prepare_spare(impl, self.warm_python)  # with warm_python, this starts the zygote
        return self

    async def _fill_workspace(self, impl: _Backend) -> None:
        """Copy the workspace in where it is not overlaid (this kernel or its filesystem cannot), saying so.

        Raises:
            SandboxError: the copy failed (the workspace does not fit the disk limit, say).
        """
        if self.workspace is None:
            return
        reason = impl.overlay_unavailable if isinstance(impl, NamespaceSandbox) else "the process backend"
        self.workspace_mode = "copy" if reason else "overlay"
        if reason is None:
            return
        telemetry.emit("sandbox.workspace_copied", workspace=str(self.workspace), reason=reason)
        try:
            await self.write_tree(self.workspace)
        except OSError as exc:
            raise SandboxError(host_error(f"cannot copy the workspace {self.workspace} into the sandbox", exc)) from exc

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Kill every process, remove the cgroup, and free the sandbox's files (idempotent)."""
        if self._impl is not None:
            async with self._lock:
                impl, self._impl = self._impl, None
                try:
                    await self._drop_spare(impl)
                finally:
                    impl.close()
        self._state = _State.CLOSED

    @property
    def warm_python_ready(self) -> bool:
        """Whether the sandbox's Python zygote is running now, so that a ``warm_python`` command costs a fork; when
        it is not, the first such command pays for starting it (more than one plain ``python3``)."""
        return self._impl is not None and self._impl.zygote_alive

    async def reset(self, *, fresh: bool = False) -> None:
        """Make the sandbox as good as new for another user: what warm pools call between uses.

        Afterwards no process of any earlier command lives (none ever outlives its command), /workspace, /tmp and
        /dev/shm are empty, the SysV IPC objects are gone, and the agent and the zygote are either exactly as they
        started or new (see the backend). What an in-place reset leaves is how much ran before (pid numbers, IPC
        ids and inode numbers continue): a few bits that one user can set on purpose for the next to read. With
        ``fresh``, or when anything about the agent changed, the sandbox restarts instead, with new namespaces,
        agent and tree, and :attr:`history` is cleared. The environment is per command already.

        Raises:
            SandboxStateError: the sandbox is not open.
            SandboxError: the sandbox could not be reset (the caller should close it).
        """
        async with self._lock:
            impl = self._open()
            spare = await self._claim_spare()
            try:
                if await impl.reset(fresh=fresh):
                    self.history.clear()
                if self.workspace_mode == "copy":
                    await self._fill_workspace(impl)
            except OSError as exc:
                raise SandboxError(host_error("cannot reset the sandbox", exc)) from exc
            finally:
                if isinstance(spare, Spare) and spare.runner.alive:
                    # The agent and the zygote were kept: the spare, forked from them after the last command had
                    # ended, is as pristine as they are.
                    self._spare = _done(spare)
                elif isinstance(spare, Spare):
                    spare.sync.close()
                    _finish(impl, spare.group)
            if self._spare is None:
                self._prepare_spare(impl, self._spare_warm or self.warm_python)

    async def _drop_spare(self, impl: _Backend) -> None:
        """Stop preparing a spare, and remove it and its group, before the sandbox closes."""
        task, self._spare = self._spare, None
        if task is None:
            return
        task.cancel()  # a cgroup change under way finishes first (see ``in_thread``)
        cancelled = await settled(task)  # what it made, even as the close is cancelled, is removed
        spare = None if task.cancelled() else task.result()
        if isinstance(spare, Spare):
            spare.sync.close()
            _finish(impl, spare.group)
        if cancelled:  # close itself was cancelled: say so
            raise asyncio.CancelledError

    def _open(self) -> _Backend:
        if self._impl is None:
            hint = "use 'async with Sandbox() as sb:'" if self._state is _State.NEW else "make a new Sandbox"
            raise SandboxStateError(f"this sandbox is {self._state.value}; {hint}")
        return self._impl

    def _environment(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        home = "/workspace" if self.backend == "namespaces" else os.path.join(self._open().writable_root, "workspace")
        tmp = "/tmp" if self.backend == "namespaces" else os.path.join(self._open().writable_root, "tmp")
        env = dict(self.image.config.env) if self.image is not None else {}
        env |= {
            "PATH": PATH if self.backend == "namespaces" else os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "TMPDIR": tmp,
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "USER": "sandbox",
            "LOGNAME": "sandbox",
        }
        if self.image is not None:
            env["PATH"] = image_path(self.image, self.runtime)
        env.update(self.config.env)
        env.update(extra or {})
        return env

    async def exec(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | str | None = None,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = "/workspace",
        warm_python: bool = False,
    ) -> ExecResult:
        """Run one command to its end; every process it starts dies with it.

        Args:
            argv: The program and its arguments (looked up on the sandbox's PATH).
            stdin: Bytes (or text, UTF-8 encoded) for its stdin; without it, stdin reads as empty.
            timeout_s: Wall-clock limit for this command (default: ``limits.timeout_s``).
            env: Extra environment variables for this command.
            cwd: Working directory inside the sandbox.
            warm_python: For ``["python3", SCRIPT, ARGS...]``: fork the sandbox's pre-started Python (its zygote)
                instead of starting a new interpreter, which saves most of Python's start-up. The script runs in
                a fresh copy of an interpreter that never ran anyone's code, in the command's own cgroup with its
                own limits, as ``python3 -s SCRIPT`` would (site-packages, ``__main__``, exit codes, atexit);
                interpreter options cannot be given.

        Returns:
            The result with its status and its own resource report. A failure of rollbox or the host during
            the run is a result with status ``infra_error``, never an exception.

        Raises:
            SandboxStateError: the sandbox is not open.
            ValueError: ``argv`` is empty or contains NUL characters.
        """
        impl = self._open()
        if not argv:
            raise ValueError("argv must name a program")
        if warm_python and (len(argv) < 2 or argv[0] != "python3" or argv[1].startswith("-")):
            raise ValueError(f"warm_python runs ['python3', SCRIPT, ARGS...] without interpreter options, got {argv!r}")
        if self.backend == "process" and cwd.startswith("/workspace"):
            cwd = os.path.join(impl.writable_root, "workspace", os.path.relpath(cwd, "/workspace"))
        request = ExecRequest(
            argv=list(argv),
            env=self._environment(env),
            cwd=cwd,
            stdin=stdin.encode() if isinstance(stdin, str) else stdin,
            timeout_s=self.limits.timeout_s if timeout_s is None else timeout_s,
        )
        async with self._lock:
            impl = self._open()
            result, started = await self._run(impl, request, warm_python)
            if result.status is Status.INFRA_ERROR and not started and self._helper_dead(impl, warm_python):
                # The agent (or zygote) failed to start the command, and nothing of it ran: an earlier command may
                # have stopped or crippled it. It has been marked dead; a fresh one gets one more try.
                result, _ = await self._run(impl, request, warm_python)
            return result

    @staticmethod
    def _helper_dead(impl: _Backend, warm_python: bool) -> bool:
        return not (impl.agent_alive and (not warm_python or impl.zygote_alive))

    async def _run(self, impl: _Backend, request: ExecRequest, warm_python: bool) -> tuple[ExecResult, bool]:
        """The command's result, and whether it started (a command that did is never run again)."""
        spare = await self._take_spare(impl, warm_python)
        if isinstance(spare, ExecResult):
            return spare, False
        try:
            result = await spare.runner.run(spare, request, self.limits, impl.disk_full)
        except SandboxError as exc:
            result = ExecResult.infra_error(str(exc))
        except BaseException:
            # Cancelled (or failed): the command's group goes in the background too, in a worker thread, where
            # waiting for a process with a gigabyte to free holds up no other sandbox.
            self._prepare_spare(impl, warm_python, spare.group)
            raise
        # The command's group is empty now (the command's end killed it); it is removed in the background.
        self._prepare_spare(impl, warm_python, spare.group)
        return result, spare.started

    # The next command's process is forked and placed in its cgroup while the sandbox is idle (a spare), so that
    # an exec only hands it the command: forking, and on cgroup v1 the move into a cgroup (which can wait for an
    # RCU grace period), stay off the command's path. One spare at a time, for the kind of the last command.

    async def _spawn(self, impl: _Backend, warm_python: bool, finished: ExecGroup | None = None) -> Spare | ExecResult:
        # Any failure is an infra_error result (OSError too: a host out of fds), never an exception: this runs in
        # the background, and the command that takes the spare reports it.
        try:
            group = await impl.exec_group(finished)
        except (SandboxError, OSError) as exc:
            return ExecResult.infra_error(_preparing_failed(exc))
        try:
            runner = await impl.zygote() if warm_python else impl.agent
            spare = await runner.spawn(group, self.limits)
        except (SandboxError, OSError) as exc:
            spare = ExecResult.infra_error(_preparing_failed(exc))
        except BaseException:
            _finish(impl, group)
            raise
        if isinstance(spare, ExecResult):
            _finish(impl, group)
        return spare

    async def _claim_spare(self) -> Spare | ExecResult | None:
        """The spare, once made, now the caller's to use or remove (None when none is being made).

        Cancelled meanwhile, the caller leaves it the sandbox's, still being made, for the next command or the
        close: the task can end in the very turn the caller is cancelled, and awaited plainly, what it made (a
        process and its socket) would be dropped.
        """
        task, self._spare = self._spare, None
        if task is None:
            return None
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():  # the caller holds the sandbox's lock: nothing else made one meanwhile
                self._spare = task
            raise

    def _prepare_spare(self, impl: _Backend, warm_python: bool, finished: ExecGroup | None = None) -> None:
        """Start the next spare in the background, removing on the way the group of the command that just ended."""
        self._spare_warm = warm_python
        self._spare = asyncio.ensure_future(self._spawn(impl, warm_python, finished))

    async def _take_spare(self, impl: _Backend, warm_python: bool) -> Spare | ExecResult:
        """The waiting spare when it suits this command, else a new one."""
        spare = await self._claim_spare()
        if isinstance(spare, Spare):
            if self._spare_warm == warm_python and spare.runner.alive:
                return spare
            await spare.runner.discard(spare)
            _finish(impl, spare.group)
        return await self._spawn(impl, warm_python)

    async def write_file(self, path: str, data: bytes | str, *, mode: int = 0o644, read_only: bool = False) -> None:
        """Write a file in /workspace (relative paths) or /tmp, creating parent directories.

        With ``read_only``, the file and the directories this call creates belong to a user the program is not,
        and have no write bits: the program can read them but never change, rename or delete them.

        Raises:
            ValueError: the path is outside /workspace and /tmp.
            OSError: the write failed (for example, the disk limit is reached, or the path passes through a
                symbolic link, which the host never follows).
        """
        self._write_now(self._open(), path, data.encode() if isinstance(data, str) else data, mode, read_only)

    def _write_now(self, impl: _Backend, path: str, data: bytes, mode: int, read_only: bool) -> None:
        root, relative = resolve_sandbox_path(path)
        owner = 0 if read_only and self.backend == "namespaces" else impl.uid
        write_beneath(
            _tree(impl, root), relative, data, uid=owner, gid=owner, mode=mode & ~0o222 if read_only else mode
        )

    async def write_files(self, files: Mapping[str, bytes | str | None]) -> None:
        """Write several files in /workspace (relative paths) or /tmp, or, for ``None``, remove the path as
        :meth:`remove` does; in order, all in one worker thread: a thousand files cost one hand-off, and none of
        them holds the event loop. As a program's ``cat > FILE`` would, a file that exists keeps its mode, and a
        new one gets 0644 and its missing parent directories.

        Raises:
            ValueError: a path is outside /workspace and /tmp (every path is checked before anything is written).
            OSError: a write or removal failed (the disk limit, a symbolic link on the path); its ``filename`` is
                the path as given, and the files before it were written.
        """
        impl = self._open()
        planned = [
            (path, *resolve_sandbox_path(path), data.encode() if isinstance(data, str) else data)
            for path, data in files.items()
        ]

        def write_all() -> None:
            for path, root, relative, data in planned:
                tree = _tree(impl, root)
                try:
                    if data is None:
                        remove_beneath(tree, relative)
                    else:
                        write_beneath(tree, relative, data, uid=impl.uid, gid=impl.uid, mode=None)
                except OSError as exc:
                    raise OSError(exc.errno, exc.strerror, path) from exc

        await asyncio.to_thread(write_all)

    async def write_tree(self, source: str | os.PathLike[str], dest: str = ".", *, read_only: bool = False) -> int:
        """Copy the files and symbolic links under the host directory ``source`` to ``dest`` (relative: under
        /workspace).

        Links are copied as links, never followed (inside the sandbox they can only point into the sandbox);
        other special files are skipped. ``read_only`` is as for :meth:`write_file`. Returns the entry count.

        Raises:
            ValueError: ``dest`` is outside /workspace and /tmp.
            OSError: a write failed (for example, the disk limit is reached).
        """
        impl = self._open()
        root = os.fspath(source)

        def copy_all() -> int:
            count = 0
            stack = [root]  # not os.walk, which recurses: a tree can be thousands of levels deep
            while stack:
                with os.scandir(stack.pop()) as entries:
                    for entry in entries:
                        relative = os.path.relpath(entry.path, root)
                        target = relative if dest in (".", "") else f"{dest.rstrip('/')}/{relative}"
                        if entry.is_symlink():
                            self._link_now(impl, target, os.readlink(entry.path))
                        elif entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                            continue
                        elif entry.is_file(follow_symlinks=False):
                            with open(entry.path, "rb") as f:
                                data = f.read()
                            mode = 0o755 if os.access(entry.path, os.X_OK) else 0o644
                            self._write_now(impl, target, data, mode, read_only)
                        else:
                            continue
                        count += 1
            return count

        # In one worker thread, as write_files: a tree of thousands of files (or of paths hundreds of directories
        # deep, a candidate's doing when the judge lays its tree) does not hold the event loop.
        return await asyncio.to_thread(copy_all)

    async def write_link(self, path: str, target: str) -> None:
        """Make ``path`` (relative: under /workspace) a symbolic link to ``target``, as ``ln -sf`` would.

        Raises:
            ValueError: the path is outside /workspace and /tmp.
            OSError: the link could not be made.
        """
        self._link_now(self._open(), path, target)

    def _link_now(self, impl: _Backend, path: str, target: str) -> None:
        root, relative = resolve_sandbox_path(path)
        symlink_beneath(_tree(impl, root), relative, target, uid=impl.uid, gid=impl.uid)

    async def read_file(self, path: str, *, max_bytes: int | None = None) -> bytes:
        """Read a file from /workspace (relative paths) or /tmp, whole or, with ``max_bytes``, only when it holds no
        more than that (a sparse file costs the program no disk, and its whole size in the host's memory).

        Raises:
            ValueError: the path is outside /workspace and /tmp.
            OSError: the file is missing, the path passes through a symbolic link, or it holds more than
                ``max_bytes`` (EFBIG).
        """
        root, relative = resolve_sandbox_path(path)
        # In a worker thread, as every read of the program's files: a file of megabytes does not hold the event loop.
        return await asyncio.to_thread(read_beneath, _tree(self._open(), root), relative, max_bytes)

    async def read_tree(
        self,
        dest: str | os.PathLike[str],
        path: str = ".",
        *,
        max_bytes: int | None = None,
        max_files: int | None = None,
    ) -> int:
        """Copy the sandbox directory ``path`` (relative: under /workspace; ``"."``: all of /workspace) to the
        host directory ``dest``, made if missing; the mirror image of :meth:`write_tree`.

        Links are copied as links and never followed, other special files are skipped, and nothing the program
        does meanwhile (swapping a directory for a link, growing a file) leads the host outside the sandbox's
        tree. Returns the entry count. Runs in a worker thread: a large tree does not hold the event loop.

        Raises:
            ValueError: ``path`` is outside /workspace and /tmp.
            TreeTooLarge: the tree holds more than ``max_files`` entries or ``max_bytes`` bytes of files, or a
                path deeper than 256 directories or longer than 2,048 bytes (more than the host can name or walk);
                what the program wrote, so a caller grading it treats this as the program's failure.
            OSError: the directory is missing or passes through a symbolic link.
        """
        root, relative = resolve_sandbox_path(path, directory=True)
        tree = _tree(self._open(), root)
        return await asyncio.to_thread(
            copy_out_beneath, tree, relative, os.fspath(dest), max_bytes=max_bytes, max_files=max_files
        )

    async def read_changes(
        self, dest: str | os.PathLike[str], *, max_bytes: int | None = None, max_files: int | None = None
    ) -> WorkspaceChanges:
        """Copy what the program changed in /workspace, relative to the workspace the sandbox started from, to the
        host directory ``dest`` (made if missing); what it removed comes back as paths.

        On a copy-on-write workspace this reads only the overlay's upper layer (the files and links made or
        changed, and the removals recorded there): it costs what the changes hold, however large the workspace
        under them. Where the workspace was copied in, or there is none, or the overlay records renamed
        directories (``redirect_dir``) or data-less copies (``metacopy``), the whole /workspace is copied
        instead, and the result says so (:attr:`WorkspaceChanges.whole`). As with :meth:`read_tree`, links are
        copied as links and never followed, and nothing the program does meanwhile leads the host outside the
        sandbox's tree.

        Args:
            max_bytes, max_files: the most the changes may hold: bytes of files, and entries (files, links,
                directories, removals). When the whole workspace is copied, the starting workspace's own are
                added to them.

        Raises:
            TreeTooLarge: the changes hold more than that, or a path too deep (as :meth:`read_tree`): what the
                program wrote, its failure, not the host's.
            OSError: copying failed on the host.
        """
        impl = self._open()
        if self.workspace_mode == "overlay":
            upper = os.path.join(impl.writable_root, "workspace")
            try:
                count, removed = await asyncio.to_thread(
                    copy_upper_out, upper, os.fspath(dest), max_bytes=max_bytes, max_files=max_files
                )
                return WorkspaceChanges(Path(dest), tuple(removed), whole=False, entries=count)
            except OverlayNotPlain as exc:
                telemetry.emit("sandbox.changes_read_whole", workspace=str(self.workspace), reason=str(exc))
                await asyncio.to_thread(shutil.rmtree, dest)
        if self.workspace is not None and (max_bytes is not None or max_files is not None):
            entries, size = await asyncio.to_thread(tree_size, self.workspace)
            max_bytes = None if max_bytes is None else max_bytes + size
            max_files = None if max_files is None else max_files + entries
        count = await self.read_tree(dest, max_bytes=max_bytes, max_files=max_files)
        return WorkspaceChanges(Path(dest), (), whole=True, entries=count)

    async def remove(self, path: str) -> None:
        """Remove a file, a link (never followed) or a whole directory in /workspace (relative paths) or /tmp. On a
        copy-on-write workspace the workspace under it is untouched: the removal is recorded over it.

        Raises:
            ValueError: the path is outside /workspace and /tmp, or is one of them.
            OSError: it is missing, or its path passes through a symbolic link.
        """
        root, relative = resolve_sandbox_path(path)
        await asyncio.to_thread(remove_beneath, _tree(self._open(), root), relative)


def _tree(impl: _Backend, root: str) -> str:
    """Where the host reaches the writable root ``root`` (``"workspace"``, ``"tmp"``): an overlaid workspace
    through its merged view, anything else in the writable tree."""
    view = impl.workspace_view if isinstance(impl, NamespaceSandbox) and root == "workspace" else None
    return view or os.path.join(impl.writable_root, root)


def _preparing_failed(exc: SandboxError | OSError) -> str:
    what = "preparing the next command failed"
    return host_error(what, exc) if isinstance(exc, OSError) else f"{what}: {exc}"


def _done(spare: Spare) -> asyncio.Future[Spare | ExecResult]:
    future: asyncio.Future[Spare | ExecResult] = asyncio.get_running_loop().create_future()
    future.set_result(spare)
    return future


def _finish(impl: _Backend, group: ExecGroup) -> None:
    """Remove a group no command will use any more. Its processes are dead or about to be killed by it; should
    the cgroup itself stay (a host fault), it goes when the sandbox closes, with the sandbox's whole tree."""
    with contextlib.suppress(SandboxError):
        impl.finish_exec(group)


async def run(
    argv: Sequence[str],
    *,
    limits: Limits | None = None,
    network: Network | str = Network.NONE,
    stdin: bytes | str | None = None,
    files: Mapping[str, bytes | str] | None = None,
    backend: Backend = "namespaces",
) -> ExecResult:
    """Run one command in a fresh sandbox and destroy it: the common case in one call.

    ``files`` maps sandbox paths (relative to /workspace) to their contents. A sandbox that cannot be built
    because rollbox or the host failed gives an ``infra_error`` result.

    Raises:
        IsolationUnavailable: the machine cannot give the isolation asked for.
    """
    try:
        async with Sandbox(limits=limits, network=network, backend=backend) as sb:
            for path, content in (files or {}).items():
                await sb.write_file(path, content)
            return await sb.exec(argv, stdin=stdin)
    except SandboxError as exc:
        return ExecResult.infra_error(str(exc))
