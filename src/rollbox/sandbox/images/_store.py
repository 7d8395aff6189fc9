"""The image store: images imported once, their layers unpacked once and shared, their roots composed once.

Layout (``$ROLLBOX_HOME/images``)::

    layers/<hex>/           an unpacked layer, named by its uncompressed digest (its diff_id): shared by every
                            image that has it; it appears under its name only once verified (a rename)
    roots/<root_id>/        an image's root, composed from its layers (see ``_compose``); images of the same
                            layers share it
    roots/<root_id>.lock    flock: shared while a sandbox runs on the root, exclusive while gc removes it
    manifests/<hex>.json    an image: its manifest's digest, root, layers, configuration, platform, references;
                            written whole or not at all (``write_durably``: a ``.<hex>.json.*.new`` file flushed
                            and renamed; one a crash left is never read, and gc removes it after an hour)
    .lock                   flock: exclusive while an import, a removal or a gc changes the store
    .tmp/                   imports under way (or left by one that died: gc empties it), and what gc is deleting
    downloads/              what pulls download, as layouts, before they import them (``gc`` removes those no
                            pull holds and none wrote to for an hour)

An import verifies every blob against its digest (the manifest and configuration before anything is unpacked, each
layer as it is unpacked: both its blob's digest and its diff_id) and publishes nothing of a layer or an image that
failed. A removal forgets an image; ``gc`` frees the roots and layers that no image names any more and no sandbox
holds.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rollbox.sandbox.runtime._store import (
    ABANDONED_S,
    advice,
    discard,
    publish,
    remove_partials,
    rollbox_home,
    unheld,
    write_durably,
)

from ._archive import extract_archive, layout_from_docker
from ._compose import compose_root
from ._errors import ImageError
from ._image import Image, ImageConfig
from ._layout import Manifest, blob_path, read_manifest
from ._unpack import unpack_layer

__all__ = ["ImageStore"]

_HEX = frozenset("0123456789abcdef")


def _root_id(diff_ids: list[str]) -> str:
    return hashlib.sha256("\n".join(diff_ids).encode()).hexdigest()


def _tree_bytes(path: Path) -> int:
    """What the directory ``path`` takes on disk (its blocks; hard links counted once)."""
    total, seen = 0, set()
    for base, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            st = os.lstat(os.path.join(base, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


class ImageStore:
    """The images of this machine, under ``home`` (default ``$ROLLBOX_HOME/images``).

    Args:
        home: Where the store lives.
    """

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(home) if home is not None else rollbox_home() / "images"
        self._layers = self.home / "layers"
        self._roots = self.home / "roots"
        self._manifests = self.home / "manifests"
        self._tmp = self.home / ".tmp"
        #: Where pulls keep the layouts they download (resumable), before :meth:`import_layout`; :meth:`gc`
        #: removes those left by interrupted pulls.
        self.downloads = self.home / "downloads"

    @contextlib.contextmanager
    def _locked(self, what: str) -> Iterator[None]:
        """The store's lock, held for the block; an OSError in it (the store's disk full, a file it cannot
        write) is an ImageError saying what failed, never the caller's (a grading's) own failure."""
        try:
            for directory in (self._layers, self._roots, self._manifests, self._tmp):
                directory.mkdir(mode=0o755, parents=True, exist_ok=True)
            fd = os.open(self.home / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise ImageError(
                f"cannot {what}: {exc.strerror or exc}{where}" + advice(exc, self.home, "rollbox images gc")
            ) from exc

    # Importing

    def import_layout(self, path: Path, *, ref: str | None = None) -> Image:
        """Import the image in the OCI image layout directory ``path`` (the one for this machine's platform, or
        the one named ``ref`` where it holds several), recording ``ref`` for it; without one, the name the layout
        gives it where that is a whole reference (``NAME:TAG``, as a docker-save archive's tags are).

        Raises:
            ImageError: not a layout, a blob missing or not matching its digest, a layer refused (see ``_unpack``).
        """
        path = Path(path)
        if not path.is_dir():
            raise ImageError(f"{path} is not a directory: give an OCI image layout directory")
        with self._locked(f"import {path}"):
            return self._import(path, read_manifest(path, ref), ref)

    def import_archive(self, path: Path, *, ref: str | None = None) -> Image:
        """Import the image in a ``docker save`` archive or an OCI archive (a tar of a layout) at ``path``.

        Raises:
            ImageError: not such an archive (or a hostile one), or as :meth:`import_layout`.
        """
        path = Path(path)
        if not path.is_file():
            raise ImageError(f"{path} is not a file: give a docker-save or OCI archive (.tar)")
        with self._locked(f"import {path}"):
            staging = Path(tempfile.mkdtemp(prefix="archive-", dir=self._tmp))
            try:
                extract_archive(path, staging)
                if not (staging / "index.json").is_file() and (staging / "manifest.json").is_file():
                    layout_from_docker(staging)
                manifest = read_manifest(staging, ref)
                return self._import(staging, manifest, ref)
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    def _import(self, layout: Path, manifest: Manifest, ref: str | None) -> Image:
        diff_ids = [layer.diff_id for layer in manifest.layers]
        size = 0
        for layer in manifest.layers:
            size += self._unpack(layout, layer.digest, layer.diff_id)
        root_id = _root_id(diff_ids)
        root = self._roots / root_id
        if not root.is_dir():
            staging = Path(tempfile.mkdtemp(prefix="root-", dir=self._tmp))
            try:
                compose_root([self._layers / d.removeprefix("sha256:") for d in diff_ids], staging)
                publish(staging, root, linked=True)  # its files are the layers', flushed when they were
            except OSError as exc:
                raise ImageError(f"cannot compose the root of {manifest.digest}: {exc}") from None
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        (self._roots / f"{root_id}.lock").touch()
        ref = ref or manifest.name
        refs = [ref] if ref else []
        known = self._read(manifest.digest.removeprefix("sha256:"))
        if known is not None:
            refs = [*known.refs, *[r for r in refs if r not in known.refs]]
        if ref:
            self._drop_ref(ref, keep=manifest.digest)
        record = {
            "digest": manifest.digest,
            "root_id": root_id,
            "layers": diff_ids,
            "platform": manifest.platform,
            "size_bytes": size,
            "refs": refs,
            "config": {
                "env": [list(pair) for pair in manifest.config.env],
                "working_dir": manifest.config.working_dir,
                "user": manifest.config.user,
                "entrypoint": list(manifest.config.entrypoint),
                "cmd": list(manifest.config.cmd),
            },
            "manifest": manifest.raw.decode(),
            "image_config": manifest.raw_config.decode(),
        }
        self._write(manifest.digest.removeprefix("sha256:"), record)
        image = self._read(manifest.digest.removeprefix("sha256:"))
        assert image is not None
        return image

    def _unpack(self, layout: Path, digest: str, diff_id: str) -> int:
        """Unpack one layer unless the store has it; returns its files' size."""
        target = self._layers / diff_id.removeprefix("sha256:")
        size_file = self._layers / f"{target.name}.size"
        if target.is_dir():
            with contextlib.suppress(OSError, ValueError):
                return int(size_file.read_text())
            return 0
        blob = blob_path(layout, digest)
        staging = Path(tempfile.mkdtemp(prefix="layer-", dir=self._tmp))
        try:
            unpacked = unpack_layer(blob, staging)
            if unpacked.digest != digest:
                raise ImageError(
                    f"the layer blob {digest} does not match its digest (it is {unpacked.digest}): corrupted or "
                    "tampered with; fetch the image again"
                )
            if unpacked.diff_id != diff_id:
                raise ImageError(
                    f"the layer {digest} unpacks to {unpacked.diff_id}, not the diff_id {diff_id} its image's "
                    "configuration names: a tampered image; fetch it again"
                )
            staging.chmod(0o755)
            write_durably(size_file, str(unpacked.size_bytes).encode())
            publish(staging, target)
            return unpacked.size_bytes
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    # Records

    def _write(self, hex_digest: str, record: dict[str, object]) -> None:
        write_durably(self._manifests / f"{hex_digest}.json", (json.dumps(record, indent=1) + "\n").encode())

    def _record(self, hex_digest: str) -> dict[str, object] | None:
        with contextlib.suppress(OSError, ValueError):
            record = json.loads((self._manifests / f"{hex_digest}.json").read_text())
            if isinstance(record, dict):
                return record
        return None

    def _read(self, hex_digest: str) -> Image | None:
        record = self._record(hex_digest)
        if record is None:
            return None
        config = record["config"]
        assert isinstance(config, dict)
        root_id = str(record["root_id"])
        return Image(
            digest=str(record["digest"]),
            root_id=root_id,
            root=self._roots / root_id,
            config=ImageConfig(
                env=tuple((str(n), str(v)) for n, v in config["env"]),
                working_dir=config["working_dir"],
                user=config["user"],
                entrypoint=tuple(config["entrypoint"]),
                cmd=tuple(config["cmd"]),
            ),
            refs=tuple(record["refs"]),  # type: ignore[arg-type]
            platform=str(record["platform"]),
            size_bytes=int(record["size_bytes"]),  # type: ignore[call-overload]
        )

    def _drop_ref(self, ref: str, *, keep: str) -> None:
        """Take ``ref`` off every image but ``keep`` (a reference names one image)."""
        for image in self.list():
            if ref in image.refs and image.digest != keep:
                record = self._record(image.digest.removeprefix("sha256:"))
                assert record is not None
                record["refs"] = [r for r in image.refs if r != ref]
                self._write(image.digest.removeprefix("sha256:"), record)

    def list(self) -> list[Image]:
        """Every image in the store, by digest."""
        if not self._manifests.is_dir():
            return []
        found = [self._read(p.stem) for p in sorted(self._manifests.glob("*.json")) if not p.name.startswith(".")]
        return [image for image in found if image is not None]

    def manifest(self, image: Image) -> tuple[bytes, bytes]:
        """The image's manifest and configuration, as imported (for ``rollbox images inspect``)."""
        record = self._record(image.digest.removeprefix("sha256:")) or {}
        return str(record.get("manifest", "")).encode(), str(record.get("image_config", "")).encode()

    def resolve(self, ref_or_digest: str) -> Image:
        """The image named by a reference it was imported as (``name:tag``; ``name`` means ``name:latest``, and
        ``docker.io/library/`` is implied, as Docker names them), by its digest (``sha256:...``,
        ``name@sha256:...``), or by a unique prefix of 12 or more hex digits.

        Raises:
            ImageError: none, or several, match; the message says how to import or name one.
        """
        wanted = ref_or_digest.strip()
        images = self.list()
        digest = wanted.rpartition("@")[2] if "@" in wanted else wanted
        hex_part = digest.removeprefix("sha256:")
        if len(hex_part) >= 12 and set(hex_part) <= _HEX:
            matches = [i for i in images if i.digest.removeprefix("sha256:").startswith(hex_part)]
        else:
            matches = [i for i in images if _normal(wanted) in {_normal(r) for r in i.refs}]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise ImageError(f"{wanted!r} matches {len(matches)} images: give more of the digest")
        raise ImageError(
            f"no image {wanted!r} in the store ({self.home}): import it first "
            "('rollbox images pull REF' or 'rollbox images import FILE|DIR')"
        )

    # Removing

    def remove(self, ref_or_digest: str) -> None:
        """Forget the image named ``ref_or_digest``; its root and layers are freed by :meth:`gc` once no image
        names them and no sandbox holds them.

        Raises:
            ImageError: no such image.
        """
        with self._locked(f"remove {ref_or_digest}"):
            image = self.resolve(ref_or_digest)
            (self._manifests / f"{image.digest.removeprefix('sha256:')}.json").unlink()

    def gc(self) -> int:
        """Remove every root and layer no image names (a root a sandbox holds stays), what dead imports left, and
        the downloads no pull holds and none wrote to for an hour. Returns the bytes freed.
        """
        freed = 0
        with self._locked("collect the image store's garbage"):
            images = self.list()
            roots = {i.root_id for i in images}
            layers: set[str] = set()
            for image in images:
                record = self._record(image.digest.removeprefix("sha256:")) or {}
                layers.update(str(d).removeprefix("sha256:") for d in record.get("layers", []))  # type: ignore[attr-defined]
            for root in self._roots.iterdir():
                if root.name.endswith(".lock") or root.name in roots or not root.is_dir():
                    continue
                lock = self._roots / f"{root.name}.lock"
                with unheld(lock) as free:  # else a sandbox runs on it
                    if free:
                        # Its files are hard links to the layers': only its own directories are freed.
                        freed += sum(
                            os.lstat(os.path.join(b, n)).st_blocks * 512 for b, ds, _ in os.walk(root) for n in ds
                        )
                        discard(root, self._tmp)
                        lock.unlink(missing_ok=True)
            for layer in self._layers.iterdir():
                if not layer.is_dir() or layer.name in layers:
                    continue
                freed += _tree_bytes(layer)
                discard(layer, self._tmp)
                (self._layers / f"{layer.name}.size").unlink(missing_ok=True)
            remove_partials(self._manifests)
            remove_partials(self._layers)
            for leftover in list(self._tmp.iterdir()):
                freed += _tree_bytes(leftover) if leftover.is_dir() else 0
                discard(leftover, self._tmp)
            for lock in sorted(self.downloads.rglob(".pull.lock")) if self.downloads.is_dir() else []:
                if not lock.exists():
                    continue  # a repository's download below another's (``a/b`` below ``a``), removed with it
                with contextlib.ExitStack() as held:
                    # Every pull's lock in the tree: a repository's download may hold another's (``a/b`` in ``a``).
                    free = all(held.enter_context(unheld(inner)) for inner in sorted(lock.parent.rglob(".pull.lock")))
                    if free and time.time() - _newest(lock.parent) > ABANDONED_S:  # else a pull is under way
                        freed += _tree_bytes(lock.parent)
                        discard(lock.parent, self._tmp)
                        for parent in lock.parent.parents:  # the registry's and repository's directories, if empty
                            if parent == self.downloads or any(parent.iterdir()):
                                break
                            parent.rmdir()
        return freed


def _normal(ref: str) -> str:
    """``ref`` as Docker Hub's names are compared: ``docker.io/library/`` implied, ``:latest`` when untagged."""
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        ref = ref.removeprefix(prefix)
    ref = ref.removeprefix("library/")
    return ref if ":" in ref.rpartition("/")[2] else f"{ref}:latest"


def _newest(path: Path) -> float:
    """When anything in the directory ``path`` was last written (seconds since the epoch)."""
    return max([os.lstat(os.path.join(b, n)).st_mtime for b, ds, fs in os.walk(path) for n in [*ds, *fs]], default=0.0)
