"""Unpacking one layer's blob into a directory of the store, safely, verifying its digests as it is read.

The blob is read once: its bytes are hashed (the manifest's digest), decompressed (gzip, zstd, or none; found by
its first bytes), hashed again (the configuration's ``diff_id``) and unpacked as a tar stream. The directory is a
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
  /dev is rollbox's own; images made by debootstrap carry its nodes there);
- remove what is not below it: a whiteout of no entry (``.wh.``, ``.wh..``, ``.wh...``) is refused.

Every file is readable and every directory searchable by the sandbox's uid where its owner could read or search
it: an image's users are all the sandbox's one uid, and an image's bytes are no secret from what runs on it.
Whiteouts (``.wh.NAME``, ``.wh..wh..opq``) are kept as empty files; composing a root applies them (``_compose``).
"""

from __future__ import annotations

import hashlib
import os
import queue
import shutil
import stat
import tarfile
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, Protocol, TypeVar

from ._compose import whited_out
from ._errors import ImageError

__all__ = ["Unpacked", "readable", "unpack_layer"]

_CHUNK = 1 << 20
T = TypeVar("T")
_WHITEOUT = ".wh."


def readable(mode: int) -> int:
    """``mode``'s permission bits without set-ID and sticky bits, with the owner's read and search/execute bits given
    to group and others too."""
    mode &= 0o777
    return mode | ((mode & 0o500) >> 3) | ((mode & 0o500) >> 6)


#: The first bytes of each compression a layer may have (found by them, not by the media type, which is often
#: wrong), and the name an error gives it.
_COMPRESSED = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...

    @property
    def unused_data(self) -> bytes: ...

    def decompress(self, data: bytes) -> bytes: ...


def _decompressor(kind: str) -> tuple[_Decompressor, type[Exception]]:
    """A decompressor of one gzip member or one zstd frame, and the error it raises on a corrupt stream.
    (zstandard's C decompressor, as zlib's, releases the interpreter's lock while it works.)"""
    if kind == "gzip":
        return zlib.decompressobj(wbits=31), zlib.error
    import zstandard  # only where a layer is zstd: no cost to every import of the sandbox

    return zstandard.ZstdDecompressor().decompressobj(), zstandard.ZstdError


class _Verified:
    """A blob read as its uncompressed tar stream, hashing both the blob and the stream.

    Reading, hashing and decompressing run in a thread of their own, ahead of the tar's reader (zlib and hashlib
    release the interpreter's lock): unpacking a layer then costs little more than writing its files.
    """

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self.blob = hashlib.sha256()
        self.diff = hashlib.sha256()
        self._buffer = bytearray()
        self._at = 0
        self._eof = False
        self._chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=8)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="rollbox-layer-reader", daemon=True)
        self._thread.start()

    def _put(self, item: bytes | BaseException | None) -> bool:
        while not self._stop.is_set():
            try:
                self._chunks.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            for out in self._inflated():
                self.diff.update(out)
                if not self._put(out):
                    return
            self._put(None)
        except BaseException as exc:  # handed to the reader, who raises it
            self._put(exc)

    def _inflated(self) -> Iterator[bytes]:
        data = self._f.read(_CHUNK)
        self.blob.update(data)
        kind = next((name for magic, name in _COMPRESSED.items() if data.startswith(magic)), None)
        if kind is None:
            while data:
                yield data
                data = self._f.read(_CHUNK)
                self.blob.update(data)
            return
        inflate, failure = _decompressor(kind)
        while data:
            while data:
                if inflate.eof:  # a gzip or zstd stream may hold several members (frames), one after another
                    if not data.strip(b"\0"):
                        break  # zeros after the last member: padding
                    inflate, failure = _decompressor(kind)
                try:
                    yield inflate.decompress(data)
                except failure as exc:
                    raise ImageError(f"the layer's {kind} stream is corrupt ({exc})") from None
                data = inflate.unused_data if inflate.eof else b""
            data = self._f.read(_CHUNK)
            self.blob.update(data)
        if not inflate.eof:
            raise ImageError(f"the layer's {kind} stream is truncated (an incomplete download: fetch it again)")

    def _refill(self) -> None:
        item = self._chunks.get()
        if isinstance(item, BaseException):
            self._eof = True
            raise item
        if item is None:
            self._eof = True
        else:
            self._buffer += item

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
        self._thread.join()

    def close(self) -> None:
        """Stop the reading thread (when the tar's reader gave up early) and wait for it."""
        self._stop.set()
        self._thread.join()


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
        self.root = str(root)
        self._dirs: set[str] = {""}

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}"

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
            path = self.path(walked)
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

    def make(self, rel: str, create: Callable[[str], T]) -> T:
        """``create(path)`` for ``rel``; where an earlier entry of the same name stands, it is removed first (an
        entry is made new, never written through what stood there)."""
        path = self.path(rel)
        try:
            return create(path)
        except FileExistsError:
            pass
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
            self._dirs = {d for d in self._dirs if d != rel and not d.startswith(f"{rel}/")}
        else:
            os.unlink(path)
        return create(path)

    def directory(self, rel: str, mode: int) -> None:
        """A directory at ``rel`` (kept, with its contents, where one stands already), with ``mode``."""
        path = self.path(rel)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(path)
                os.mkdir(path, 0o755)
        os.chmod(path, mode)
        self._dirs.add(rel)


