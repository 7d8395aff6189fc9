"""Build an OCI image layout from a recipe, with mmdebstrap, reproducibly.

The same recipe gives the same image digest as long as the mirror serves the same packages: mmdebstrap runs under
``SOURCE_DATE_EPOCH`` (the recipe's ``epoch``), and its tarball is rewritten into one layer whose entries are sorted
by name, owned by uid/gid 0, with mtimes clamped to the epoch, without apt's caches and lists, logs, device nodes
(the sandbox brings its own /dev) or setuid/setgid bits; the layer is an uncompressed tar (nothing of a compressor's
clock or level in it), and the config and manifest are canonical JSON. Builds are cached by the recipe's digest under
``$ROLLBOX_HOME/builds`` (or the ``cache`` given), so a recipe is built once per machine::

    layout = build(load_recipe("python"))        # an OCI image layout directory
    image = ImageStore().import_layout(layout, ref="rollbox/python")
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from rollbox.sandbox.runtime._store import rollbox_home

from ._errors import ImageError
from ._image import Image
from ._recipe import BuildError, Recipe
from ._store import ImageStore

__all__ = ["build", "build_cache", "build_image", "image_ref"]

_TAR = "application/vnd.oci.image.layer.v1.tar"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_INDEX = "application/vnd.oci.image.index.v1+json"
#: Left out of the layer: what apt and dpkg keep of the build itself, not of the installed system.
_DROPPED_FILES = (
    "var/cache/apt/",
    "var/lib/apt/lists/",
    "var/log/",
    "var/cache/ldconfig/aux-cache",
    "var/lib/dpkg/lock",
    "var/lib/dpkg/triggers/Lock",
)
_DROPPED_SUFFIXES = ("-old",)  # debconf's and dpkg's backups of their databases
_ARCHITECTURES = {"amd64": "amd64", "arm64": "arm64", "armhf": "arm", "i386": "386", "ppc64el": "ppc64le"}


def build_cache() -> Path:
    """Where built layouts are kept, one directory per recipe digest: ``$ROLLBOX_HOME/builds``."""
    return rollbox_home() / "builds"


def build(recipe: Recipe, *, cache: Path | None = None, rebuild: bool = False) -> Path:
    """The OCI image layout of a recipe: from the cache, or built now (minutes, and network access to the mirror).

    Args:
        recipe: What to build.
        cache: Where layouts are kept (default :func:`build_cache`).
        rebuild: Build again even when the cache has this recipe (the old layout is replaced).

    Raises:
        BuildError: mmdebstrap is missing or failed (a package unknown to the suite, the mirror unreachable).
    """
    cache = cache or build_cache()
    layout = cache / recipe.digest.removeprefix("sha256:")
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / f".{layout.name}.lock"):
        if (layout / "index.json").is_file() and not rebuild:
            return layout
        work = Path(tempfile.mkdtemp(dir=cache, prefix=".build-"))
        try:
            staged = work / "layout"
            _build_layout(recipe, staged, work)
            if layout.exists():
                shutil.rmtree(layout)
            staged.rename(layout)
        finally:
            _remove_work(work)
    return layout


def _remove_work(work: Path) -> None:
    """Remove a build's scratch directory, unless something is still mounted below it: mmdebstrap mounts the
    host's /proc, /sys and /dev into its chroot and unmounts them itself, but if it was killed they stay, and
    removing the tree would then delete the host's own files through them."""
    prefix = str(work.resolve()) + "/"
    with open("/proc/self/mountinfo") as mounts:
        mounted = [line.split()[4] for line in mounts if line.split()[4].startswith(prefix)]
    if mounted:
        raise BuildError(
            f"a killed build left {len(mounted)} mounts under {work} (e.g. {mounted[0]}): unmount them "
            f"(umount -R {mounted[0]}) and remove {work}"
        )
    shutil.rmtree(work, ignore_errors=True)


def image_ref(recipe: Recipe) -> str:
    """The reference a recipe's image is known by in the store: ``rollbox/NAME:DIGEST12`` (the recipe's digest)."""
    return f"rollbox/{recipe.name}:{recipe.digest.removeprefix('sha256:')[:12]}"


