"""Images made by the tests themselves: tar layers written entry by entry (hostile ones included), OCI image
layouts, docker-save and OCI archives, and images of the host's own programs (python3, a shell, coreutils) for
sandboxes to run on. No registry, no Docker, no network."""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox.images import Image, ImageStore
from rollbox.sandbox.images._layout import this_platform

#: This machine's architecture as images name it (``amd64``, ``arm64``, ...): the test images are built for it.
ARCH = this_platform().split("/")[1]
#: An architecture that is not this machine's, for images that must be refused here.
OTHER_ARCH = "amd64" if ARCH == "arm64" else "arm64"

__all__ = [
    "Entry",
    "docker_archive",
    "host_files_layer",
    "host_image",
    "oci_archive",
    "tar_layer",
    "write_layout",
]

#: Commands the host-derived test image carries (with the libraries they load), beside python3.
HOST_COMMANDS = (
    "sh", "dash", "bash", "cat", "dd", "sleep", "kill", "ls", "echo", "true", "false", "yes", "head", "tail", "id",
    "env", "seq", "ipcmk", "ipcs", "touch", "mkdir", "rm", "chmod", "ln", "stat", "timeout", "nproc", "wc", "sort",
    "tr", "cut", "grep", "sed", "find", "xargs", "nohup", "setsid", "printf", "test", "uname", "cp", "mv", "readlink",
    "python3", "python3.11", "dirname", "basename", "mktemp", "tee", "od", "whoami", "pwd", "date", "expr", "ps",
    "sha256sum", "md5sum", "diff", "cmp", "fallocate", "truncate", "mkfifo", "realpath", "unshare", "nsenter",
    "chroot", "mount", "umount", "su", "sudo", "ping", "capsh", "setpriv",
)  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One tar entry of a test layer: ``kind`` is file, dir, symlink, hardlink, chr, blk or fifo."""

    name: str
    kind: str = "file"
    data: bytes = b""
    mode: int = 0o644
    target: str = ""
    mtime: int = 1_700_000_000


_KINDS = {
    "file": tarfile.REGTYPE,
    "dir": tarfile.DIRTYPE,
    "symlink": tarfile.SYMTYPE,
    "hardlink": tarfile.LNKTYPE,
    "chr": tarfile.CHRTYPE,
    "blk": tarfile.BLKTYPE,
    "fifo": tarfile.FIFOTYPE,
}


def tar_layer(entries: Iterable[Entry]) -> bytes:
    """An uncompressed tar of ``entries``, exactly as given (names, modes and link targets unchecked)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e.name)
            info.type = _KINDS[e.kind]
            info.mode = e.mode
            info.mtime = e.mtime
            info.linkname = e.target
            if e.kind in ("chr", "blk"):
                info.devmajor, info.devminor = 1, 3
            info.size = len(e.data) if e.kind == "file" else 0
            tar.addfile(info, io.BytesIO(e.data) if e.kind == "file" else None)
    return out.getvalue()


