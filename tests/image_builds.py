"""Images the tests build from recipes, cached across test sessions.

A build costs minutes and needs the Debian mirror, so the tests keep what they build in a cache that outlives the
session (``ROLLBOX_TEST_BUILD_CACHE``, default ``/var/tmp/rollbox-test-builds``), keyed by the recipe's digest: a
changed recipe is a new key, never a stale image.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rollbox.sandbox.images._build import build
from rollbox.sandbox.images._recipe import Recipe

#: Where the tests' builds are kept between sessions.
BUILD_CACHE = Path(os.environ.get("ROLLBOX_TEST_BUILD_CACHE") or "/var/tmp/rollbox-test-builds")


def need_mmdebstrap() -> None:
    """Skip unless this machine can build images (``scripts/setup`` installs mmdebstrap)."""
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is not installed (scripts/setup installs it)")


def cached_build(recipe: Recipe) -> Path:
    """The recipe's layout, built once for every session."""
    need_mmdebstrap()
    return build(recipe, cache=BUILD_CACHE)


def unpack(layout: Path, tag: str, into: Path) -> Path:
    """The layout's root file system, unpacked by umoci (a tool of its own, not rollbox's store)."""
    if shutil.which("umoci") is None:
        pytest.skip("umoci is not installed (scripts/setup installs it)")
    bundle = into / "bundle"
    subprocess.run(
        ["umoci", "unpack", "--rootless", "--image", f"{layout}:{tag}", str(bundle)], check=True, capture_output=True
    )
    return bundle / "rootfs"


def run_in(root: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """A command run with ``root`` as its ``/`` (bubblewrap, no network), as a check on the layout alone."""
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap is not installed")
    wrap = ["bwrap", "--ro-bind", str(root), "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    wrap += ["--unshare-all", "--die-with-parent", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin"]
    return subprocess.run([*wrap, *command], capture_output=True, text=True, timeout=60, check=False)
