"""Source distributions from the package index: fetched on the host (only bytes, nothing of them runs here),
checked against the index's digest, kept under ``$ROLLBOX_HOME/sdists``, and unpacked safely."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from rollbox.sandbox.runtime import rollbox_home

__all__ = ["Sdist", "SynthError", "fetch_sdist", "unpack_sdist"]

INDEX = os.environ.get("ROLLBOX_PYPI_JSON", "https://pypi.org/pypi")


class SynthError(Exception):
    """A package cannot be made into tasks; the message says why and what to do."""


@dataclass(frozen=True)
class Sdist:
    """A downloaded source distribution."""

    name: str
    version: str
    archive: Path


def _get(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data: bytes = response.read()
            return data
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise SynthError(f"cannot fetch {url}: {exc}; check the network, or the package's name") from None


def fetch_sdist(spec: str, *, cache: Path | None = None) -> Sdist:
    """The sdist of ``spec`` (``name`` for the latest release, or ``name==version``), downloaded once.

    Raises:
        SynthError: the index does not know the package or version, it has no sdist, or the download does not
            match the index's digest.
    """
    name, _, version = spec.partition("==")
    url = f"{INDEX}/{name}/json"
    try:
        info = json.loads(_get(url))
    except ValueError:
        raise SynthError(f"the index's answer for {name!r} is not JSON") from None
    files = info.get("urls", [])
    if version and info.get("info", {}).get("version") != version:
        # The project's page lists every release's files (some mirrors serve no per-version page).
        if version not in info.get("releases", {}):
            known = ", ".join(list(info.get("releases", {}))[-5:])
            raise SynthError(f"{name} has no release {version} on the index (the latest: {known})")
        files = info["releases"][version]
        info["info"]["version"] = version
    sdists = [u for u in files if u.get("packagetype") == "sdist"]
    if not sdists:
        raise SynthError(f"{spec} has no source distribution on the index; pick another release or package")
    chosen = sdists[0]
    directory = cache or rollbox_home() / "sdists"
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / PurePosixPath(chosen["filename"]).name
    expected = chosen.get("digests", {}).get("sha256")
    if not archive.is_file() or hashlib.sha256(archive.read_bytes()).hexdigest() != expected:
        data = _get(urllib.parse.urljoin(url, chosen["url"]))  # a mirror may answer with a relative URL
        if expected and hashlib.sha256(data).hexdigest() != expected:
            raise SynthError(f"{chosen['url']} does not match the index's sha256 {expected}; try again")
        fd, temporary = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(temporary, archive)
    return Sdist(info["info"]["name"], info["info"]["version"], archive)


def unpack_sdist(sdist: Sdist, dest: Path) -> Path:
    """Unpack ``sdist`` into ``dest`` (nothing outside it, no links, no devices) and return its top directory.

    Raises:
        SynthError: the archive is of an unknown kind, or holds something unsafe.
    """
    dest.mkdir(parents=True, exist_ok=True)
    name = sdist.archive.name
    if name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
        with tarfile.open(sdist.archive) as archive:
            members = [m for m in archive.getmembers() if m.isfile() or m.isdir()]
            for member in members:
                if member.name.startswith("/") or ".." in PurePosixPath(member.name).parts:
                    raise SynthError(f"{name} holds an unsafe path {member.name!r}")
            archive.extractall(dest, members=members, filter="data")
    elif name.endswith(".zip"):
        with zipfile.ZipFile(sdist.archive) as archive:
            for info in archive.infolist():
                if info.filename.startswith("/") or ".." in PurePosixPath(info.filename).parts:
                    raise SynthError(f"{name} holds an unsafe path {info.filename!r}")
            archive.extractall(dest)
    else:
        raise SynthError(f"{name}: an sdist of an unknown kind (expected .tar.gz or .zip)")
    tops = [p for p in dest.iterdir()]
    if len(tops) != 1 or not tops[0].is_dir():
        root = dest / "package"
        root.mkdir()
        for top in tops:
            shutil.move(str(top), root / top.name)
        return root
    return tops[0]