def _create_file(flags: int) -> Callable[[str], int]:
    return lambda path: os.open(path, flags, 0o600)


_NEW_FILE = _create_file(os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC)


def _write_all(fd: int, source: IO[bytes], size: int) -> None:
    while size > 0:
        chunk = source.read(min(size, _CHUNK))
        if not chunk:
            raise ImageError("the layer's tar stream ends inside a file (a truncated layer)")
        size -= len(chunk)
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd, view) :]


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, layer: _Layer) -> int:
    """Write one member into the layer; returns the bytes of a regular file written."""
    rel = _relative(member.name, "entry")
    if not rel:
        return 0  # the layer's root itself ("./"): its attributes are the store's
    parent, _, name = rel.rpartition("/")
    if name.startswith(_WHITEOUT):
        whited_out(name, f"the layer's whiteout in /{parent}")
    layer.parent(rel)
    if member.isdir():
        layer.directory(rel, readable(member.mode) | 0o200)
        return 0
    if member.isreg():
        if name.startswith(_WHITEOUT):
            os.close(layer.make(rel, _NEW_FILE))
            return 0
        fd = layer.make(rel, _NEW_FILE)
        try:
            source = tar.extractfile(member)
            assert source is not None
            _write_all(fd, source, member.size)
            os.fchmod(fd, readable(member.mode))
            try:
                mtime_ns = int(member.mtime * 1_000_000_000)
                os.utime(fd, ns=(mtime_ns, mtime_ns))
            except (OverflowError, ValueError):  # a pax header's mtime of inf, nan or 1e30: digest-valid, no time
                raise ImageError(
                    f"the layer's entry {rel!r} has the modification time {member.mtime!r}, which no file can have "
                    "(a malformed layer): refused; build the image again"
                ) from None
        finally:
            os.close(fd)
        return member.size
    if member.ischr() or member.isblk():
        if rel == "dev" or rel.startswith("dev/"):
            return 0
        raise ImageError(f"the layer holds a device node {rel!r}: refused (an image cannot bring devices)")
    if member.issym():
        layer.make(rel, lambda path: os.symlink(member.linkname, path))
        return 0
    if member.islnk():
        target = _relative(member.linkname, "hard link target")
        source_path = layer.path(target)
        try:
            st = os.lstat(source_path)
        except FileNotFoundError:
            st = None
        if not target or st is None or stat.S_ISDIR(st.st_mode):
            raise ImageError(
                f"the layer's hard link {rel!r} points to {member.linkname!r}, which is not a file of the layer "
                "(a hard link out of the tree): refused"
            )
        layer.parent(target)  # its parents must be real directories too: no link is followed to reach it
        layer.make(rel, lambda path: os.link(source_path, path, follow_symlinks=False))
        return 0
    if member.isfifo():
        layer.make(rel, lambda path: os.mkfifo(path, readable(member.mode)))
        return 0
    raise ImageError(f"the layer's entry {rel!r} is of a kind rollbox does not unpack (tar type {member.type!r})")


def unpack_layer(blob: Path, into: Path) -> Unpacked:
    """Unpack the layer blob at ``blob`` into the empty directory ``into``, computing its digests on the way.

    The caller compares them with the manifest's and the configuration's, and drops ``into`` when they differ.

    Raises:
        ImageError: the blob is not a tar (or gzip or zstd of one), is corrupt, or holds an entry refused above.
    """
    size = 0
    layer = _Layer(into)
    with blob.open("rb") as f:
        stream = _Verified(f)
        try:
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    size += _extract(tar, member, layer)
            stream.drain()
        except tarfile.TarError as exc:
            raise ImageError(f"the layer blob {blob.name[:12]} is not a tar archive ({exc})") from None
        except OSError as exc:
            raise ImageError(f"cannot unpack the layer blob {blob.name[:12]}: {exc}") from None
        finally:
            stream.close()
    return Unpacked(
        digest="sha256:" + stream.blob.hexdigest(), diff_id="sha256:" + stream.diff.hexdigest(), size_bytes=size
    )
