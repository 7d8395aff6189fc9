"""rollbox's host-side state: the state directory, sandbox uids, writable trees, and reaping leftovers.

Layout (``ROLLBOX_STATE_DIR``, default ``/run/rollbox``)::

    stage/                  an empty directory; each launcher mounts a private tmpfs here (invisible to the host),
                            with the runtime directories and the sandbox's writable tree under it
    etc-<hash>/             the sandbox's /etc: passwd, group, hosts and nsswitch.conf of its own, and copies of
                            the host's dynamic-linker files and alternatives (one bind mount instead of many;
                            a new directory whenever they change, so that running sandboxes never see a swap)
    uids.lock               byte n locked by the process whose sandbox runs as uid UID_BASE + n (see ``_uids``)
    runtime/                the host-side pieces of sandboxes' Pythons: the view of the host's environment,
                            interpreter binaries with a relocatable run path (see ``runtime._mounts``)
    sandboxes/<id>/uid      the sandbox's host uid: its lock free means the sandbox's owner died
    sandboxes/<id>/cgroup   the sandbox's cgroup path per hierarchy, for the reaper

The directory is a tmpfs: where it is new and its filesystem is not one (a /run on disk, as in some VMs and
containers), rollbox mounts one there (see :meth:`StateDir.ensure`), which lasts until the machine stops.

The kernel releases the uid locks when their owner dies however it dies, and the next rollbox start reaps what
that owner left: processes, cgroups and directories.

A sandbox's writable tree (workspace/, tmp/, shm/) is a size-limited tmpfs that is never mounted on the host: it
is a detached mount (``fsopen``/``fsmount``) held by an fd of the owning process, and attached only inside the
sandbox's own mount namespace. So the host's mount table does not grow with the number of sandboxes (each new
namespace copies it: that would make every start slower), and the tmpfs is freed when its owner dies, however it
dies: a mount cannot leak. On kernels that cannot clone a detached mount (Linux 6.1, 6.12), the tree is instead
mounted in the spawner's own mount namespace (:func:`trees_held`), which dies with the owner all the same.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rollbox.sandbox._errors import SandboxError
from rollbox.sandbox._shortage import host_error
from rollbox.sandbox.agent._spawner import Spawner

from ._cgroup import Cgroup, CgroupTree
from ._uids import UID_BASE, UID_COUNT, UidLocks

__all__ = ["UID_BASE", "UID_COUNT", "SandboxDir", "StateDir", "trees_held"]

_ABANDONED_S = 60.0  # a directory still being made after this long was left by a crash
SANDBOX_UID = 1000  # the uid the program sees inside

_libc = ctypes.CDLL(None, use_errno=True)

#: Host files the sandbox's /etc copies: what the dynamic linker and /usr/bin's alternatives links need.
_HOST_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives")
_ETC = {
    "passwd": "root:x:0:0:root:/nonexistent:/bin/false\n"
    f"sandbox:x:{SANDBOX_UID}:{SANDBOX_UID}:sandbox:/workspace:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    "group": f"root:x:0:\nsandbox:x:{SANDBOX_UID}:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1\tlocalhost rollbox\n::1\tlocalhost ip6-localhost ip6-loopback\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
}


def _on_tmpfs(path: Path) -> bool:
    buffer = ctypes.create_string_buffer(256)  # struct statfs; f_type, a long, comes first
    _check(_libc.statfs(bytes(path), buffer), f"stat the filesystem of {path}")
    return ctypes.c_long.from_buffer(buffer).value == _TMPFS_MAGIC


def _try_lock(path: Path, *, create: bool = True) -> int | None:
    """An fd holding an exclusive flock on ``path``, or None when another process holds it.

    Raises:
        FileNotFoundError: ``create`` is false and there is no such file.
    """
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


#: The most entries a writable tree may hold to be emptied in place (a few milliseconds' work).
EMPTY_IN_PLACE_MAX = 4096


def _empty(directory: int, budget: int) -> int:
    """Remove everything below the open directory ``directory``, depth first, holding an fd per level instead of
    recursing (``directory`` itself stays open); return what is left of ``budget``, the entries it may remove.

    Raises:
        OSError: more than ``budget`` entries (E2BIG), or one could not be removed.
    """
    stack: list[tuple[int, str]] = [(directory, "")]
    try:
        while stack:
            fd, _name = stack[-1]
            child = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    budget -= 1
                    if budget < 0:
                        raise OSError(errno.E2BIG, "too many entries to empty in place")
                    if entry.is_dir(follow_symlinks=False):
                        child = entry.name
                        break
                    os.unlink(entry.name, dir_fd=fd)
            if child is not None:
                stack.append((os.open(child, _DIRECTORY, dir_fd=fd), child))
                continue
            stack.pop()
            if stack:
                os.close(fd)
                os.rmdir(_name, dir_fd=stack[-1][0])
    finally:
        for fd, _name in stack[1:]:
            os.close(fd)
    return budget


_SYS_OPEN_TREE = 428
_SYS_FSOPEN, _SYS_FSCONFIG, _SYS_FSMOUNT = 430, 431, 432  # the same on x86_64 and asm-generic (aarch64)
_FSOPEN_CLOEXEC = _FSMOUNT_CLOEXEC = 0x1
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC, _AT_EMPTY_PATH = 0x1, 0o2000000, 0x1000
_FSCONFIG_SET_STRING, _FSCONFIG_CMD_CREATE = 1, 6
_MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 0x2, 0x4
_MS_NOSUID, _MS_NODEV = 0x2, 0x4
_TMPFS_MAGIC = 0x01021994


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        said = host_error(f"cannot {what}", err)
        if err in (errno.EPERM, errno.ENOSYS):  # not root, or a kernel without the new mount API
            said += " (rollbox needs root and Linux >= 5.12)"
        raise SandboxError(said)
    return result


def detached_tmpfs(*, size_bytes: int, inodes: int) -> int:
    """A new size-limited tmpfs, mounted nowhere: the fd of its detached mount (close it to free the tmpfs)."""
    fs = _check(_libc.syscall(_SYS_FSOPEN, b"tmpfs", _FSOPEN_CLOEXEC), "create a tmpfs (fsopen)")
    try:
        for key, value in (("size", str(size_bytes)), ("nr_inodes", str(inodes)), ("mode", "0711")):
            _check(
                _libc.syscall(_SYS_FSCONFIG, fs, _FSCONFIG_SET_STRING, key.encode(), value.encode(), 0),
                f"configure a tmpfs ({key}={value})",
            )
        _check(_libc.syscall(_SYS_FSCONFIG, fs, _FSCONFIG_CMD_CREATE, None, None, 0), "create a tmpfs")
        attributes = _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV
        return _check(_libc.syscall(_SYS_FSMOUNT, fs, _FSMOUNT_CLOEXEC, attributes), "mount a tmpfs (fsmount)")
    finally:
        os.close(fs)


@functools.cache
def trees_held() -> bool:
    """Whether sandboxes' writable trees are held mounted in the spawner's own mount namespace (see
    :meth:`Spawner.hold`) instead of kept detached: on kernels that cannot clone a detached mount
    (``open_tree(OPEN_TREE_CLONE)`` says EINVAL on Linux 6.1 and 6.12), the spawner clones the held tree for each
    launcher. ``ROLLBOX_HELD_TREES=1`` asks for it anywhere."""
    if os.environ.get("ROLLBOX_HELD_TREES") == "1":
        return True
    fs = detached_tmpfs(size_bytes=1 << 16, inodes=16)
    try:
        clone = _libc.syscall(_SYS_OPEN_TREE, fs, b"", _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_EMPTY_PATH)
        if clone >= 0:
            os.close(clone)
            return False
        return True
    finally:
        os.close(fs)


class StateDir:
    """The state directory of this host."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or Path(os.environ.get("ROLLBOX_STATE_DIR", "/run/rollbox"))
        self.stage = self.root / "stage"
        self.etc = self.root / "etc"  # replaced by ensure() with the current etc-<hash> directory
        self.sandboxes = self.root / "sandboxes"
        #: The sandbox uids this process holds (see ``_uids``).
        self.uids = UidLocks(self.root / "uids.lock")
        #: The host-side pieces of sandboxes' runtimes (see ``runtime._mounts``).
        self.runtime = self.root / "runtime"

    def ensure(self) -> None:
        """Create the layout (idempotent, safe to race with other processes).

        Raises:
            SandboxError: the directory cannot be created (not root, read-only /run, ...).
        """
        try:
            self._hold_in_memory()
            for d in (self.root, self.stage, self.sandboxes):
                d.mkdir(mode=0o711, parents=True, exist_ok=True)
                os.chmod(d, 0o755 if d == self.stage else 0o711)
            self.etc = self._make_etc()
        except OSError as exc:
            said = host_error(f"cannot prepare rollbox's state directory {self.root}", exc, "state")
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                said += ". Run as root, or set ROLLBOX_STATE_DIR to a directory root can write."
            raise SandboxError(said) from exc

    def _hold_in_memory(self) -> None:
        """Mount a tmpfs on the state directory when it is new (absent or empty) and not on a tmpfs already.

        Each sandbox makes and removes a directory and files here. On a disk filesystem, ext4's search for a free
        inode past recently deleted ones cost about a fifth of a sandbox's start with a thousand open. A directory
        already in use is left as it is: mounting over it would hide what a reaper has to find there.
        """
        self.root.parent.mkdir(parents=True, exist_ok=True)
        parent = os.open(self.root.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(parent, fcntl.LOCK_EX)  # two rollbox processes starting at once: one mount
            self.root.mkdir(mode=0o711, exist_ok=True)
            if _on_tmpfs(self.root) or any(self.root.iterdir()):
                return
            flags = _MS_NOSUID | _MS_NODEV
            _check(_libc.mount(b"rollbox-state", bytes(self.root), b"tmpfs", flags, b"mode=0711"), "mount a tmpfs")
        finally:
            os.close(parent)

    def _make_etc(self) -> Path:
        """The sandbox /etc for the host as it is now, made atomically under a name that hashes its content."""
        sources = [Path("/etc", name) for name in _HOST_ETC if Path("/etc", name).exists()]
        digest = hashlib.sha256(repr(sorted(_ETC.items())).encode())
        for source in sources:
            for path in [source, *(sorted(source.iterdir()) if source.is_dir() else [])]:
                st = path.lstat()
                digest.update(f"{path}:{st.st_mtime_ns}:{st.st_size}".encode())
        target = self.root / f"etc-{digest.hexdigest()[:16]}"
        if target.exists():
            return target
        staging = Path(tempfile.mkdtemp(prefix=".etc-", dir=self.root))
        for name, text in _ETC.items():
            (staging / name).write_text(text)
        for source in sources:
            if source.is_dir():
                shutil.copytree(source, staging / source.name, symlinks=True)
            else:
                shutil.copy2(source, staging / source.name)
        for path in [staging, *staging.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o755 if path.is_dir() else 0o644)
        try:
            staging.rename(target)
        except OSError:  # another process made it first
            shutil.rmtree(staging)
        return target

    def reap(self, tree: CgroupTree | None) -> list[str]:
        """Remove what sandboxes whose owner died left behind. Returns the ids reaped."""
        reaped: list[str] = []
        with contextlib.suppress(FileNotFoundError):
            for entry in self.sandboxes.iterdir():
                if entry.name.startswith("."):
                    # A sandbox directory being made (see SandboxDir.create); one left by a crash is old.
                    with contextlib.suppress(OSError):
                        if time.time() - entry.stat().st_mtime > _ABANDONED_S:
                            shutil.rmtree(entry)
                    continue
                with self._owner_gone(entry) as gone:
                    if gone:
                        with contextlib.suppress(OSError, SandboxError):
                            SandboxDir(entry, tree).destroy()
                            reaped.append(entry.name)
        return reaped

    @contextlib.contextmanager
    def _owner_gone(self, entry: Path) -> Iterator[bool]:
        """Whether the process that made the sandbox directory ``entry`` died, keeping its uid meanwhile. A directory
        an older rollbox made says so with a lock file of its own instead."""
        try:
            uid = int((entry / "uid").read_text())
        except (OSError, ValueError):
            try:
                lock = _try_lock(entry / "lock", create=False)
            except OSError:
                lock = None  # being destroyed right now
            try:
                yield lock is not None
            finally:
                if lock is not None:
                    os.close(lock)
            return
        with self.uids.abandoned(uid) as abandoned:
            yield abandoned


class SandboxDir:
    """One sandbox's host-side directory, which records its uid (whose lock says its owner lives), and its writable
    tmpfs."""

    def __init__(self, path: Path, tree: CgroupTree | None) -> None:
        self.path = path
        self._tree = tree
        #: The detached tmpfs's mount fd, while the sandbox has one.
        self.fs_fd: int | None = None
        self._held = False

    @property
    def fs(self) -> Path:
        """The writable tree, reached through the mount fd (it is mounted nowhere on the host)."""
        assert self.fs_fd is not None
        return Path(f"/proc/self/fd/{self.fs_fd}")

    @classmethod
    def create(cls, state: StateDir, sandbox_id: str, tree: CgroupTree | None, *, uid: int) -> SandboxDir:
        """Make the directory with its uid, which the caller holds, already recorded: it appears under its name only
        then, so a reaper in another process never takes a directory being made for a dead one."""
        path = state.sandboxes / sandbox_id
        making = state.sandboxes / f".{sandbox_id}"
        try:
            making.mkdir(mode=0o711)
        except OSError as exc:
            raise SandboxError(host_error(f"cannot create {path}", exc, "state")) from exc
        try:
            (making / "uid").write_text(str(uid))
            making.rename(path)
        except OSError as exc:
            # Removed by name, which takes no descriptor: the failure may be the host running out of them.
            with contextlib.suppress(OSError):
                (making / "uid").unlink(missing_ok=True)
                making.rmdir()
            raise SandboxError(host_error(f"cannot create {path}", exc, "state")) from exc
        return cls(path, tree)

    def record_cgroup(self, cgroup: Cgroup) -> None:
        """Remember where the sandbox's cgroup is, so that a reaper in another process can find it."""
        (self.path / "cgroup").write_text(json.dumps({"version": cgroup.version, "paths": cgroup.paths}))

    @property
    def held_as(self) -> str | None:
        """The name the spawner holds the writable tree under (see :func:`trees_held`), or None."""
        return self.path.name if self._held else None

    def make_writable_tree(self, *, size_bytes: int, uid: int, gid: int, overlay: bool = False) -> None:
        """Make the size-limited tmpfs with workspace/, tmp/ and shm/ owned by the sandbox uid; with ``overlay``,
        also .work/ (root's, 0700), the work directory of an overlay whose upper directory is workspace/.

        Raises:
            SandboxError: the tmpfs could not be made, or (where trees are held) the spawner could not hold it.
        """
        self.fs_fd = detached_tmpfs(size_bytes=size_bytes, inodes=max(1024, size_bytes // 4096))
        if trees_held():
            Spawner.get().hold(self.fs_fd, self.path.name)
            self._held = True
        for name in ("workspace", "tmp", "shm"):
            d = self.fs / name
            d.mkdir(mode=0o755)
            os.chown(d, uid, gid)
        if overlay:
            (self.fs / ".work").mkdir(mode=0o700)

    def empty_writable_tree(self, *, uid: int, gid: int, keep_workspace: bool = False) -> None:
        """Empty workspace/ (unless ``keep_workspace``: an overlay's upper directory, never changed while it is
        mounted), tmp/ and shm/ in place, and give them back to ``uid`` with mode 0755.

        Runs as root, so what the program made unreadable (mode 000) goes too; links are removed, never followed.
        Iterative, one open directory per level. It runs on the caller's thread (the event loop's, in a reset), so
        it stops past :data:`EMPTY_IN_PLACE_MAX` entries: a tree that large is cheaper to replace, and its
        teardown then happens in the kernel, when the sandbox's namespaces go.

        Raises:
            OSError: something could not be removed, or there was too much (the caller replaces the tree instead).
        """
        assert self.fs_fd is not None
        budget = EMPTY_IN_PLACE_MAX
        for name in ("tmp", "shm") if keep_workspace else ("workspace", "tmp", "shm"):
            directory = os.open(name, _DIRECTORY, dir_fd=self.fs_fd)  # by fd: no /proc path to resolve each time
            try:
                budget = _empty(directory, budget)
                # The directory itself outlives the wipe: its ACLs (a default ACL would shape every file the next
                # user makes) and other extended attributes (they count against the tmpfs), owner, mode and times.
                for attribute in os.listxattr(directory):
                    os.removexattr(directory, attribute)
                os.fchown(directory, uid, gid)
                os.fchmod(directory, 0o755)
                os.utime(directory, ns=(0, 0))
            finally:
                os.close(directory)

    def replace_writable_tree(self, *, size_bytes: int, uid: int, gid: int, overlay: bool = False) -> None:
        """Drop the writable tree (its tmpfs goes with the last reference) and make a new, empty one."""
        self._drop_writable_tree()
        self.make_writable_tree(size_bytes=size_bytes, uid=uid, gid=gid, overlay=overlay)

    def _drop_writable_tree(self) -> None:
        if self.fs_fd is not None:
            os.close(self.fs_fd)
            self.fs_fd = None
        if self._held:
            self._held = False
            # A spawner that ended took the tree with it; a new one never held it.
            if (spawner := Spawner.running()) is not None:
                with contextlib.suppress(SandboxError):
                    spawner.release(self.path.name)

    def destroy(self) -> None:
        """Kill and remove the cgroup, free the tmpfs, remove the directory (the caller then frees the uid)."""
        record = self.path / "cgroup"
        if record.exists() and self._tree is not None:
            data = json.loads(record.read_text())
            Cgroup(data["version"], self._tree.mounts, data["paths"]).remove()
        self._drop_writable_tree()
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(self.path)