def _closure(paths: Iterable[str]) -> list[str]:
    """``paths`` with the shared libraries their ELF binaries load (by ldd), and every link on the way."""
    found: set[str] = set()
    for path in paths:
        done = subprocess.run(["ldd", path], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            parts = line.split()
            for part in parts:
                if part.startswith("/"):
                    found.add(_real_parent(part))
        found.add(_real_parent(path))
    return sorted(found)


def _real_parent(path: str) -> str:
    """``path`` with its directory's links resolved (``/lib/x`` is ``/usr/lib/x`` here), its own name kept."""
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def host_files_layer(extra: Sequence[str] = (), commands: Sequence[str] = HOST_COMMANDS) -> bytes:
    """A tar layer of the host's own programs (``commands``, found on PATH), the libraries they load, Python's
    standard library, and ``extra`` paths (files or directories), at their host paths; /bin, /lib and /lib64 links
    as the host has them."""
    programs = [p for c in commands if (p := shutil.which(c, path="/usr/bin:/bin:/usr/sbin:/sbin"))]
    dynload = sorted(str(p) for p in Path("/usr/lib/python3.11/lib-dynload").glob("*.so"))
    files = _closure([*programs, *dynload])
    out = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(path: str, *, recursive: bool = False) -> None:
            parts = Path(path).parts[1:]
            for k in range(1, len(parts)):
                parent = "/" + "/".join(parts[:k])
                if parent not in seen:
                    seen.add(parent)
                    tar.add(parent, arcname=parent.lstrip("/"), recursive=False)
            if not os.path.lexists(path) or (path in seen and not recursive):
                return
            if path not in seen:
                seen.add(path)
                tar.add(path, arcname=path.lstrip("/"), recursive=False)
            if os.path.islink(path):
                target = os.path.join(os.path.dirname(path), os.readlink(path))
                add(_real_parent(os.path.normpath(target)))
            elif recursive and os.path.isdir(path):
                for name in sorted(os.listdir(path)):
                    if name != "__pycache__":
                        add(os.path.join(path, name), recursive=True)

        for link in ("/bin", "/lib", "/lib64", "/sbin"):
            if os.path.islink(link):
                add(link)
        for path in files:
            add(path)
        # libgcc_s is loaded by glibc itself (pthread_exit, unwinding): no ldd shows it, every Debian image has it.
        for path in ["/usr/lib/python3.11", "/etc/ld.so.cache", "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1", *extra]:
            add(path, recursive=True)
    return out.getvalue()


def _blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = layout / "blobs" / "sha256" / digest.removeprefix("sha256:")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return digest, len(data)


def write_layout(
    layout: Path,
    layers: Sequence[bytes],
    *,
    config: dict[str, object] | None = None,
    compress: bool = True,
    ref: str | None = None,
    diff_ids: Sequence[str] | None = None,
    image_config: dict[str, object] | None = None,
    index_manifests: list[object] | None = None,
) -> Path:
    """Write an OCI image layout of ``layers`` (uncompressed tars; gzipped in the layout unless not ``compress``)
    at ``layout``, with ``config`` as the image configuration's ``config`` (Env, WorkingDir, User, ...);
    ``image_config`` replaces fields of the configuration itself (``architecture``, ``rootfs``, ...) and
    ``index_manifests`` the manifests ``index.json`` lists, whatever they are."""
    layout.mkdir(parents=True, exist_ok=True)
    (layout / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    entries = []
    for tar in layers:
        blob = gzip.compress(tar, compresslevel=1, mtime=0) if compress else tar
        digest, size = _blob(layout, blob)
        media = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
        entries.append({"mediaType": media, "digest": digest, "size": size})
    image_config = {
        "architecture": ARCH,
        "os": "linux",
        "config": config or {},
        "rootfs": {
            "type": "layers",
            "diff_ids": list(diff_ids or ["sha256:" + hashlib.sha256(t).hexdigest() for t in layers]),
        },
        **(image_config or {}),
    }
    config_digest, config_size = _blob(layout, json.dumps(image_config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config_size,
        },
        "layers": entries,
    }
    digest, size = _blob(layout, json.dumps(manifest).encode())
    entry: dict[str, object] = {"mediaType": manifest["mediaType"], "digest": digest, "size": size}
    if ref:
        entry["annotations"] = {"org.opencontainers.image.ref.name": ref}
    manifests = [entry] if index_manifests is None else index_manifests
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))
    return layout


def oci_archive(layout: Path, archive: Path) -> Path:
    """A tar of the layout ``layout`` (an OCI archive)."""
    with tarfile.open(archive, "w") as tar:
        for name in sorted(os.listdir(layout)):
            tar.add(layout / name, arcname=name)
    return archive


def docker_archive(archive: Path, layers: Sequence[bytes], *, config: dict[str, object] | None = None,
                   tag: str = "test/image:1") -> Path:  # fmt: skip
    """A ``docker save`` archive of the old kind: manifest.json, a configuration, ``<id>/layer.tar`` files."""
    diff_ids = ["sha256:" + hashlib.sha256(t).hexdigest() for t in layers]
    image_config = json.dumps(
        {
            "architecture": ARCH,
            "os": "linux",
            "config": config or {},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
    ).encode()
    config_name = hashlib.sha256(image_config).hexdigest() + ".json"
    manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": [f"{d[7:]}/layer.tar" for d in diff_ids]}]
    with tarfile.open(archive, "w") as tar:

        def put(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        put("manifest.json", json.dumps(manifest).encode())
        put(config_name, image_config)
        for d, t in zip(diff_ids, layers, strict=True):
            put(f"{d[7:]}/layer.tar", t)
    return archive


#: The host image's configuration: what a sandbox on it must apply.
HOST_IMAGE_CONFIG = {
    "Env": ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "IMAGE_VARIABLE=from-the-image"],
    "WorkingDir": "/srv",
    "User": "root",
}


@functools.cache
def host_image() -> Image:
    """An image of the host's own programs (python3, a shell, coreutils: see ``HOST_COMMANDS``), imported once per
    test process into the session's store (``ROLLBOX_HOME``)."""
    layout = Path(tempfile.mkdtemp(prefix="rollbox-host-image-")) / "layout"
    try:
        write_layout(layout, [host_files_layer()], config=HOST_IMAGE_CONFIG, compress=False)
        return ImageStore().import_layout(layout, ref="rollbox-test/host:1")
    finally:
        shutil.rmtree(layout.parent, ignore_errors=True)
