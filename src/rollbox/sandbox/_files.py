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
import stat
import struct

from ._errors import TreeTooLarge

__all__ = ["copy_out_beneath", "read_beneath", "resolve_sandbox_path", "symlink_beneath", "write_beneath"]

_SYS_OPENAT2 = 437  # the same number on x86_64 and on the asm-generic architectures (aarch64)
_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_libc = ctypes.CDLL(None, use_errno=True)

#: Writable places in a sandbox and the name of their directory in the sandbox's host-side tree.
WRITABLE_ROOTS = {"/workspace": "workspace", "/tmp": "tmp"}


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
        message = "is or passes through a symbolic link" if err == errno.ELOOP else os.strerror(err)
        raise OSError(err, message, path)
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
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if max_bytes is not None and len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"{relative} holds more than {max_bytes} bytes")
    return data


def copy_out_beneath(root: str, relative: str, dest: str, *, max_bytes: int | None, max_files: int | None) -> int:
    """Copy the directory ``relative`` under ``root`` (``""``: root itself) to the host directory ``dest``.

    Files keep their executable bit, links are copied as links (never followed), other special files are
    skipped. Every directory is opened again from ``root`` beneath it without following links (the program may
    swap a directory for a link meanwhile); files are read through that fd with ``O_NOFOLLOW``. Bytes are
    counted as read, not as ``st_size`` says (a file may grow while it is copied). Returns the entry count.

    Raises:
        TreeTooLarge: more than ``max_files`` entries or ``max_bytes`` bytes (what is copied so far stays).
    """
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
                target = os.path.join(dest, directory)
                os.makedirs(target, exist_ok=True)
                for name in sorted(os.listdir(dirfd)):
                    info = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                    if not (stat.S_ISDIR(info.st_mode) or stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
                        continue
                    count += 1
                    if max_files is not None and count > max_files:
                        raise TreeTooLarge(f"the tree {relative or '.'!r} holds more than {max_files} entries")
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(f"{directory}/{name}" if directory else name)
                    elif stat.S_ISLNK(info.st_mode):
                        os.symlink(os.readlink(name, dir_fd=dirfd), os.path.join(target, name))
                    else:
                        budget = None if max_bytes is None else max_bytes - total
                        total += _copy_file(dirfd, name, os.path.join(target, name), info.st_mode, budget)
                        if max_bytes is not None and total > max_bytes:
                            raise TreeTooLarge(f"the tree {relative or '.'!r} holds more than {max_bytes} bytes")
            finally:
                os.close(dirfd)
    finally:
        os.close(rootfd)
    return count


def _copy_file(dirfd: int, name: str, dest: str, mode: int, budget: int | None) -> int:
    """Copy one regular file, reading at most ``budget + 1`` bytes; the bytes read."""
    # O_NONBLOCK: a FIFO swapped in meanwhile must not hang the host.
    fd = _regular(os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirfd), name)
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


def write_beneath(root: str, relative: str, data: bytes, *, uid: int, gid: int, mode: int = 0o644) -> None:
    """Write ``data`` to ``relative`` under ``root``, making parent directories, owned by ``uid``/``gid``."""
    dirfd = _open_parent(root, relative, uid=uid, gid=gid)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
        fd = _regular(_openat2(dirfd, relative.rsplit("/", 1)[-1], flags, mode), relative)
        os.ftruncate(fd, 0)
    finally:
        os.close(dirfd)
    with os.fdopen(fd, "wb") as f:
        os.fchown(f.fileno(), uid, gid)
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
