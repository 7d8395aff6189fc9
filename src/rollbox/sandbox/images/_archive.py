"""Archives of images: a ``docker save`` archive or an OCI archive (a tar of a layout), extracted safely and made an
OCI image layout that the store imports.

A ``docker save`` archive of the old kind (``manifest.json``, a configuration, ``<id>/layer.tar``) becomes a layout
by :func:`layout_from_docker`; newer ones, and OCI archives, are layouts already once extracted.
"""

from __future__ import annotations

import errno
import hashlib
import json
import lzma
import os
import shutil
import tarfile
import zlib
from pathlib import Path

from ._errors import ImageError
from ._layout import REF_NAME, strings

__all__ = ["extract_archive", "layout_from_docker"]


def _file_digest(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def layout_from_docker(extracted: Path) -> None:
    """Make the extracted ``docker save`` archive in ``extracted`` (``manifest.json``, a configuration file and
    ``<id>/layer.tar`` files) an OCI image layout in place: its files become blobs under their digests, and a
    manifest is written for them (so its digest is rollbox's, as no registry gave one).

    Raises:
        ImageError: ``manifest.json`` is not a docker-save manifest, names several images, or a missing file.
    """
    try:
        saved = json.loads((extracted / "manifest.json").read_bytes())
    except (OSError, ValueError) as exc:
        raise ImageError(f"the archive's manifest.json cannot be read ({exc}): not a docker-save archive") from None
    if not isinstance(saved, list) or len(saved) != 1 or not isinstance(saved[0], dict):
        count = len(saved) if isinstance(saved, list) else "no"
        raise ImageError(f"the archive holds {count} images; rollbox imports one: save one image per archive")
    entry = saved[0]
    blobs = extracted / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def as_blob(name: object) -> tuple[str, int]:
        if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
            raise ImageError(f"the archive's manifest.json names {name!r}, not a file of the archive")
        path = extracted / name
        if not path.is_file():
            raise ImageError(f"the archive's manifest.json names {name}, which the archive lacks")
        digest, size = _file_digest(path)
        target = blobs / digest.removeprefix("sha256:")
        if not target.exists():
            os.link(path, target)
        return digest, size

    config_digest, config_size = as_blob(entry.get("Config"))
    layers = [as_blob(name) for name in strings(entry.get("Layers"))]
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": s} for d, s in layers],
    }
    data = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.removeprefix("sha256:")).write_bytes(data)
    tags = strings(entry.get("RepoTags"))
    annotations = {REF_NAME: tags[0]} if tags else {}
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": manifest["mediaType"],
                "digest": digest,
                "size": len(data),
                **({"annotations": annotations} if annotations else {}),
            }
        ],
    }
    (extracted / "index.json").write_text(json.dumps(index))
    (extracted / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')


def _member_path(name: str) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts or name.startswith("/"):
        raise ImageError(f"the archive's entry {name!r} lies outside it (a hostile archive): refused")
    return "/".join(parts)


def _why(exc: BaseException) -> str:
    """An error's message on one line (tarfile's and the compressors' may hold several)."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return " ".join(text.split()) or type(exc).__name__


#: The first bytes of each compressed format tarfile opens.
_MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}


def _not_an_archive(archive: Path) -> ImageError:
    """What to say of a file tarfile cannot open: by its first bytes, a damaged compressed file or no archive."""
    try:
        with archive.open("rb") as f:
            head = f.read(6)
    except OSError:
        head = b""
    kind = next((kind for magic, kind in _MAGIC.items() if head.startswith(magic)), None)
    if kind is not None:
        return ImageError(
            f"{archive} is a {kind} file without a readable tar archive in it (corrupt, truncated, or not an image "
            "archive): save or copy the image again as a docker-save or OCI archive"
        )
    return ImageError(
        f"{archive} is not a tar archive (plain, gzip, bzip2 or xz): give a docker-save or OCI archive "
        "(docker save, skopeo copy ... oci-archive:FILE), or an OCI image layout directory"
    )


def _corrupt(archive: Path, exc: BaseException) -> ImageError:
    return ImageError(f"{archive} is a corrupt or truncated archive ({_why(exc)}): save or copy the image again")


def extract_archive(archive: Path, into: Path) -> None:
    """Extract a docker-save or OCI archive's files and directories into ``into``; a symbolic link between two of
    its files (docker save links layers it holds twice) becomes a copy; anything else, or a name that leaves
    ``into``, is refused."""
    links: list[tuple[str, str]] = []
    try:
        tar = tarfile.open(archive, mode="r:*")  # noqa: SIM115 (closed by the "with tar" below)
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError, OSError) as exc:
        if isinstance(exc, OSError) and exc.errno is not None:
            raise ImageError(f"{archive} cannot be read ({_why(exc)}): check the file") from None
        raise _not_an_archive(archive) from None
    try:
        with tar:
            for member in tar:
                rel = _member_path(member.name)
                if not rel:
                    continue
                target = into / rel
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isreg():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)
                    assert source is not None
                    with target.open("wb") as out:
                        shutil.copyfileobj(source, out, 1 << 20)
                elif member.issym() or member.islnk():
                    base = rel.rpartition("/")[0] if member.issym() else ""
                    links.append((rel, _member_path(os.path.normpath(os.path.join(base, member.linkname)))))
                else:
                    raise ImageError(f"the archive's entry {member.name!r} is not a file or directory: refused")
        for rel, linked in links:
            original = into / linked
            if not original.is_file() or original.is_symlink():
                raise ImageError(f"the archive's link {rel!r} points to {linked!r}, not a file of the archive: refused")
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            os.link(original, into / rel)
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise _corrupt(archive, exc) from None
    except OSError as exc:
        if exc.errno is None:  # gzip's and bz2's complaints about their stream are OSErrors without an errno
            raise _corrupt(archive, exc) from None
        if exc.errno in (errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
            # Two entries of one name (a file and a link, or a file and a directory): the archive's fault.
            clash = os.path.relpath(exc.filename2 or exc.filename, into) if exc.filename else "?"
            raise ImageError(
                f"{archive} holds two entries of one name at {clash!r} (a file and a link or a directory): a "
                "malformed archive, refused; save the image again"
            ) from None
        # Extracting it: where the store keeps its work is full or not writable, or the file cannot be read.
        where = f" {exc.filename}" if exc.filename else ""
        raise ImageError(
            f"cannot extract {archive}:{where} {_why(exc)}: free space under ROLLBOX_HOME, or check its permissions"
        ) from None
