"""Pulling an image from a registry (the OCI distribution API) into an OCI image layout directory.

    result = pull("127.0.0.1:5000/tools:1", layout_dir)     # then ImageStore().import_layout(result.layout, ...)

The manifest (or, from a manifest list / OCI index, the one for this machine's platform) is fetched by tag or
digest and checked against its digest; its configuration and layers are downloaded into ``blobs/sha256/`` of the
layout, each into ``<hex>.partial`` first and renamed to its name only once its digest matches. A download that
was cut off goes on where it stopped (an HTTP Range request) when the pull is run again. What a registry states is
not trusted to be small: a blob stated larger than ``max_blob_bytes`` is refused, one the disk has no room for is
not started, and one that fills the disk is deleted (a partial download kept would keep the disk full).
Authentication (anonymous, token, basic) is ``_registry_http``'s. Loopback registries are spoken to over plain HTTP,
others over HTTPS.

Every failure is an :class:`ImageError` of one line: the registry unreachable, credentials refused, no such
image, no image for this platform, a blob that does not match its digest (nothing of it is kept).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ._errors import ImageError
from ._image import Image
from ._layout import REF_NAME, same_platform, this_platform
from ._reference import Reference, parse_reference
from ._registry_http import BrokenTransfer, Credentials, Session, credentials_for
from ._store import ImageStore

__all__ = [
    "MAX_BLOB_BYTES",
    "Credentials",
    "PullProgress",
    "PullResult",
    "credentials_for",
    "download_dir",
    "pull",
    "pull_image",
]

_INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
_MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
_ACCEPT = ", ".join((*_MANIFEST_TYPES, *_INDEX_TYPES))
_MAX_MANIFEST_BYTES = 8 << 20
_CHUNK = 1 << 20
_LOOPBACK = re.compile(r"(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?")
#: The largest blob a pull downloads unless told otherwise: above the largest layers of CUDA and ML images, far
#: below what a hostile registry's stated size could make it write.
MAX_BLOB_BYTES = 16 << 30
#: What a pull leaves free on the disk under its downloads, beyond what its blobs need: a tenth of them, at least
#: this (the disk is the machine's: sandboxes' scratch and the import that follows need room too).
_SPARE_BYTES = 1 << 20


@dataclass(frozen=True)
class PullProgress:
    """Where a pull stands, after each chunk: bytes of blobs done (resumed ones included) out of all."""

    done_bytes: int
    total_bytes: int
    blob: str


@dataclass(frozen=True)
class PullResult:
    """What a pull did.

    Attributes:
        reference: The reference pulled, in full (``HOST/NAME:TAG``).
        digest: The digest of the image's manifest (for this platform, when the reference named a list).
        layout: The OCI image layout directory that holds it; its ``index.json`` names only this image.
        downloaded_bytes: Bytes fetched from the registry this time.
        reused_bytes: Bytes of blobs already there, whole or partly (a resumed download's first part).
    """

    reference: str
    digest: str
    layout: Path
    downloaded_bytes: int
    reused_bytes: int


def pull(
    reference: str,
    layout: Path,
    *,
    credentials: Credentials | None = None,
    platform: str | None = None,
    plain_http: bool | None = None,
    on_progress: Callable[[PullProgress], None] | None = None,
    timeout_s: float = 60.0,
    max_blob_bytes: int = MAX_BLOB_BYTES,
) -> PullResult:
    """Download the image ``reference`` names into the OCI image layout directory ``layout`` (made if missing;
    blobs already there are kept, a partial one is resumed).

    Args:
        reference: ``NAME[:TAG]``, ``NAME@sha256:...``, ``HOST[:PORT]/NAME[:TAG]``.
        layout: The layout directory (one per repository keeps its blobs across tags and pulls).
        credentials: For the registry; default :func:`credentials_for` its host.
        platform: ``os/arch[/variant]`` to take from a manifest list; default this machine's.
        plain_http: Speak HTTP, not HTTPS; default only for loopback hosts.
        on_progress: Called after each chunk of a blob.
        timeout_s: For each connection and each read.
        max_blob_bytes: The largest blob (configuration or layer) the manifest may state; a larger one is refused
            before anything of it is downloaded.

    Raises:
        ImageError: what went wrong, in one line, and what to do.
    """
    layout = Path(layout)
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    with _locked(layout):
        return _pull_locked(
            parse_reference(reference),
            layout,
            credentials=credentials,
            platform=platform,
            plain_http=plain_http,
            on_progress=on_progress,
            timeout_s=timeout_s,
            max_blob_bytes=max_blob_bytes,
        )


def _pull_locked(
    ref: Reference,
    layout: Path,
    *,
    credentials: Credentials | None,
    platform: str | None,
    plain_http: bool | None,
    on_progress: Callable[[PullProgress], None] | None,
    timeout_s: float,
    max_blob_bytes: int,
    fetched: list[Path] | None = None,
) -> PullResult:
    """:func:`pull` into ``layout``, whose lock the caller holds; the blobs it downloads whole are added to
    ``fetched`` as they are (so that a caller can delete them when the pull fails)."""
    if plain_http is None:
        plain_http = bool(_LOOPBACK.fullmatch(ref.registry))
    with Session(ref, credentials or credentials_for(ref.registry), plain_http, timeout_s) as session:
        pulling = _Pull(session, ref, layout, platform or this_platform(), on_progress, max_blob_bytes=max_blob_bytes)
        if fetched is not None:
            pulling.fetched = fetched
        return pulling.run()


def download_dir(store: ImageStore, reference: str) -> Path:
    """Where pulls of ``reference``'s repository keep their layout in ``store``: one per registry and repository,
    so that a cut-off pull resumes and blobs shared by its tags are fetched once."""
    ref = parse_reference(reference)
    return store.downloads / ref.registry.replace(":", "_") / ref.repository


def pull_image(
    store: ImageStore,
    reference: str,
    *,
    credentials: Credentials | None = None,
    platform: str | None = None,
    plain_http: bool | None = None,
    on_progress: Callable[[PullProgress], None] | None = None,
    timeout_s: float = 60.0,
    max_blob_bytes: int = MAX_BLOB_BYTES,
) -> tuple[Image, PullResult]:
    """Pull ``reference`` (see :func:`pull`) into ``store``'s downloads and import it, known by the reference as
    given; the download's blobs are deleted once imported (the store keeps what it unpacked). A ``platform`` of
    another OS or architecture than this machine's is refused before anything is downloaded (the store imports
    only images whose programs run here); an image whose configuration names one is refused once its configuration
    is downloaded, before its layers are.

    Raises:
        ImageError: as :func:`pull`, or the import's.
    """
    ref = parse_reference(reference)
    if platform is not None and not same_platform(platform, this_platform()):
        raise ImageError(
            f"{ref}: the platform {platform} is not this machine's ({this_platform()}): the store keeps only images "
            "whose programs run here; pull it into a layout to copy elsewhere (rollbox.sandbox.images.pull)"
        )
    layout = download_dir(store, reference)
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    with _locked(layout):  # to the end: another pull of the repository must not delete what this one imports
        fetched: list[Path] = []
        try:
            result = _pull_locked(
                ref,
                layout,
                credentials=credentials,
                platform=platform,
                plain_http=plain_http,
                on_progress=on_progress,
                timeout_s=timeout_s,
                max_blob_bytes=max_blob_bytes,
                fetched=fetched,
            )
            image = store.import_layout(result.layout, ref=reference)
        except ImageError as exc:
            # What it downloaded would only wait an hour for gc, taking the disk meanwhile: a pull that failed for
            # good (an import refused, a platform, a corrupt blob, no room) deletes it now. One cut off keeps it to
            # resume from.
            if not isinstance(exc, BrokenTransfer):
                for path in fetched:
                    path.unlink(missing_ok=True)
            raise
        for blob in (layout / "blobs" / "sha256").iterdir():
            if not blob.name.endswith(".partial"):
                blob.unlink()
        for name in ("index.json", "oci-layout"):
            (layout / name).unlink(missing_ok=True)
    return image, result


@contextlib.contextmanager
def _locked(layout: Path) -> Iterator[None]:
    """One pull into a layout at a time (a second waits, then finds the blobs there)."""
    fd = os.open(layout / ".pull.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class _Pull:
    """One pull: the manifest for the platform, then its blobs, then the layout's index."""

    def __init__(
        self,
        session: Session,
        ref: Reference,
        layout: Path,
        platform: str,
        on_progress: Callable[[PullProgress], None] | None,
        *,
        max_blob_bytes: int,
    ) -> None:
        self.session, self.ref, self.layout, self.platform = session, ref, layout, platform
        self.on_progress, self.max_blob_bytes = on_progress, max_blob_bytes
        self.done = self.total = self.downloaded = self.reused = 0
        #: The blobs this pull downloaded whole (not those it found there).
        self.fetched: list[Path] = []

    def run(self) -> PullResult:
        media, data, digest = self._manifest(self.ref.target, expect=self.ref.digest)
        if media in _INDEX_TYPES:
            chosen = self._pick(json.loads(data))
            media, data, digest = self._manifest(chosen, expect=chosen)
            if media in _INDEX_TYPES:
                raise ImageError(f"{self.ref}: the entry for {self.platform} is itself an index: not supported")
        blobs = self._descriptors(json.loads(data))
        for blob_digest, size in blobs:
            if size > self.max_blob_bytes:
                raise ImageError(
                    f"{self.ref}: its manifest states blob {blob_digest} is {size:,} bytes, over the limit of "
                    f"{self.max_blob_bytes:,} (max_blob_bytes, --max-blob-size): refused before downloading; raise "
                    "the limit if the image really is that large"
                )
        self.total = sum(size for _, size in blobs)
        self._room_for(blobs)
        self._blob(*blobs[0])
        self._check_platform(blobs[0][0])  # the configuration says: before a layer is downloaded
        for blob_digest, size in blobs[1:]:
            self._blob(blob_digest, size)
        self._write(digest, data)
        entry = {"mediaType": media, "digest": digest, "size": len(data)}
        entry["annotations"] = {REF_NAME: str(self.ref)}
        (self.layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        index = json.dumps({"schemaVersion": 2, "manifests": [entry]}, indent=1)
        partial = self.layout / "index.json.partial"
        partial.write_text(index)
        partial.rename(self.layout / "index.json")
        return PullResult(str(self.ref), digest, self.layout, self.downloaded, self.reused)

    def _room_for(self, blobs: list[tuple[str, int]]) -> None:
        """Refuse, before anything is downloaded, an image whose blobs (what is not here of them yet) the disk under
        the layout has no room for, with a margin to spare: each blob fitting alone is not the image fitting."""
        needed = 0
        for digest, size in blobs:
            path = self.layout / "blobs" / "sha256" / digest.removeprefix("sha256:")
            if not path.exists():
                have = 0
                with contextlib.suppress(OSError):
                    have = min(size, os.stat(path.with_name(path.name + ".partial")).st_size)
                needed += size - have
        spare = max(_SPARE_BYTES, needed // 10)
        free = shutil.disk_usage(self.layout).free
        if needed and needed + spare > free:
            raise ImageError(
                f"{self.ref}: the image needs {needed:,} bytes more, and {self.layout} has {free:,} free: free "
                f"space there ('rollbox images gc'; a pull leaves {spare:,} bytes to spare), then pull again"
            )

    def _manifest(self, target: str, *, expect: str | None) -> tuple[str, bytes, str]:
        """The manifest (or index) ``target`` names: its media type, bytes and digest (checked against ``expect``,
        else against the digest the registry gives)."""
        what = f"the manifest {target}"
        with self.session.get(f"manifests/{target}", {"Accept": _ACCEPT}, what) as response:
            if response.status_code == 404:
                raise ImageError(
                    f"{self.ref}: the registry has no manifest {target} in {self.ref.repository} "
                    "(check the name and tag)"
                )
            if response.status_code != 200:
                raise ImageError(f"{self.ref}: the registry answered {response.status_code} for {what}")
            data = b""
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > _MAX_MANIFEST_BYTES:
                    raise ImageError(f"{self.ref}: {what} is over {_MAX_MANIFEST_BYTES} bytes: not a manifest")
            media = response.headers.get("Content-Type", "").split(";")[0].strip()
            given = response.headers.get("Docker-Content-Digest")
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        for claimed in (expect, given):
            if claimed is not None and claimed.startswith("sha256:") and claimed != digest:
                raise ImageError(f"{self.ref}: {what} has digest {digest}, not {claimed}: refused (re-push it)")
        try:
            body = json.loads(data)
        except ValueError as exc:
            raise ImageError(f"{self.ref}: {what} is not JSON: {exc}") from exc
        media = body.get("mediaType", media) if isinstance(body, dict) else media
        if media not in (*_INDEX_TYPES, *_MANIFEST_TYPES):
            raise ImageError(
                f"{self.ref}: {what} is of type {media or 'unknown'} (schema 1?): only OCI and Docker v2 "
                "manifests are supported; push it again with a current client"
            )
        return media, data, digest

    def _descriptors(self, manifest: object) -> list[tuple[str, int]]:
        """The (digest, size) of the manifest's configuration, then of its layers, checked for shape (what a
        registry sends is not trusted)."""
        descriptors: list[object] = []
        if isinstance(manifest, dict) and isinstance(layers := manifest.get("layers", []), list):
            descriptors = [manifest.get("config"), *layers]
        found = [
            (d["digest"], d["size"])
            for d in descriptors
            if isinstance(d, dict) and isinstance(d.get("digest"), str) and type(d.get("size")) is int
            if d["size"] >= 0
        ]
        if not found or len(found) != len(descriptors):
            raise ImageError(
                f"{self.ref}: its manifest is not an image manifest (a config and layers, each with a digest and "
                "a size): push the image again with a current client"
            )
        return found

    def _check_platform(self, config_digest: str) -> None:
        """Refuse an image built for another platform (one that a manifest list did not choose)."""
        path = self.layout / "blobs" / "sha256" / config_digest.removeprefix("sha256:")
        try:
            config = json.loads(path.read_bytes())
            have = f"{config['os']}/{config['architecture']}"
        except (ValueError, KeyError, TypeError):
            return  # no platform stated: the import decides
        if not same_platform(have, self.platform):
            raise ImageError(
                f"{self.ref} is an image for {have} only, not {self.platform}: pull one built for this platform"
            )

    def _pick(self, index: object) -> str:
        """The digest of the index's manifest for this platform (a variant is compared only when both name one)."""
        found = []
        entries = index.get("manifests") if isinstance(index, dict) else None
        for entry in entries if isinstance(entries, list) else []:
            p = entry.get("platform") if isinstance(entry, dict) else None
            if not isinstance(p, dict) or not isinstance(entry.get("digest"), str):
                continue
            have = [str(p.get("os", "")), str(p.get("architecture", ""))]
            have += [str(p["variant"])] if p.get("variant") else []
            found.append("/".join(have))
            if same_platform("/".join(have), self.platform):
                return str(entry["digest"])
        raise ImageError(
            f"{self.ref} has no image for {self.platform} (it has {', '.join(found) or 'none'}): "
            "pull one built for this machine, or give --platform"
        )

    def _write(self, digest: str, data: bytes) -> None:
        path = self.layout / "blobs" / "sha256" / digest.removeprefix("sha256:")
        if not path.exists():
            partial = path.with_name(path.name + ".partial")
            partial.write_bytes(data)
            partial.rename(path)
            self.fetched.append(path)

    def _blob(self, digest: str, size: int) -> None:
        """Download the blob ``digest`` (``size`` bytes) unless it is there, resuming a partial download; publish
        it under its name only once its digest matches."""
        if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            raise ImageError(f"{self.ref}: the manifest names blob {digest!r}: only sha256 digests are supported")
        path = self.layout / "blobs" / "sha256" / digest.removeprefix("sha256:")
        if path.exists():
            self._count(digest, 0, reused=size)
            return
        partial = path.with_name(path.name + ".partial")
        hasher = hashlib.sha256()
        have = 0
        with contextlib.suppress(FileNotFoundError), open(partial, "rb") as old:
            while chunk := old.read(_CHUNK):
                hasher.update(chunk)
                have += len(chunk)
        if have > size:
            partial.unlink()
            hasher, have = hashlib.sha256(), 0
        self._count(digest, 0, reused=have)
        free = shutil.disk_usage(partial.parent).free
        if size - have > free:
            raise ImageError(
                f"{self.ref}: blob {digest} needs {size - have:,} bytes more, and {partial.parent} has {free:,} free: "
                "free space there ('rollbox images gc'), then pull again"
            )
        # The blob's bytes as stored, never re-encoded on the way (its digest is of those), read raw as they come
        # (httpx's decoding and re-chunking would only copy them again).
        headers = {"Accept-Encoding": "identity"} | ({"Range": f"bytes={have}-"} if 0 < have < size else {})
        with self.session.get(f"blobs/{digest}", headers, f"blob {digest}") as response:
            if response.status_code == 200 and have:  # the registry ignored the range: start again
                self._count(digest, 0, reused=-have)  # (nothing was reused after all)
                hasher, have = hashlib.sha256(), 0
            elif response.status_code not in (200, 206) and not (response.status_code == 416 and have == size):
                said = "does not have it" if response.status_code == 404 else f"answered {response.status_code}"
                raise ImageError(f"{self.ref}: blob {digest}: the registry {said} (push the image again)")
            try:
                with open(partial, "ab" if have else "wb") as out:
                    for chunk in response.iter_raw() if have < size else ():
                        have += len(chunk)
                        if have > size:
                            break
                        hasher.update(chunk)
                        out.write(chunk)
                        self.downloaded += len(chunk)
                        self._count(digest, len(chunk))
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    partial.unlink(missing_ok=True)  # kept to resume, it would keep the disk full
                raise ImageError(
                    f"{self.ref}: cannot write blob {digest} into {partial.parent}: {exc.strerror or exc}: free "
                    "space there ('rollbox images gc') or check its permissions, then pull again"
                ) from exc
        if have < size:  # the registry ended early: what came is kept for the next pull to go on from
            raise BrokenTransfer(
                f"{self.ref}: blob {digest} was cut off after {have} of {size} bytes: pull again to resume"
            )
        got = "sha256:" + hasher.hexdigest()
        if have != size or got != digest:
            partial.unlink()
            raise ImageError(
                f"{self.ref}: blob {digest} came as {have} bytes with digest {got}, not {size} bytes of {digest}: "
                "refused and deleted; pull again, and if it recurs the registry's copy is corrupt (push it again)"
            )
        partial.rename(path)
        self.fetched.append(path)

    def _count(self, digest: str, done: int, *, reused: int = 0) -> None:
        self.done += done + reused
        self.reused += reused
        if self.on_progress is not None:
            self.on_progress(PullProgress(self.done, self.total, digest))
