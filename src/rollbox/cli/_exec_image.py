"""``rollbox exec --image``: the image a command runs on, from what the option says.

``--image`` takes a reference or digest in the image store (``rollbox images list``), an OCI image layout
directory, or ``recipe:NAME`` for a shipped recipe (``recipe:java``) or a recipe file (``recipe:./mine.toml``),
built the first time (minutes) and then found in the store. A language's recipe raises the limits to what its
toolchain needs (a JVM's threads and heap; see ``GET /v1/languages``).
"""

from __future__ import annotations

from pathlib import Path

from rollbox.sandbox import Limits
from rollbox.sandbox.images import Image, ImageStore
from rollbox.sandbox.images._build import build_image
from rollbox.sandbox.images._languages import LANGUAGES
from rollbox.sandbox.images._recipe import load_recipe

__all__ = ["image_for_exec"]


def image_for_exec(spec: str, limits: Limits) -> tuple[Image, Limits]:
    """The image ``spec`` names, and ``limits`` raised for a language's recipe.

    Raises:
        ImageError: no such image, or it could not be built or imported (``BuildError`` is one).
    """
    store = ImageStore()
    if spec.startswith("recipe:"):
        recipe = load_recipe(spec.removeprefix("recipe:"))
        for language in LANGUAGES.values():
            if language.recipe == recipe.name:
                limits = language.limits(limits)
        return build_image(recipe, store), limits
    path = Path(spec)
    if (path / "index.json").is_file():
        return store.import_layout(path), limits
    return store.resolve(spec), limits
