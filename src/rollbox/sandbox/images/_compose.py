"""An image's root composed from its unpacked layers: a directory of hard links, made once per chain of layers.

The layers are laid over one another from the first: a directory merges with the one below, any other entry
replaces what was there, ``.wh.NAME`` removes NAME from below and ``.wh..wh..opq`` empties its directory of what
came from below (image-spec ``layer.md``); a whiteout that names no entry of its directory (``.wh.``, ``.wh..``,
``.wh...``) is refused, as removing "." or ".." would remove the directory itself or the one above. Regular files
are hard links to the layers' own (so a root costs directory entries, not bytes, and shares the page cache with every
other root made of the same layers); symbolic links are made again, never followed; directories are new. Nothing
here follows a link: every step is an ``lstat``, ``link``, ``symlink``, ``mkdir`` or ``unlink`` of a path whose
parents rollbox made.

Measured on the bench's 200 MiB image (``bench/bench_images.py``), composing costs a small fraction of unpacking,
and mounting one read-only directory keeps a sandbox's start as fast as on the host's /usr: an overlay of N layers
at each mount would make every lookup in the sandbox walk N directories.

Then rollbox's own files are laid over it, as new files (never written through a link into a layer):
``/etc/passwd`` and ``/etc/group`` with the sandbox's user (uid 1000, ``sandbox``) in place of any the image has
with that uid or name, ``/etc/hosts`` naming only the loopback, no ``/etc/resolv.conf`` (there is no network to
resolve on), and the mount points the sandbox's own mounts need below ``/opt/rollbox``.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from ._errors import ImageError

__all__ = ["SANDBOX_USER", "compose_root", "whited_out"]

_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"
#: The user every sandbox command runs as, whatever the image says.
SANDBOX_USER = ("sandbox", 1000)
_HOSTS = "127.0.0.1\tlocalhost rollbox\n::1\tlocalhost ip6-localhost ip6-loopback\n"
#: Mount points of the sandbox's own mounts inside /opt/rollbox (files, directories), see ``namespaces._backend``.
_MOUNT_FILES = ("opt/rollbox/agent", "opt/rollbox/zygote.py")
_MOUNT_DIRS = ("opt/rollbox/env", "opt/rollbox/python")


def whited_out(name: str, where: str) -> str:
    """The name the whiteout ``name`` (``.wh.NAME``; the opaque marker passes too) removes from its directory.

    Raises:
        ImageError: NAME is empty, ``.`` or ``..``: no entry of the directory (``where`` says whose whiteout).
    """
    removed = name[len(_WHITEOUT) :]
    if removed in ("", ".", ".."):
        raise ImageError(
            f"{where} {name!r} names no entry of its directory (it would remove the directory itself or the one "
            "above): a hostile layer, refused; rebuild the image without it"
        )
    return removed


def _remove(path: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)


def _empty(path: str) -> None:
    with os.scandir(path) as entries:
        for entry in entries:
            _remove(entry.path)


def _lay(layer: str, root: str) -> None:
    """Lay the unpacked layer ``layer`` over ``root``."""
    stack = [""]
    while stack:
        rel = stack.pop()
        source, target = os.path.join(layer, rel), os.path.join(root, rel)
        with os.scandir(source) as scanned:
            entries = sorted(scanned, key=lambda e: e.name)
        names = {e.name for e in entries}
        if _OPAQUE in names:
            _empty(target)
        for entry in entries:
            if entry.name.startswith(_WHITEOUT) and entry.name != _OPAQUE:
                removed = whited_out(entry.name, f"the layer {os.path.basename(layer)}'s whiteout in /{rel}")
                _remove(os.path.join(target, removed))
        for entry in entries:
            if entry.name.startswith(_WHITEOUT):
                continue
            dest = os.path.join(target, entry.name)
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                try:
                    existing = os.lstat(dest)
                except FileNotFoundError:
                    os.mkdir(dest)
                else:
                    if not stat.S_ISDIR(existing.st_mode):
                        os.unlink(dest)
                        os.mkdir(dest)
                os.chmod(dest, stat.S_IMODE(st.st_mode))
                stack.append(os.path.join(rel, entry.name))
                continue
            _remove(dest)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(entry.path), dest)
            elif stat.S_ISFIFO(st.st_mode):
                os.mkfifo(dest, stat.S_IMODE(st.st_mode))
            else:
                os.link(entry.path, dest, follow_symlinks=False)


def _real_dir(root: Path, rel: str) -> Path:
    """``root/rel`` as a real directory, whatever the image had there (a link is replaced, never followed)."""
    path = root
    for part in rel.split("/"):
        path = path / part
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            path.unlink()
        if not path.exists():
            path.mkdir(mode=0o755)
    return path


def _accounts(existing: Path, template: str, *, uid_field: int) -> str:
    """The image's passwd or group lines without the sandbox user's name or id, then the sandbox's ``template``."""
    name, uid = SANDBOX_USER
    kept = []
    if existing.is_file() and not existing.is_symlink():
        for line in existing.read_text(errors="replace").splitlines():
            fields = line.split(":")
            if len(fields) > uid_field and (fields[0] == name or fields[uid_field] == str(uid)):
                continue
            kept.append(line)
    if not any(line.startswith("root:") for line in kept):
        kept.insert(0, template.replace(name, "root").replace(str(uid), "0").replace("/workspace", "/root"))
    return "\n".join([*kept, template]) + "\n"


def _rewrite(path: Path, text: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()  # a hard link into a layer, or a link: replaced, never written through
    path.write_text(text)
    path.chmod(0o644)


def compose_root(layers: list[Path], into: Path) -> None:
    """Make ``into`` (a new, empty directory) the root of an image of ``layers`` (unpacked, first at the bottom),
    with rollbox's own files laid over it (see the module's docstring).

    Raises:
        ImageError: a layer holds a whiteout of no entry (see :func:`whited_out`).
        OSError: the store's filesystem failed (full, out of inodes).
    """
    into.chmod(0o755)
    for layer in layers:
        _lay(str(layer), str(into))
    etc = _real_dir(into, "etc")
    name, uid = SANDBOX_USER
    passwd = f"{name}:x:{uid}:{uid}:{name}:/workspace:/bin/sh"
    _rewrite(etc / "passwd", _accounts(etc / "passwd", passwd, uid_field=2))
    _rewrite(etc / "group", _accounts(etc / "group", f"{name}:x:{uid}:", uid_field=2))
    _rewrite(etc / "hosts", _HOSTS)
    if (etc / "resolv.conf").is_symlink() or (etc / "resolv.conf").exists():
        (etc / "resolv.conf").unlink()
    for rel in _MOUNT_DIRS:
        _real_dir(into, rel)
    for rel in _MOUNT_FILES:
        parent = _real_dir(into, rel.rpartition("/")[0])
        _rewrite(parent / rel.rpartition("/")[2], "")
