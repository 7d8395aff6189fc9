"""``/run_code`` in ``recipes`` mode: a language whose image is not in the store yet is built on its first request,
which waits minutes: the service says so in its log (and how to build it before), and says nothing of a build
when ``rollbox images build`` made the image beforehand."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from image_builds import cached_build, need_mmdebstrap
from rollbox.sandbox.images import ImageError, ImageStore
from rollbox.sandbox.images._build import image_ref
from rollbox.sandbox.images._recipe import load_recipe
from rollbox.server._languages import Languages

if os.geteuid() != 0:
    pytest.skip("images run in the namespaces backend, which needs root", allow_module_level=True)


def building(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "recipe" in r.getMessage()]


def test_a_build_on_the_first_request_is_logged_with_how_to_prebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    need_mmdebstrap()
    monkeypatch.setenv("ROLLBOX_DEBIAN_MIRROR", "http://127.0.0.1:9/debian")  # fails at once, after the log line
    caplog.set_level(logging.WARNING, logger="uvicorn.error")
    with pytest.raises(ImageError, match="mmdebstrap failed building recipe lua"):
        asyncio.run(Languages("recipes", ImageStore(tmp_path / "store")).get("lua"))
    said = building(caplog)
    assert len(said) == 2, said
    assert "building the image of recipe lua for /run_code" in said[0], said
    assert "'rollbox images build lua' builds it before the service starts" in said[0], said
    assert said[1].startswith("the image of recipe lua could not be built: mmdebstrap failed"), said


def test_an_image_built_beforehand_is_used_without_a_build(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    recipe = load_recipe("python")
    store = ImageStore(tmp_path / "store")
    # What 'rollbox images build python' leaves in the store (the build itself from the tests' cache).
    image = store.import_layout(cached_build(recipe), ref=image_ref(recipe))
    caplog.set_level(logging.WARNING, logger="uvicorn.error")
    runnable = asyncio.run(Languages("recipes", store).get("python"))
    assert runnable.image == image
    assert building(caplog) == []
