"""Where ``/run_code`` runs each language (the table itself: :mod:`rollbox.sandbox.images._languages`).

- ``host`` (the default): on the host's toolchains, inside the sandbox's read-only view of the host's ``/usr``:
  only the languages whose programs the host has and that need nothing of ``/etc`` (python, pytest, bash, c, cpp,
  nodejs). Python forks the sandbox's warm interpreter.
- ``recipes``: each language in the image built from its recipe, built and imported the first time it is asked
  for (minutes; then cached by the recipe's digest), so every language Debian packages runs.
- anything else names one image (a reference in the image store, or an OCI layout directory) that every language
  runs in, e.g. one built from all the recipes together.

A language that cannot run is listed by ``/v1/languages`` with the reason, and refused by ``/run_code``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox.images import Image, ImageError, ImageStore
from rollbox.sandbox.images._build import build_image, image_ref
from rollbox.sandbox.images._languages import LANGUAGES, Language
from rollbox.sandbox.images._recipe import load_recipe

from ._guard import Refused

__all__ = ["Languages", "Runnable"]

_HOST, _RECIPES = "host", "recipes"
_log = logging.getLogger("uvicorn.error")


@dataclass(frozen=True)
class Runnable:
    """A language as the service runs it: the table's entry, and the image it runs in (None: the host's)."""

    language: Language
    image: Image | None


class Languages:
    """The languages this service runs, and the image each runs in.

    Args:
        images: ``host``, ``recipes``, or an image (see the module's docstring).
        store: The image store images are imported into and resolved from.
    """

    def __init__(self, images: str = _HOST, store: ImageStore | None = None) -> None:
        self.images = images
        self._store = store
        self._cache: dict[str, Image] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def reason(self, language: Language) -> str | None:
        """Why ``language`` cannot run on this service, or None when it can."""
        if not language.available:
            return language.missing
        if self.images == _HOST:
            lacking = [p for p in language.host if shutil.which(p) is None]
            if not language.host or lacking:
                return "it runs in an image here: start the service with --language-images recipes (or an image)"
        elif self.images == _RECIPES and shutil.which("mmdebstrap") is None and language.recipe not in self._cache:
            return "its image is not built and mmdebstrap is not installed (scripts/setup installs it)"
        return None

    def names(self) -> list[str]:
        """The languages ``/run_code`` runs here."""
        return sorted(name for name, lang in LANGUAGES.items() if self.reason(lang) is None)

    def listing(self) -> list[dict[str, object]]:
        """Every language of the table: whether it runs here, in which image, its commands, or why not."""
        rows: list[dict[str, object]] = []
        for name in sorted(LANGUAGES, key=str.lower):
            lang = LANGUAGES[name]
            reason = self.reason(lang)
            image = None if self.images == _HOST else lang.recipe if self.images == _RECIPES else self.images
            rows.append(
                {
                    "name": name,
                    "available": reason is None,
                    "reason": reason,
                    "image": image if lang.available else None,
                    "source": lang.source,
                    "compile": list(lang.compile) if lang.compile else None,
                    "run": list(lang.run),
                }
            )
        return rows

    async def get(self, name: str) -> Runnable:
        """The language ``name`` and its image, built and imported on first use.

        Raises:
            Refused: 400, a language this service does not run (the message says why, and what runs).
            ImageError: its image could not be built, imported or found (the service's fault, not the caller's).
        """
        language = LANGUAGES.get(name)
        reason = self.reason(language) if language is not None else "no such language"
        if language is None or reason is not None:
            raise Refused(400, f"language {name!r} does not run on this server ({reason}); it runs: {self.names()}")
        if self.images == _HOST:
            return Runnable(language, None)
        key = language.recipe if self.images == _RECIPES else self.images
        assert key is not None
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            if key not in self._cache:
                self._cache[key] = await asyncio.to_thread(self._image, key)
        return Runnable(language, self._cache[key])

    def _image(self, key: str) -> Image:
        store = self._store or ImageStore()
        if self.images != _RECIPES:
            path = Path(key)
            return store.import_layout(path) if (path / "index.json").is_file() else store.resolve(key)
        recipe = load_recipe(key)
        try:
            return store.resolve(image_ref(recipe))
        except ImageError:
            pass
        # Minutes, while the request that asked waits: say so where the operator looks, and how to spare it.
        _log.warning(
            "building the image of recipe %s for /run_code (its first request waits; minutes): "
            "'rollbox images build %s' builds it before the service starts",
            key,
            key,
        )
        started = time.monotonic()
        try:
            image = build_image(recipe, store)
        except ImageError as exc:
            _log.error("the image of recipe %s could not be built: %s", key, exc)
            raise
        _log.warning("built the image of recipe %s (%s) in %.0f s", key, image.short, time.monotonic() - started)
        return image