def build_image(recipe: Recipe, store: ImageStore, *, cache: Path | None = None) -> Image:
    """The recipe's image in ``store``, as ``rollbox/NAME:DIGEST12`` (the recipe's digest): found there, or built
    (see :func:`build`) and imported.

    Raises:
        BuildError: as :func:`build`.
        ImageError: the built layout could not be imported.
    """
    ref = image_ref(recipe)
    try:
        return store.resolve(ref)
    except ImageError:
        return store.import_layout(build(recipe, cache=cache), ref=ref)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One build of a recipe at a time on this machine (others wait, then find it cached)."""
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build_layout(recipe: Recipe, layout: Path, work: Path) -> None:
    raw = work / "rootfs.tar"
    _debootstrap(recipe, raw)
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    layer = blobs / "layer.partial"
    with tarfile.open(raw) as source, open(layer, "wb") as out:
        digest = _normalized_layer(source, recipe, out)
    layer_size = layer.stat().st_size
    raw.unlink()
    layer.rename(blobs / digest.removeprefix("sha256:"))
    config = _write_blob(blobs, _config(recipe, digest))
    manifest = _write_blob(
        blobs,
        {
            "schemaVersion": 2,
            "mediaType": _MANIFEST,
            "config": {"mediaType": _CONFIG, "digest": config[0], "size": config[1]},
            "layers": [{"mediaType": _TAR, "digest": digest, "size": layer_size}],
        },
    )
    index = {
        "schemaVersion": 2,
        "mediaType": _INDEX,
        "manifests": [
            {
                "mediaType": _MANIFEST,
                "digest": manifest[0],
                "size": manifest[1],
                "annotations": {"org.opencontainers.image.ref.name": recipe.name},
            }
        ],
    }
    (layout / "index.json").write_bytes(_canonical(index))
    (layout / "oci-layout").write_bytes(_canonical({"imageLayoutVersion": "1.0.0"}))


def _debootstrap(recipe: Recipe, out: Path) -> None:
    """The recipe's system as mmdebstrap's tarball: the essential set plus the recipe's packages."""
    if shutil.which("mmdebstrap") is None:
        raise BuildError("mmdebstrap is not installed: run scripts/setup (or apt-get install mmdebstrap)")
    command = ["mmdebstrap", "--variant=essential", "--format=tar"]
    if recipe.packages:
        command.append("--include=" + ",".join(sorted(recipe.packages)))
    command += [recipe.suite, str(out), recipe.mirror]
    env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "LC_ALL": "C.UTF-8"}
    env |= {"SOURCE_DATE_EPOCH": str(recipe.epoch), "TMPDIR": str(out.parent), "HOME": str(out.parent)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        # apt's own complaint (an unknown package, an unreachable mirror) is the first error; mmdebstrap's follow.
        reason = next((line for line in lines if line.startswith("E:")), lines[-1])
        raise BuildError(
            f"mmdebstrap failed building recipe {recipe.name}: {reason.strip()} (check the packages with "
            f"`apt-cache policy PKG` and that {recipe.mirror} is reachable)"
        )


def _kept(name: str, member: tarfile.TarInfo) -> bool:
    if member.ischr() or member.isblk() or member.isfifo():
        return False
    if member.isdir():
        return True
    return not (name.startswith(_DROPPED_FILES) or name.endswith(_DROPPED_SUFFIXES))


def _normalized_layer(source: tarfile.TarFile, recipe: Recipe, out: IO[bytes]) -> str:
    """Write the layer (sorted, owned by 0, clamped mtimes, the recipe's files laid over) and return its digest."""
    packaged: dict[str, tarfile.TarInfo] = {}
    for member in source.getmembers():
        name = member.name.removeprefix("./").rstrip("/")
        if name and name != "." and _kept(name, member):
            packaged[name] = member
    added = {file.path.lstrip("/"): file for file in recipe.files}
    # A hard link's group (the packages' names of one file, less those a recipe's file replaces) is written as one
    # regular file, the first name in order, and links to it: sorting never puts a link before its target.
    groups: dict[str, set[str]] = {}
    for name, member in packaged.items():
        target = member.linkname.removeprefix("./").rstrip("/")
        if member.islnk() and name not in added and target in packaged:
            groups.setdefault(target, {target} - added.keys()).add(name)
    group_of = {name: target for target, group in groups.items() for name in group}
    first_of = {name: min(groups[target]) for name, target in group_of.items()}
    members = dict(packaged)
    for name, file in added.items():
        for parent in reversed(Path(name).parents[:-1]):
            members.setdefault(str(parent), _info(str(parent), tarfile.DIRTYPE, 0o755))
        members[name] = _info(name, tarfile.REGTYPE, file.mode)
    hasher = _Hasher(out)
    with tarfile.open(fileobj=hasher, mode="w|", format=tarfile.PAX_FORMAT) as layer:
        for name in sorted(members):
            member = members[name]
            info = _info(name, member.type, member.mode, min(int(member.mtime), recipe.epoch))
            data: IO[bytes] | None = None
            if name in added:
                content = added[name].content.encode()
                info.size, data = len(content), io.BytesIO(content)
            elif name in first_of and first_of[name] != name:
                info.type, info.linkname = tarfile.LNKTYPE, first_of[name]
            elif name in first_of:  # the group's one regular file, with the data of the file its links name
                origin = packaged[group_of[name]]
                info.type, info.size = tarfile.REGTYPE, origin.size
                data = source.extractfile(origin)
            elif member.isfile():
                info.size, data = member.size, source.extractfile(member)
            elif member.issym():
                info.linkname = member.linkname
            layer.addfile(info, data)
    return "sha256:" + hasher.sha256.hexdigest()


def _info(name: str, kind: bytes, mode: int, mtime: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = kind, mode & 0o1777, mtime
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


class _Hasher(io.RawIOBase):
    """A write-only file that hashes what passes through it."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.sha256 = out, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha256.update(data)
        self.out.write(data)
        return len(data)


def _config(recipe: Recipe, layer_digest: str) -> dict[str, object]:
    created = datetime.fromtimestamp(recipe.epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    dpkg = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False)
    architecture = _ARCHITECTURES.get(dpkg.stdout.strip(), dpkg.stdout.strip() or "amd64")
    return {
        "architecture": architecture,
        "os": "linux",
        "created": created,
        "config": {
            "Env": [f"{k}={v}" for k, v in recipe.env],
            "WorkingDir": recipe.working_dir,
            "Labels": {"org.rollbox.recipe": recipe.name, "org.rollbox.recipe.digest": recipe.digest},
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created": created, "created_by": f"rollbox images build {recipe.name} (mmdebstrap)"}],
    }


def _canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def _write_blob(blobs: Path, value: object) -> tuple[str, int]:
    data = _canonical(value)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    (blobs / digest.removeprefix("sha256:")).write_bytes(data)
    return digest, len(data)
