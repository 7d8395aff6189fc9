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
(``$ROLLBOX_HOME/images``: layers shared by images, roots shared by images of the same layers, gc).
"""

from ._errors import ImageError
from ._image import Image, ImageConfig
from ._store import ImageStore

__all__ = ["Image", "ImageConfig", "ImageError", "ImageStore"]
