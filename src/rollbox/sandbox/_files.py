"""Host-side file access to a sandbox's writable tree that never follows a link the sandbox made.

The program inside can plant symlinks anywhere it can write (``/workspace/x -> /etc/shadow``). Every path the
host opens there is resolved with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``, so a link fails the call
instead of leading the host, which runs as root, somewhere else.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
import stat
import struct

from ._errors import TreeTooLarge

__all__ = [
    "OverlayNotPlain",
    "copy_out_beneath",
    "copy_upper_out",
    "read_beneath",
    "remove_beneath",
    "resolve_sandbox_path",
    "symlink_beneath",
    "write_beneath",
]

_SYS_OPENAT2 = 437  # the same number on x86_64 and on the asm-generic architectures (aarch64)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_libc = ctypes.CDLL(None, use_errno=True)

#: Writable places in a sandbox and the name of their directory in the sandbox's host-side tree.
WRITABLE_ROOTS = {"/workspace": "workspace", "/tmp": "tmp"}
#: The deepest and the longest path a tree copied out may hold: the host names every copy by its path (PATH_MAX is
#: 4,096 bytes) and its tools walk trees by recursion, so a program that made a deeper one made a tree too large.
MAX_DEPTH = 256
MAX_PATH_BYTES = 2048


def resolve_sandbox_path(path: str | os.PathLike[str], *, directory: bool = False) -> tuple[str, str]:
    """Split a sandbox path into (writable root name, path relative to it, normalized: ``a/b``).

    A relative path is relative to /workspace; an absolute one must lie in /workspace or /tmp. With
    ``directory``, the root itself is allowed (relative part ``""``). Plain string work (every file the host
    writes into a sandbox passes here; ``pathlib`` took half of writing a small one).

    Raises:
        ValueError: the path is outside the writable roots, climbs out with ``..`` or holds a NUL.
    """
    text = os.fspath(path)
    if "\0" in text:
        raise ValueError(f"sandbox path {text!r} holds a NUL byte")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"sandbox path {text!r} must not contain '..'")
    if not text.startswith("/"):
        parts.insert(0, "workspace")
    name = WRITABLE_ROOTS.get("/" + parts[0]) if parts else None
    if name is None:
        raise ValueError(f"sandbox path {text!r} is outside the writable directories ({', '.join(WRITABLE_ROOTS)})")
    if len(parts) == 1 and not directory:
        raise ValueError(f"sandbox path {text!r} is a directory, not a file")
    return name, "/".join(parts[1:])


def _openat2(dirfd: int, path: str, flags: int, mode: int = 0) -> int:
    how = struct.pack(
        "QQQ", flags | os.O_CLOEXEC, mode, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
    )
    buf = ctypes.create_string_buffer(how)
    fd = _libc.syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), buf, len(how))
    if fd < 0:
        err = ctypes.get_errno()
        if err == errno.ELOOP:
            raise OSError(err, "is or passes through a symbolic link", path)
        raise OSError(err, os.strerror(err), path)  # as the OS would: callers put it into words
    return int(fd)


def _regular(fd: int, path: str) -> int:
    """``fd`` if it is a regular file (then in blocking mode); otherwise close it and raise."""
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", path)
    os.set_blocking(fd, True)
    return fd


def read_beneath(root: str, relative: str, max_bytes: int | None = None) -> bytes:
    """Read the file ``relative`` under the directory ``root`` without following any link, and no more than
    ``max_bytes`` of it (OSError EFBIG when it holds more)."""
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        # O_NONBLOCK: opening a FIFO the sandbox planted must not hang the host.
        fd = _regular(_openat2(dirfd, relative, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK), relative)
    finally:
        os.close(dirfd)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        # A file already too large is not read at all; one that grows meanwhile stops at the bound.
        data = f.read() if max_bytes is None else f.read(max_bytes + 1) if size <= max_bytes else b""
    if max_bytes is not None and max(size, len(data)) > max_bytes:
        raise OSError(errno.EFBIG, f"{relative} holds more than {max_bytes} bytes")
    return data


def copy_out_beneath(root: str, relative: str, dest: str, *, max_bytes: int | None, max_files: int | None) -> int:
    """Copy the directory ``relative`` under ``root`` (``""``: root itself) to the host directory ``dest``.

    Files keep their executable bit, links are copied as links (never followed), other special files are
    skipped. Every directory is opened again from ``root`` beneath it without following links (the program may
    swap a directory for a link meanwhile); files are read through that fd with ``O_NOFOLLOW``. Bytes are
    counted as read, not as ``st_size`` says (a file may grow while it is copied). Returns the entry count.

    Raises:
        TreeTooLarge: more than ``max_files`` entries or ``max_bytes`` bytes, or a path deeper than
            :data:`MAX_DEPTH` directories or longer than :data:`MAX_PATH_BYTES` (what is copied so far stays).
    """
    return _copy_out(root, relative, dest, max_bytes=max_bytes, max_files=max_files, removed=None)


class OverlayNotPlain(Exception):
    """An overlay's upper directory uses what :func:`copy_upper_out` cannot read as changes (a renamed directory's
    redirect, a file whose data stays below): the merged view must be read instead."""


def copy_upper_out(upper: str, dest: str, *, max_bytes: int | None, max_files: int | None) -> tuple[int, list[str]]:
    """Copy an overlay's upper directory ``upper`` (what was written over the lower one) to ``dest`` as
    :func:`copy_out_beneath` does, and say what it removed of the lower one: (entries copied, removed paths).

    A whiteout (a character device 0/0) is a removed path, never copied; an opaque directory (``trusted.overlay.
    opaque``: made where a directory was removed) is a removed path and copied too, as what replaced it. Both count
    as entries. Only the ``trusted.`` attributes count: the overlay is mounted by root without ``userxattr``, and
    overlayfs refuses to let the program set those, so the reading is the overlay's own.

    Raises:
        TreeTooLarge: as :func:`copy_out_beneath`.
        OverlayNotPlain: the upper directory holds a redirect or a metacopy (``redirect_dir`` or ``metacopy``
            on); ``dest`` then holds part of it.
    """
    removed: list[str] = []
    count = _copy_out(upper, "", dest, max_bytes=max_bytes, max_files=max_files, removed=removed)
    return count, sorted(removed)


_OVERLAY = "trusted.overlay."


def _overlay_marks(fd: int, path: str) -> set[str]:
    """The overlay's own attributes on ``fd`` (without the prefix); raises OverlayNotPlain on one it cannot read."""
    marks = {a.removeprefix(_OVERLAY) for a in os.listxattr(fd) if a.startswith(_OVERLAY)}
    if marks & {"redirect", "metacopy"}:
        raise OverlayNotPlain(f"{path or '.'!r} carries the overlay's {sorted(marks & {'redirect', 'metacopy'})}")
    if "opaque" in marks and os.getxattr(fd, _OVERLAY + "opaque") != b"y":
        marks.discard("opaque")
    return marks


