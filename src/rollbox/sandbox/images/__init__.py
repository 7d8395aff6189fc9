"""Images: OCI images as sandbox roots, imported once, verified, unpacked safely and shared.

    store = ImageStore()                                   # $ROLLBOX_HOME/images
    image = store.import_layout(Path("python-3.12"), ref="python:3.12")
    image = store.import_archive(Path("saved.tar"))        # docker save, or an OCI archive
    image = store.resolve("python:3.12")
    async with Sandbox(SandboxConfig(image=image)) as sb:  # / is the image's root, read-only
        await sb.exec(["python3", "--version"])

``_layout`` reads an OCI image layout (the manifest for this machine, verified); ``_archive`` makes docker-save and
OCI archives layouts; ``_unpack`` unpacks one layer's
blob safely, verifying its digests as it reads; ``_compose`` lays the layers into one root; ``_store`` keeps them
(``$ROLLBOX_HOME/images``: layers shared by images, roots shared by images of the same layers, gc); ``_registry``
pulls from a registry (``pull_image``: download, verify, import; ``pull``: an OCI layout only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._errors import ImageError
from ._image import Image, ImageConfig
from ._store import ImageStore

if TYPE_CHECKING:
    from ._registry import Credentials, PullProgress, PullResult, pull, pull_image

__all__ = [
    "Credentials",
    "Image",
    "ImageConfig",
    "ImageError",
    "ImageStore",
    "PullProgress",
    "PullResult",
    "pull",
    "pull_image",
]

#: Pulling's names, imported on first use: the HTTP client they need is no cost of every sandbox's import.
_PULLING = frozenset({"Credentials", "PullProgress", "PullResult", "pull", "pull_image"})


def __getattr__(name: str) -> Any:
    if name in _PULLING:
        from . import _registry

        return getattr(_registry, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
