"""An image's ``WorkingDir``: where ``rollbox exec --image`` starts a command that brings no files (as ``docker run``
does), and never where a task's commands start (/workspace: the candidate's work and the task's files are there).
A WorkingDir the sandbox cannot start in (missing, reached through a symbolic link, under a mount of rollbox's own)
leaves the command in /workspace."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oci_images import Entry, host_files_layer, tar_layer, write_layout
from rollbox.judge import VerdictStatus, grade
from rollbox.sandbox.images import ImageStore
from rollbox.tasks import load_task

if os.geteuid() != 0:
    pytest.skip("images run in the namespaces backend, which needs root", allow_module_level=True)

#: The image's own directories: /srv/app (a WorkingDir to start in) and /srv/link, a link to it.
APP = tar_layer(
    [
        Entry("srv", "dir", mode=0o755),
        Entry("srv/app", "dir", mode=0o755),
        Entry("srv/app/marker", data=b"in the image's WorkingDir\n"),
        Entry("srv/link", "symlink", target="/srv/app"),
        Entry("tmp", "dir", mode=0o1777),
    ]
)


def layout(tmp_path: Path, working_dir: str) -> Path:
    name = working_dir.strip("/").replace("/", "-") or "root"
    return write_layout(
        tmp_path / "layouts" / name,
        [host_files_layer(commands=("sh", "cat", "pwd")), APP],
        config={"WorkingDir": working_dir},
        compress=False,
    )


def exec_json(tmp_path: Path, *args: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "rollbox", "exec", "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize(
    ("working_dir", "start"),
    [
        ("/srv/app", "/srv/app"),
        ("/srv/app/", "/srv/app"),
        ("/", "/"),
        ("/srv/missing", "/workspace"),
        ("/srv/link", "/workspace"),  # through a link: its target is not read on the host
        ("/srv/app/marker", "/workspace"),  # not a directory
        ("/tmp", "/workspace"),  # rollbox's own /tmp covers the image's
        ("/workspace", "/workspace"),
        ("srv/app", "/workspace"),  # not absolute
    ],
)
def test_exec_on_an_image_starts_in_its_working_dir_where_it_can(tmp_path: Path, working_dir: str, start: str) -> None:
    image = ImageStore().import_layout(layout(tmp_path, working_dir))
    assert image.working_directory() == (None if start == "/workspace" else start)
    ran = exec_json(tmp_path, "--image", str(layout(tmp_path, working_dir)), "--", "sh", "-c", "pwd")
    assert ran["stdout"] == f"{start}\n", ran


def test_exec_reads_the_working_dirs_files_by_relative_path(tmp_path: Path) -> None:
    ran = exec_json(tmp_path, "--image", str(layout(tmp_path, "/srv/app")), "--", "cat", "marker")
    assert ran["stdout"] == "in the image's WorkingDir\n", ran


def test_exec_with_files_starts_in_the_workspace_where_they_are(tmp_path: Path) -> None:
    (tmp_path / "input.txt").write_text("brought in\n")
    image = str(layout(tmp_path, "/srv/app"))
    ran = exec_json(
        tmp_path,
        "--image",
        image,
        "--file",
        f"{tmp_path / 'input.txt'}:input.txt",
        "--",
        "sh",
        "-c",
        "pwd; cat input.txt",
    )
    assert ran["stdout"] == "/workspace\nbrought in\n", ran


def test_a_tasks_commands_start_in_the_workspace_whatever_the_working_dir(tmp_path: Path) -> None:
    image = layout(tmp_path, "/srv/app")
    root = tmp_path / "task"
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "where.sh").write_text("pwd\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text('{"input": "", "output": "/workspace\\n"}\n')
    (root / "task.toml").write_text(
        'id = "where"\n[grading]\nrunner = "stdio"\ncommand = "sh where.sh"\n'
        f'[limits]\ntimeout = "10s"\n[environment]\nimage = "{image}"\n'
    )
    task = load_task(root)
    verdict = asyncio.run(grade(task, task.workspace))
    assert verdict.status is VerdictStatus.PASSED, verdict