def _copy_out(
    root: str, relative: str, dest: str, *, max_bytes: int | None, max_files: int | None, removed: list[str] | None
) -> int:
    """:func:`copy_out_beneath`; with ``removed``, ``root`` is an overlay's upper directory (see
    :func:`copy_upper_out`) and its removals are appended there."""
    count, total = 0, 0
    stack = [""]  # directories below ``relative``; not recursion: a tree can be thousands of levels deep
    rootfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        while stack:
            directory = stack.pop()
            dirfd = _openat2(
                rootfd, "/".join(p for p in (relative, directory) if p) or ".", os.O_RDONLY | os.O_DIRECTORY
            )
            try:
                if removed is not None and "opaque" in _overlay_marks(dirfd, directory) and directory:
                    removed.append(directory)
                target = os.path.join(dest, directory)
                os.makedirs(target, exist_ok=True)
                for name in sorted(os.listdir(dirfd)):
                    info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                    whiteout = removed is not None and stat.S_ISCHR(info.st_mode) and info.st_rdev == 0
                    if not (
                        whiteout
                        or stat.S_ISDIR(info.st_mode)
                        or stat.S_ISREG(info.st_mode)
                        or stat.S_ISLNK(info.st_mode)
                    ):
                        continue
                    count += 1
                    if max_files is not None and count > max_files:
                        raise TreeTooLarge(f"the tree {relative or '.'!r} holds more than {max_files} entries")
                    child = f"{directory}/{name}" if directory else name
                    if child.count("/") >= MAX_DEPTH or len(os.fsencode(child)) > MAX_PATH_BYTES:
                        raise TreeTooLarge(
                            f"the tree {relative or '.'!r} holds a path deeper than {MAX_DEPTH} directories or longer "
                            f"than {MAX_PATH_BYTES} bytes: {child[:80]!r}..."
                        )
                    if whiteout:
                        assert removed is not None
                        removed.append(child)
                    elif stat.S_ISDIR(info.st_mode):
                        stack.append(child)
                    elif stat.S_ISLNK(info.st_mode):
                        os.symlink(os.readlink(name, dir_fd=dirfd), os.path.join(target, name))
                    else:
                        budget = None if max_bytes is None else max_bytes - total
                        marks = removed is not None
                        total += _copy_file(dirfd, name, os.path.join(target, name), info.st_mode, budget, upper=marks)
                        if max_bytes is not None and total > max_bytes:
                            raise TreeTooLarge(f"the tree {relative or '.'!r} holds more than {max_bytes} bytes")
            finally:
                os.close(dirfd)
    finally:
        os.close(rootfd)
    return count


