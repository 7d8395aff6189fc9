"""Image references as registries and Docker read them: ``[HOST[:PORT]/]NAME[:TAG][@sha256:HEX]``.

A reference without a host is Docker Hub's (``docker.io``, served at ``registry-1.docker.io``), and a one-part
name there is an official image's (``library/NAME``); a reference without a tag or digest means ``:latest``.
The first part of the name is a host when it has a dot or a port, or is ``localhost``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ._errors import ImageError

__all__ = ["Reference", "parse_reference"]

_DOCKER_HUB = "docker.io"
_DOCKER_HUB_API = "registry-1.docker.io"
_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?|\[[0-9a-fA-F:]+\](?::[0-9]{1,5})?")


@dataclass(frozen=True)
class Reference:
    """A parsed image reference.

    Attributes:
        registry: The registry's host as written (``docker.io`` when none was), with its port.
        repository: The repository (``library/alpine`` for Docker Hub's ``alpine``).
        tag: The tag (``latest`` when neither a tag nor a digest was given), or None for a digest alone.
        digest: The manifest's digest (``sha256:...``) when the reference pins one.
    """

    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def api_host(self) -> str:
        """The host the registry's API is served at (Docker Hub's differs from its name)."""
        return _DOCKER_HUB_API if self.registry == _DOCKER_HUB else self.registry

    @property
    def target(self) -> str:
        """What the manifest is asked for by: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        name = f"{self.registry}/{self.repository}"
        return name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")


def parse_reference(text: str) -> Reference:
    """``text`` as a :class:`Reference`.

    Raises:
        ImageError: not a reference (the offending text, and the form it should take).
    """
    rest, digest = text, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        if not _DIGEST.fullmatch(digest):
            raise ImageError(f"image reference {text!r}: the digest must be sha256: and 64 hex digits")
    registry = _DOCKER_HUB
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        if not _HOST.fullmatch(first):
            raise ImageError(f"image reference {text!r}: {first!r} is not a registry host (HOST[:PORT])")
        registry, rest = first, remainder
    if registry in ("index.docker.io", "registry-1.docker.io"):
        registry = _DOCKER_HUB
    tag = None
    name, colon, maybe_tag = rest.rpartition(":")
    if colon and "/" not in maybe_tag:
        rest, tag = name, maybe_tag
        if not _TAG.fullmatch(tag):
            raise ImageError(f"image reference {text!r}: {tag!r} is not a tag (letters, digits, '_', '.', '-')")
    if not rest or not all(_COMPONENT.fullmatch(part) for part in rest.split("/")):
        raise ImageError(
            f"image reference {text!r}: the name must be lowercase letters, digits and separators, "
            "as in NAME:TAG, HOST:PORT/NAME:TAG or NAME@sha256:HEX"
        )
    if registry == _DOCKER_HUB and "/" not in rest:
        rest = f"library/{rest}"
    if tag is None and digest is None:
        tag = "latest"
    return Reference(registry=registry, repository=rest, tag=tag, digest=digest)
