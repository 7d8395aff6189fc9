"""Unpacking one layer's blob into a directory of the store, safely, verifying its digests as it is read.

The blob is read once: its bytes are hashed (the manifest's digest), decompressed (gzip, or none; found by its
first bytes), hashed again (the configuration's ``diff_id``) and unpacked as a tar stream. The directory is a
staging one that only rollbox writes; it becomes the layer only once both digests matched (see ``_store``).

What a hostile tar cannot do here:

- write outside the directory: a name with a ``..`` component is refused; a leading ``/`` is dropped (the name is
  taken relative to the layer, as GNU tar takes it); no parent of an entry may be a symbolic link (an entry below a
  link the same layer made is refused), so nothing is ever written through a link;
- link out of it: a hard link must name a file the layer holds already (``..`` refused as above); a symbolic link
  is written as it is, whatever its target: it is only ever followed inside a sandbox, whose root is the image;
- gain privileges: set-user-ID, set-group-ID and sticky bits are dropped, extended attributes (file capabilities
  among them) and owners are not kept (every file belongs to root, read-only to the sandbox's uid);
- make devices: a character or block device is refused, except under ``dev/`` where it is dropped (the sandbox's
  /dev is rollbox's own; images made by debootstrap carry its nodes there).

Every file is readable and every directory searchable by the sandbox's uid where its owner could read or search
it: an image's users are all the sandbox's one uid, and an image's bytes are no secret from what runs on it.
Whiteouts (``.wh.NAME``, ``.wh..wh..opq``) are kept as empty files; composing a root applies them (``_compose``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ._errors import ImageError

__all__ = ["Unpacked", "readable", "unpack_layer"]

_CHUNK = 1 << 20
_WHITEOUT = ".wh."


def readable(mode: int) -> int:
    """``mode``'s permission bits without set-ID and sticky bits, with the owner's read and search/execute bits given
    to group and others too."""
    mode &= 0o777
    return mode | ((mode & 0o500) >> 3) | ((mode & 0o500) >> 6)


class _Verified:
    """A blob read as its uncompressed tar stream, hashing both the blob and the stream."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.blob = hashlib.sha256()
        self.diff = hashlib.sha256()
        self._buffer = bytearray()
        self._at = 0
        self._inflate: zlib._Decompress | None = None
        self._started = False
        self._eof = False

    def _refill(self) -> None:
        data = self._f.read(_CHUNK)
        self.blob.update(data)
        if not self._started:
            self._started = True
            if data[:4] == b"\x28\xb5\x2f\xfd":
                raise ImageError("a zstd-compressed layer: rollbox reads gzip or plain tar layers; recompress it")
            if data[:2] == b"\x1f\x8b":
                self._inflate = zlib.decompressobj(wbits=31)
        if not data:
            self._eof = True
            if self._inflate is not None and not self._inflate.eof:
                raise ImageError("the layer's gzip stream is truncated (an incomplete download: fetch it again)")
            return
        if self._inflate is None:
            self._take(data)
            return
        while data:
            if self._inflate.eof:  # a gzip file may hold several members, one after another
                if not data.strip(b"\0"):
                    return  # zeros after the last member: padding
                self._inflate = zlib.decompressobj(wbits=31)
            try:
                self._take(self._inflate.decompress(data))
            except zlib.error as exc:
                raise ImageError(f"the layer's gzip stream is corrupt ({exc})") from None
            data = self._inflate.unused_data if self._inflate.eof else b""

    def _take(self, out: bytes) -> None:
        self.diff.update(out)
        self._buffer += out

    def read(self, size: int = -1) -> bytes:
        while not self._eof and (size < 0 or len(self._buffer) - self._at < size):
            self._refill()
        end = len(self._buffer) if size < 0 else self._at + size
        out = bytes(self._buffer[self._at : end])
        self._at += len(out)
        if self._at > _CHUNK:
            del self._buffer[: self._at]
            self._at = 0
        return out

    def drain(self) -> None:
        """Read what the tar stream left (its padding, trailing zeros), so that both digests cover it all."""
        while not self._eof:
            self._refill()
            del self._buffer[:]
            self._at = 0


@dataclass(frozen=True)
class Unpacked:
    """What unpacking a layer read: the blob's digest, the uncompressed stream's, and its files' total size."""

    digest: str
    diff_id: str
    size_bytes: int


def _relative(name: str, what: str) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ImageError(f"the layer's {what} {name!r} climbs out of the image with '..' (a hostile tar): refused")
    return "/".join(parts)


