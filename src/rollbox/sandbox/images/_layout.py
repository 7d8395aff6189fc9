"""Reading an OCI image layout directory: the manifest for this machine, its configuration, its layers' blobs.

An OCI image layout (image-spec ``image-layout.md``) is ``oci-layout``, ``index.json`` and ``blobs/<alg>/<hex>``.
``index.json`` lists manifests, or indexes (manifest lists) whose entries carry a platform: the one for this
machine's is taken. Every blob read here is checked against its digest before anything uses it; a layer's blob is
checked as it is unpacked (see ``_unpack``), since it is read once.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform as platform_module
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import ImageError
from ._image import ImageConfig

__all__ = [
    "REF_NAME",
    "Layer",
    "Manifest",
    "blob_path",
    "read_index",
    "read_manifest",
    "same_platform",
    "strings",
    "this_platform",
]

_INDEX_TYPES = {
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
}
_MANIFEST_TYPES = {
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
}
_MAX_JSON_BYTES = 8 << 20  # a manifest, an index or a configuration bigger than this is not one
#: The annotation an index names an image by.
REF_NAME = "org.opencontainers.image.ref.name"
_ARCHITECTURES = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le", "s390x": "s390x"}


def this_platform() -> str:
    """This machine's platform as images name it: ``linux/amd64``, ``linux/arm64``, ..."""
    machine = platform_module.machine()
    return f"linux/{_ARCHITECTURES.get(machine, machine)}"


def same_platform(have: str, want: str) -> bool:
    """Whether an image for ``have`` (``os/architecture[/variant]``) is one for ``want``: the same OS and
    architecture, and the same variant where both name one (``linux/arm`` is never ``linux/arm64``). The one rule
    for choosing from an index, for a pull's and for an import's check."""
    h, w = have.split("/"), want.split("/")
    return h[:2] == w[:2] and (len(h) < 3 or len(w) < 3 or h[2:] == w[2:])


@dataclass(frozen=True)
class Layer:
    """One layer of a manifest: its blob's digest and size, and its uncompressed digest (the config's diff_id)."""

    digest: str
    size: int
    diff_id: str


@dataclass(frozen=True)
class Manifest:
    """An image's manifest, read and verified, with what its configuration says."""

    digest: str
    layers: tuple[Layer, ...]
    config: ImageConfig
    platform: str
    raw: bytes
    raw_config: bytes
    #: The name the layout gives it (``org.opencontainers.image.ref.name``), when that is a whole reference
    #: (``name:tag``, as ``docker save``'s tags are), not only a tag.
    name: str | None = None


def _hex(digest: object, where: str) -> str:
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise ImageError(f"{where}: digest {digest!r} is not sha256:<64 hex digits>; rollbox reads sha256 images only")
    value = digest.removeprefix("sha256:")
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise ImageError(f"{where}: digest {digest!r} is not sha256:<64 hex digits>")
    return value


def blob_path(layout: Path, digest: object) -> Path:
    """Where ``digest``'s blob lies in ``layout`` (checked to be a well-formed sha256 digest).

    Raises:
        ImageError: the digest is malformed, or the blob is missing.
    """
    path = layout / "blobs" / "sha256" / _hex(digest, str(layout))
    if not path.is_file():
        raise ImageError(f"{layout}: blob {digest} is missing (an incomplete layout: copy or pull the image again)")
    return path


def read_index(layout: Path) -> bytes:
    """The bytes of ``layout``'s index.json: a regular file of at most the JSON cap, never followed through a
    link, never waited on (a fifo) and never read past the cap (a device), whoever made the layout.

    Raises:
        ImageError: it is missing, not a regular file, too large, or unreadable.
    """
    path = layout / "index.json"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        what = "a link" if exc.errno == errno.ELOOP else exc.strerror
        raise ImageError(f"cannot read {path}: {what}: an image layout's index.json is a regular file") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_JSON_BYTES:
            size = f"{st.st_size:,} bytes" if stat.S_ISREG(st.st_mode) else "not a regular file"
            raise ImageError(
                f"{path} is {size}: an image layout's index.json is a regular file of at most {_MAX_JSON_BYTES:,} "
                "bytes; give a layout as an image tool writes it"
            )
        try:
            data = f.read(_MAX_JSON_BYTES + 1)
        except OSError as exc:
            raise ImageError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > _MAX_JSON_BYTES:
        raise ImageError(f"{path} grew past {_MAX_JSON_BYTES:,} bytes while read: not an image layout's index")
    return data