def _copy_file(dirfd: int, name: str, dest: str, mode: int, budget: int | None, *, upper: bool = False) -> int:
    """Copy one regular file, reading at most ``budget + 1`` bytes; the bytes read. With ``upper``, the file is
    in an overlay's upper directory, and must hold its data (no metacopy)."""
    # O_NONBLOCK: a FIFO swapped in meanwhile must not hang the host.
    fd = _regular(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd), name)
    if upper:
        try:
            _overlay_marks(fd, name)
        except BaseException:
            os.close(fd)
            raise
    copied = 0
    with os.fdopen(fd, "rb") as source, open(dest, "wb") as out:
        while budget is None or copied <= budget:
            chunk = source.read(1 << 20 if budget is None else min(1 << 20, budget + 1 - copied))
            if not chunk:
                break
            out.write(chunk)
            copied += len(chunk)
    os.chmod(dest, 0o755 if mode & 0o111 else 0o644)
    return copied


def _open_parent(root: str, relative: str, *, uid: int, gid: int) -> int:
    """An fd of the directory that holds ``relative`` under ``root``, making missing directories on the way."""
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in relative.split("/")[:-1]:
            try:
                os.mkdir(part, 0o755, dir_fd=dirfd)
                made = True
            except FileExistsError:
                made = False
            next_fd = _openat2(dirfd, part, os.O_PATH | os.O_DIRECTORY)
            os.close(dirfd)
            dirfd = next_fd
            if made:
                # Through the fd, never the name (the program may swap it for a link): exactly 0755, whatever a
                # umask or a default ACL made of it, and the sandbox's owner.
                os.chown(f"/proc/self/fd/{dirfd}", uid, gid)
                os.chmod(f"/proc/self/fd/{dirfd}", 0o755)
    except BaseException:
        os.close(dirfd)
        raise
    return dirfd


def write_beneath(root: str, relative: str, data: bytes, *, uid: int, gid: int, mode: int | None = 0o644) -> None:
    """Write ``data`` to ``relative`` under ``root``, making parent directories, owned by ``uid``/``gid``. With
    ``mode`` None, a file that exists keeps its mode (as a program's ``cat > FILE`` leaves it) and a new one is
    0644."""
    dirfd = _open_parent(root, relative, uid=uid, gid=gid)
    name = relative.rsplit("/", 1)[-1]
    flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = None
        if mode is None:
            with contextlib.suppress(FileNotFoundError):
                fd = _openat2(dirfd, name, flags)
        if fd is None:
            mode = 0o644 if mode is None else mode
            fd = _openat2(dirfd, name, flags | os.O_CREAT, mode)
        fd = _regular(fd, relative)
        os.ftruncate(fd, 0)
    finally:
        os.close(dirfd)
    with os.fdopen(fd, "wb") as f:
        os.fchown(f.fileno(), uid, gid)
        if mode is not None:
            os.fchmod(f.fileno(), mode)
        f.write(data)


def symlink_beneath(root: str, relative: str, target: str, *, uid: int, gid: int) -> None:
    """Make ``relative`` under ``root`` a symbolic link to ``target``, replacing a file or link already there.

    The target is not checked: a link only ever resolves inside the sandbox, and the host never follows one.
    """
    dirfd = _open_parent(root, relative, uid=uid, gid=gid)
    name = relative.rsplit("/", 1)[-1]
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dirfd)
        os.symlink(target, name, dir_fd=dirfd)
        os.chown(name, uid, gid, dir_fd=dirfd, follow_symlinks=False)
    finally:
        os.close(dirfd)


def remove_beneath(root: str, relative: str) -> None:
    """Remove ``relative`` under ``root``: a file, a link (never followed) or a whole directory.

    Raises:
        OSError: it is missing, or its path passes through a link.
    """
    *parents, name = relative.split("/")
    dirfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if parents:
            parent = _openat2(dirfd, "/".join(parents), os.O_RDONLY | os.O_DIRECTORY)
            os.close(dirfd)
            dirfd = parent
        try:
            os.unlink(name, dir_fd=dirfd)
        except IsADirectoryError:
            shutil.rmtree(name, dir_fd=dirfd)  # by descriptors all the way down: links are removed, never followed
    finally:
        os.close(dirfd)
