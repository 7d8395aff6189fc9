"""``rollbox images``, run as a real process against a real registry on 127.0.0.1: pull then run a command on the
image's root, import, list, inspect, rm, gc, credentials on stdin, and one line for every kind of bad input."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet
import pytest

from oci_images import ARCH, Entry, host_files_layer, oci_archive, tar_layer, write_layout
from registry_server import PASSWORD, USER, Registry, free_port, registry

pytestmark = pytest.mark.timeout(600)

OS_RELEASE = 'PRETTY_NAME="rollbox pull test image"\nID=rollbox-test\n'


def rollbox(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROLLBOX_REGISTRY_")}
    env |= {"ROLLBOX_HOME": str(home), "DOCKER_CONFIG": str(home / "no-docker-config")}
    return subprocess.run(
        [sys.executable, "-m", "rollbox", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    with registry(tmp_path_factory.mktemp("open-registry")) as running:
        yield running


def os_image(path: Path) -> Path:
    """An image of the host's sh and cat (with their libraries) and an /etc/os-release of its own."""
    release = tar_layer([Entry("etc", "dir", mode=0o755), Entry("etc/os-release", data=OS_RELEASE.encode())])
    return write_layout(path, [host_files_layer(commands=("sh", "cat")), release], ref="1")


def test_a_pulled_image_is_what_rollbox_exec_runs_on(open_registry: Registry, tmp_path: Path) -> None:
    open_registry.push(os_image(tmp_path / "src"), "tests/os:1")
    ref = f"{open_registry.host}/tests/os:1"
    pulled = rollbox(tmp_path / "home", "images", "pull", ref, "--json")
    assert pulled.returncode == 0, pulled.stderr
    image = json.loads(pulled.stdout)
    assert image["refs"] == [ref] and image["platform"] == f"linux/{ARCH}"
    ran = rollbox(tmp_path / "home", "exec", "--json", "--image", ref, "--", "cat", "/etc/os-release")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["stdout"] == OS_RELEASE  # the image's, not the host's
    # The download area keeps nothing of an imported pull.
    downloads = tmp_path / "home/images/downloads"
    assert [p for p in downloads.rglob("*") if p.is_file() and p.name != ".pull.lock"] == []


def test_import_list_inspect_rm_and_gc(tmp_path: Path) -> None:
    home = tmp_path / "home"
    layout = write_layout(tmp_path / "layout", [tar_layer([Entry("hello", data=b"hi")])],
                          config={"Env": ["A=1"], "WorkingDir": "/srv", "Cmd": ["sh"]})  # fmt: skip
    imported = rollbox(home, "images", "import", str(layout), "--ref", "tests/dir:1", "--json")
    assert imported.returncode == 0, imported.stderr
    digest = json.loads(imported.stdout)["digest"]
    archive = oci_archive(write_layout(tmp_path / "other", [tar_layer([Entry("x", data=b"x")])]), tmp_path / "a.tar")
    text = rollbox(home, "images", "import", str(archive), "--ref", "tests/tar:2")
    assert text.returncode == 0 and text.stdout.startswith("imported sha256:") and "tests/tar:2" in text.stdout
    listed = [json.loads(line) for line in rollbox(home, "images", "list", "--json").stdout.splitlines()]
    assert sorted(ref for image in listed for ref in image["refs"]) == ["tests/dir:1", "tests/tar:2"]
    table = rollbox(home, "images", "list").stdout
    assert table.startswith("DIGEST") and digest.removeprefix("sha256:")[:12] in table
    inspected = json.loads(rollbox(home, "images", "inspect", "tests/dir:1", "--json").stdout)
    assert inspected["digest"] == digest
    assert inspected["config"] | {"user": None} == {
        "env": ["A=1"], "working_dir": "/srv", "user": None, "entrypoint": [], "cmd": ["sh"]
    }  # fmt: skip
    assert "working_dir: /srv" in rollbox(home, "images", "inspect", digest[:19]).stdout
    assert rollbox(home, "images", "rm", "tests/dir:1").returncode == 0
    freed = json.loads(rollbox(home, "images", "gc", "--json").stdout)["freed_bytes"]
    assert freed > 0 and not any("tests/dir:1" in line for line in rollbox(home, "images", "list").stdout.splitlines())


def test_credentials_are_read_from_stdin(tmp_path: Path) -> None:
    layout = write_layout(tmp_path / "src", [tar_layer([Entry("secret", data=b"s")])], ref="1")
    with registry(tmp_path / "registry", auth=True) as private:
        private.push(layout, "team/private:1")
        ref = f"{private.host}/team/private:1"
        refused = rollbox(tmp_path / "home", "images", "pull", ref)
        assert refused.returncode == 1 and "give credentials" in refused.stderr
        pulled = rollbox(tmp_path / "home", "images", "pull", ref, "--username", USER, "--password-stdin",
                         stdin=PASSWORD + "\n")  # fmt: skip
        assert pulled.returncode == 0, pulled.stderr
        assert pulled.stdout.startswith("pulled sha256:") and ref in pulled.stdout


