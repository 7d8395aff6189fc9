"""``rollbox exec --image``: a command on an image's root, from a layout directory, a store reference or a recipe;
a language's recipe raises the limits to its toolchain's; a name that is no image is a one-line usage error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from image_builds import cached_build
from rollbox.sandbox.images._build import build_cache
from rollbox.sandbox.images._recipe import load_recipe

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="images run in the namespaces backend, which needs root")


def _exec(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "rollbox", "exec", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_a_command_runs_on_a_layouts_root_and_then_by_its_digest() -> None:
    layout = cached_build(load_recipe(EXAMPLES / "operations" / "images" / "ops-nginx.toml"))
    ran = _exec("--json", "--image", str(layout), "--", "sh", "-c", "nginx -v 2>&1; test -e /work || echo no-host")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["status"] == "ok" and "nginx version: nginx/1.22" in result["stdout"], result
    assert result["stdout"].endswith("no-host\n")  # the host's files are not there
    digest = json.loads((layout / "index.json").read_text())["manifests"][0]["digest"]
    by_ref = _exec("--json", "--image", digest, "--", "curl", "--version")  # imported now: in the store
    assert by_ref.returncode == 0 and json.loads(by_ref.stdout)["stdout"].startswith("curl 7.88"), by_ref.stderr


@pytest.mark.slow
def test_a_language_recipe_raises_the_limits_to_its_toolchains() -> None:
    recipe = load_recipe("lua")
    layout = cached_build(recipe)
    # The command builds into ROLLBOX_HOME/builds (the session's): give it the tests' build of the same digest.
    (build_cache() / layout.name).parent.mkdir(parents=True, exist_ok=True)
    (build_cache() / layout.name).symlink_to(layout)
    forks = ["--", "sh", "-c", "for i in $(seq 20); do sleep 0.5 & done; wait; echo done"]
    plain = json.loads(_exec("--json", "--pids", "8", "--image", str(layout), *forks).stdout)
    assert plain["status"] == "pids_limit", plain
    raised = json.loads(_exec("--json", "--pids", "8", "--image", "recipe:lua", *forks).stdout)
    assert raised["status"] == "ok" and raised["stdout"] == "done\n", raised  # lua's recipe: 64 pids


def test_a_name_that_is_no_image_is_a_one_line_usage_error() -> None:
    missing = _exec("--image", "no-such-image:1", "--", "true")
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "no image 'no-such-image:1'" in missing.stderr
    unknown = _exec("--image", "recipe:cobol", "--", "true")
    assert unknown.returncode == 2 and "no recipe named 'cobol'" in unknown.stderr