class _Layer:
    """The staging directory of one layer, with the directories known to be real ones (no link among them)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dirs: set[str] = {""}

    def parent(self, rel: str) -> None:
        """Make ``rel``'s parent directories where missing; refuse any that is not a real directory."""
        parent = rel.rpartition("/")[0]
        if parent in self._dirs:
            return
        walked = ""
        for part in parent.split("/"):
            walked = f"{walked}/{part}" if walked else part
            if walked in self._dirs:
                continue
            path = self.root / walked
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                os.mkdir(path, 0o755)
            else:
                if not stat.S_ISDIR(st.st_mode):
                    raise ImageError(
                        f"the layer's entry {rel!r} lies below {walked!r}, which is not a directory (a link, maybe): "
                        "refused, as nothing is written through a link"
                    )
            self._dirs.add(walked)

    def clear(self, rel: str, *, for_dir: bool) -> bool:
        """Remove what stands at ``rel`` (an earlier entry of the same name), unless it is a directory and a
        directory comes: True when a directory is left there."""
        path = self.root / rel
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            if for_dir:
                return True
            shutil.rmtree(path)
            self._dirs = {d for d in self._dirs if d != rel and not d.startswith(f"{rel}/")}
        else:
            os.unlink(path)
        return False

    def add_dir(self, rel: str) -> None:
        self._dirs.add(rel)


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, layer: _Layer) -> int:
    """Write one member into the layer; returns the bytes of a regular file written."""
    rel = _relative(member.name, "entry")
    if not rel:
        return 0  # the layer's root itself ("./"): its attributes are the store's
    layer.parent(rel)
    path = layer.root / rel
    name = rel.rpartition("/")[2]
    if member.isdir():
        if not layer.clear(rel, for_dir=True):
            os.mkdir(path, 0o755)
        os.chmod(path, readable(member.mode) | 0o200)
        layer.add_dir(rel)
        return 0
    if member.ischr() or member.isblk():
        if rel == "dev" or rel.startswith("dev/"):
            return 0
        raise ImageError(f"the layer holds a device node {rel!r}: refused (an image cannot bring devices)")
    layer.clear(rel, for_dir=False)
    if name.startswith(_WHITEOUT):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o000))
        return 0
    if member.issym():
        os.symlink(member.linkname, path)
        return 0
    if member.islnk():
        target = _relative(member.linkname, "hard link target")
        source = layer.root / target
        try:
            st = os.lstat(source)
        except FileNotFoundError:
            st = None
        if not target or st is None or stat.S_ISDIR(st.st_mode):
            raise ImageError(
                f"the layer's hard link {rel!r} points to {member.linkname!r}, which is not a file of the layer "
                "(a hard link out of the tree): refused"
            )
        layer.parent(target)  # its parents must be real directories too: no link is followed to reach it
        os.link(source, path, follow_symlinks=False)
        return 0
    if member.isfifo():
        os.mkfifo(path, readable(member.mode))
        return 0
    if not member.isreg():
        raise ImageError(f"the layer's entry {rel!r} is of a kind rollbox does not unpack (tar type {member.type!r})")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as out:
        source_f = tar.extractfile(member)
        assert source_f is not None
        shutil.copyfileobj(source_f, out, _CHUNK)
        os.fchmod(out.fileno(), readable(member.mode))
        mtime_ns = int(member.mtime * 1_000_000_000)
        os.utime(out.fileno(), ns=(mtime_ns, mtime_ns))
    return member.size


def unpack_layer(blob: Path, into: Path) -> Unpacked:
    """Unpack the layer blob at ``blob`` into the empty directory ``into``, computing its digests on the way.

    The caller compares them with the manifest's and the configuration's, and drops ``into`` when they differ.

    Raises:
        ImageError: the blob is not a tar (or gzip of one), is corrupt, or holds an entry refused above.
    """
    size = 0
    layer = _Layer(into)
    with blob.open("rb") as f:
        stream = _Verified(f)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    size += _extract(tar, member, layer)
        except tarfile.TarError as exc:
            raise ImageError(f"the layer blob {blob.name[:12]} is not a tar archive ({exc})") from None
        except OSError as exc:
            raise ImageError(f"cannot unpack the layer blob {blob.name[:12]}: {exc}") from None
        stream.drain()
    return Unpacked(
        digest="sha256:" + stream.blob.hexdigest(), diff_id="sha256:" + stream.diff.hexdigest(), size_bytes=size
    )