BAD_INPUT = [
    (["pull", "Not A Reference"], 1, "image reference 'Not A Reference': the name must be lowercase"),
    (["pull", "127.0.0.1:{CLOSED}/x:1"], 1, "cannot be reached"),
    (["pull", "{REGISTRY}/tests/none:1"], 1, "the registry has no manifest 1 in tests/none (check the name and tag)"),
    (["pull", "x:1", "--password-stdin"], 2, "--password-stdin needs --username"),
    (["pull", "x:1", "--username", "u"], 2, "with --password-stdin"),
    (["import", "{MISSING}"], 1, "is not a file: give a docker-save or OCI archive"),
    (["import", "{FILE}"], 1, ""),
    (["import", "{DIR}"], 1, ""),
    (["inspect", "nothing:here"], 1, "nothing:here"),
    (["rm", "nothing:here"], 1, "nothing:here"),
    (["build", "no-such-recipe"], 1, "no recipe named 'no-such-recipe'"),
    (["list", "--bogus"], 2, "unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD_INPUT, ids=[" ".join(a) for a, _, _ in BAD_INPUT])
def test_bad_input_is_one_line_that_says_what_to_do(
    args: list[str], code: int, message: str, open_registry: Registry, tmp_path: Path
) -> None:
    (tmp_path / "file").write_text("not an image\n")
    (tmp_path / "dir").mkdir()
    places = {"CLOSED": str(free_port()), "REGISTRY": open_registry.host, "MISSING": str(tmp_path / "missing"),
              "FILE": str(tmp_path / "file"), "DIR": str(tmp_path / "dir")}  # fmt: skip
    done = rollbox(tmp_path / "home", "images", *[arg.format(**places) for arg in args])
    assert done.returncode == code, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith("rollbox images") and message.format(**places) in done.stderr, done.stderr


def test_a_pull_on_a_terminal_shows_a_progress_bar(open_registry: Registry, tmp_path: Path) -> None:
    layout = write_layout(tmp_path / "src", [tar_layer([Entry("data", data=os.urandom(3 << 20))])], ref="1")
    open_registry.push(layout, "tests/bar:1")
    controller, terminal = pty.openpty()
    env = {**os.environ, "ROLLBOX_HOME": str(tmp_path / "home"), "DOCKER_CONFIG": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "rollbox", "images", "pull", f"{open_registry.host}/tests/bar:1"],
                          stderr=terminal, stdout=subprocess.PIPE, env=env, timeout=300, check=False)  # fmt: skip
    os.close(terminal)
    shown = b""
    with contextlib.suppress(OSError):
        while chunk := os.read(controller, 65536):
            shown += chunk
    os.close(controller)
    assert done.returncode == 0
    assert re.search(rb"pulling 127\.0\.0\.1:\d+/tests/bar:1 \[#{30}\] 3\.\dM/3\.\dM", shown), shown
    assert b"downloaded" in shown


def test_a_task_on_a_pulled_image_is_graded_on_it(open_registry: Registry, tmp_path: Path) -> None:
    """The issue's end to end: an image pulled from a registry on loopback, named by a task, grades the task."""
    layout = write_layout(tmp_path / "src", [host_files_layer()], config={"Env": ["IMAGE_VARIABLE=pulled"]},
                          compress=False, ref="1")  # fmt: skip
    open_registry.push(layout, "tests/python:1")
    ref = f"{open_registry.host}/tests/python:1"
    home = tmp_path / "home"
    pulled = rollbox(home, "images", "pull", ref, "--json")
    assert pulled.returncode == 0, pulled.stderr
    task = tmp_path / "task"
    (task / "tests").mkdir(parents=True)
    (task / "workspace").mkdir()
    (task / "tests" / "cases.jsonl").write_text('{"input": "1 2\\n", "output": "3\\n"}\n')
    (task / "task.toml").write_text(
        f'id = "sum"\n[grading]\nrunner = "stdio"\ncommand = "python3 solution.py"\n[environment]\nimage = "{ref}"\n'
    )
    (tmp_path / "solution").mkdir()
    (tmp_path / "solution" / "solution.py").write_text(
        "import os, sys\n"
        "assert os.environ['IMAGE_VARIABLE'] == 'pulled'\n"
        "print(sum(int(x) for x in sys.stdin.read().split()))\n"
    )
    graded = rollbox(home, "grade", str(task), "--solution", str(tmp_path / "solution"), "--json")
    assert graded.stdout.strip(), graded.stderr
    verdict = json.loads(graded.stdout)
    assert verdict["status"] == "passed", graded.stdout + graded.stderr
    assert verdict["image"] == json.loads(pulled.stdout)["digest"]
    # And an episode on it: the reference policy writes the solution through the tools, runs, submits; judged.
    shutil.copytree(tmp_path / "solution", task / "solution")
    ran = rollbox(home, "run", str(task), "--policy", "reference", "--run-id", "pulled", "--workers", "1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (episode,) = pyarrow.parquet.read_table(home / "runs" / "pulled" / "episodes.parquet").to_pylist()
    assert (episode["status"], episode["reward"]) == ("passed", 1.0), episode