def _read_json_blob(layout: Path, digest: object, what: str) -> tuple[bytes, dict[str, Any]]:
    path = blob_path(layout, digest)
    with path.open("rb") as f:
        data = f.read(_MAX_JSON_BYTES + 1)
    if len(data) > _MAX_JSON_BYTES:
        raise ImageError(f"{layout}: the {what} {digest} is over {_MAX_JSON_BYTES} bytes: not an image's {what}")
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise ImageError(f"{layout}: the {what} blob does not match its digest {digest} (corrupted: fetch it again)")
    return data, _json_object(data, f"{layout}: the {what} {digest}")


def _json_object(data: bytes, where: str) -> dict[str, Any]:
    """``data`` as a JSON object: strict UTF-8 (what the image specification says JSON documents are; another
    encoding json.loads would guess, UTF-16 or a byte-order mark, is refused)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ImageError(f"{where} is not JSON in UTF-8 ({exc})") from None
    if not isinstance(value, dict):
        raise ImageError(f"{where} is not a JSON object")
    return value


def _object(value: object, where: str) -> dict[str, Any]:
    """``value`` when it is a JSON object (an absent one, null, is empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ImageError(f"{where} is {json.dumps(value)[:40]}, not a JSON object: a malformed image; save it again")
    return value


def _string(value: object, where: str) -> str | None:
    """``value`` when it is a JSON string (an absent one, null, is None)."""
    if value is None or isinstance(value, str):
        return value
    raise ImageError(f"{where} is {json.dumps(value)[:40]}, not a JSON string: a malformed image; save it again")


def _array(value: object, where: str) -> list[Any]:
    """``value`` when it is a JSON array (an absent one, null, is empty)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ImageError(f"{where} is {json.dumps(value)[:40]}, not a JSON array: a malformed image; save it again")
    return value


def _platform_of(entry: dict[str, Any], where: str) -> str:
    p = _object(entry.get("platform"), f"{where}: a platform")
    parts = [_string(p.get(k), f"{where}: a platform's {k}") for k in ("os", "architecture", "variant")]
    name = f"{parts[0] or '?'}/{parts[1] or '?'}"
    return f"{name}/{parts[2]}" if parts[2] else name


def _ref_name(entry: dict[str, Any], where: str) -> str | None:
    """The name the entry's annotations give it (``org.opencontainers.image.ref.name``), or None."""
    annotations = _object(entry.get("annotations"), f"{where}: an entry's annotations")
    return _string(annotations.get(REF_NAME), f"{where}: an entry's {REF_NAME}")


def _pick(layout: Path, entries: list[Any], ref: str | None, where: str) -> dict[str, Any]:
    """The one manifest (or index) entry of ``entries`` meant: for this platform, and named ``ref`` if several."""
    if not entries:
        raise ImageError(f"{where} lists no manifest: not an image")
    objects = [_object(e, f"{where}: an entry of its manifests") for e in entries]
    for e in objects:
        _ref_name(e, where)  # every entry's shape checked, whichever is taken
        _string(e.get("mediaType"), f"{where}: an entry's mediaType")
    candidates = [e for e in objects if not e.get("platform") or same_platform(_platform_of(e, where), this_platform())]
    if not candidates:
        found = sorted({_platform_of(e, where) for e in objects})
        raise ImageError(
            f"{where} has no image for {this_platform()} (it has {', '.join(found)}): use one built for it"
        )
    if len(candidates) > 1 and ref is not None:
        tag = ref.rsplit(":", 1)[-1] if ":" in ref.rsplit("/", 1)[-1] else None
        named = [e for e in candidates if _ref_name(e, where) in (ref, tag)]
        candidates = named or candidates
    if len(candidates) > 1:
        names = sorted({str(_ref_name(e, where) or e.get("digest")) for e in candidates})
        raise ImageError(f"{where} holds {len(candidates)} images ({', '.join(names)}): name one with ref=")
    return candidates[0]


def read_manifest(layout: Path, ref: str | None = None) -> Manifest:
    """The manifest of the image in ``layout`` for this machine (named ``ref`` where the layout holds several),
    with its configuration, both verified against their digests.

    Raises:
        ImageError: not a layout, no image for this platform (or the one there is for another), several and none
            named, a blob missing or corrupt.
    """
    if not (layout / "oci-layout").is_file() or not os.path.lexists(layout / "index.json"):
        raise ImageError(
            f"{layout} is not an OCI image layout (no oci-layout or index.json): give a layout directory, "
            "a docker-save or OCI archive, or an image in the store"
        )
    index = _json_object(read_index(layout), f"{layout}/index.json")
    where = f"{layout}/index.json"
    entry = _pick(layout, _array(index.get("manifests"), f"{where}: its manifests"), ref, where)
    named = _ref_name(entry, where)
    for _ in range(4):  # an index may point to an index (a manifest list); deeper nesting is not an image's
        if entry.get("mediaType") not in _INDEX_TYPES:  # a string or None: checked by _pick
            break
        _data, nested = _read_json_blob(layout, entry.get("digest"), "index")
        nested_where = f"{layout}: the index {entry['digest']}"
        entry = _pick(layout, _array(nested.get("manifests"), f"{nested_where}: its manifests"), ref, nested_where)
    digest = "sha256:" + _hex(entry.get("digest"), where)
    raw, manifest = _read_json_blob(layout, digest, "manifest")
    where = f"{layout}: the manifest {digest}"
    media = _string(manifest.get("mediaType"), f"{where}: its mediaType") or entry.get("mediaType")
    if media is not None and media not in _MANIFEST_TYPES:
        raise ImageError(f"{layout}: {digest} is a {media}, not an image manifest")
    config_entry = _object(manifest.get("config"), f"{where}: its config")
    raw_config, config = _read_json_blob(layout, config_entry.get("digest"), "configuration")
    config_where = f"{layout}: the configuration {config_entry['digest']}"
    rootfs = _object(config.get("rootfs"), f"{config_where}: its rootfs")
    diff_ids = _array(rootfs.get("diff_ids"), f"{config_where}: its diff_ids")
    blobs = [_object(b, f"{where}: a layer") for b in _array(manifest.get("layers"), f"{where}: its layers")]
    if len(diff_ids) != len(blobs):
        raise ImageError(
            f"{layout}: the manifest {digest} has {len(blobs)} layers but its configuration {len(diff_ids)} diff_ids"
        )
    platform = _platform_of({"platform": config}, config_where) if config.get("os") else this_platform()
    if not same_platform(platform, this_platform()):
        raise ImageError(
            f"{layout}: the image {digest} is for {platform}, not this machine's {this_platform()}: its programs "
            f"cannot run here; import one built for {this_platform()}"
        )
    layers = []
    for blob, diff_id in zip(blobs, diff_ids, strict=True):
        _hex(blob.get("digest"), f"{layout}: a layer of {digest}")
        _hex(diff_id, f"{layout}: a diff_id of {digest}")
        size = blob.get("size")
        layers.append(Layer(digest=blob["digest"], size=size if type(size) is int else 0, diff_id=diff_id))
    return Manifest(
        digest=digest,
        layers=tuple(layers),
        config=_image_config(_object(config.get("config"), f"{config_where}: its config")),
        platform=platform,
        raw=raw,
        raw_config=raw_config,
        name=named if isinstance(named, str) and ":" in named.rpartition("/")[2] and "/" in named else None,
    )


def strings(value: object) -> tuple[str, ...]:
    """``value``'s items as strings when it is a JSON list, else none."""
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


def _text(value: object) -> str | None:
    """``value`` when it is a string that says something, else None (as absent)."""
    return value if isinstance(value, str) and value else None


def _image_config(inner: dict[str, Any]) -> ImageConfig:
    env = []
    for item in strings(inner.get("Env")):
        name, sep, value = item.partition("=")
        if sep and name:
            env.append((name, value))
    return ImageConfig(
        env=tuple(env),
        working_dir=_text(inner.get("WorkingDir")),
        user=_text(inner.get("User")),
        entrypoint=strings(inner.get("Entrypoint")),
        cmd=strings(inner.get("Cmd")),
    )
