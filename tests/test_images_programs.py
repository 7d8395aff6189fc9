"""A program the judge runs that the task's image does not have (the stdio task's command, the script runner's
bash) is the task's failure: ``infra_error`` naming the program and saying to add it, with no reward. The image is
asked on the host, never the run's output, so a candidate that prints the agent's words and exits 127 still
fails as itself. ``Image.has_program`` follows links as the sandbox would, inside the image only."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from oci_images import Entry, host_files_layer, tar_layer, write_layout
from rollbox.judge import VerdictStatus, grade
from rollbox.sandbox.images import ImageStore
from rollbox.tasks import Task, load_task

if os.geteuid() != 0:
    pytest.skip("images run in the namespaces backend, which needs root", allow_module_level=True)

#: Prints what the agent prints for a program it cannot find, and exits as it does.
IMPOSTOR = "echo 'rollbox: cannot execute python3: No such file or directory' >&2\nexit 127\n"


def shell_only(tmp_path: Path) -> str:
    """An image of the host's sh and cat only: no python3, no bash."""
    layout = write_layout(tmp_path / "sh-only", [host_files_layer(commands=("sh", "cat"))], compress=False)
    return str(layout)


def stdio_task(root: Path, image: str, command: str) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "solution.py").write_text("print(input())\n")
    (root / "workspace" / "solution.sh").write_text("cat\n")
    (root / "tests").mkdir()
    (root / "tests" / "cases.jsonl").write_text('{"input": "7\\n", "output": "7\\n"}\n')
    (root / "task.toml").write_text(
        f'id = "echo"\n[grading]\nrunner = "stdio"\ncommand = "{command}"\n'
        f'[limits]\ntimeout = "10s"\n[environment]\nimage = "{image}"\n'
    )
    return load_task(root)


def test_a_stdio_command_the_image_lacks_is_infra_error_saying_what_to_add(tmp_path: Path) -> None:
    task = stdio_task(tmp_path / "task", shell_only(tmp_path), "python3 solution.py")
    verdict = asyncio.run(grade(task, task.workspace))
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert verdict.error is not None and "has no 'python3' on its PATH" in verdict.error, verdict.error
    assert "add it to the image" in verdict.error and "\n" not in verdict.error


def test_a_candidate_that_exits_127_as_the_agent_would_fails_as_itself(tmp_path: Path) -> None:
    task = stdio_task(tmp_path / "task", shell_only(tmp_path), "sh solution.sh")
    good = asyncio.run(grade(task, task.workspace))
    assert good.status is VerdictStatus.PASSED, good
    (tmp_path / "candidate").mkdir()
    (tmp_path / "candidate" / "solution.sh").write_text(IMPOSTOR)
    (tmp_path / "candidate" / "solution.py").write_text("")
    verdict = asyncio.run(grade(task, tmp_path / "candidate"))
    assert verdict.status not in (VerdictStatus.PASSED, VerdictStatus.INFRA_ERROR), verdict
    assert verdict.reward == 0.0, verdict


#: For each runner, the program it runs that the shell-only image lacks, the task's files and its grading table.
LACKING = {
    "script": ("bash", {"tests/test.sh": 'echo 1 > "$ROLLBOX_REWARD_DIR/reward.txt"\n'}, 'runner = "script"\n'),
    "function": (
        "python3",
        {
            "workspace/solution.py": "def double(x):\n    return 2 * x\n",
            "tests/cases.jsonl": '{"args": [2], "kwargs": {}, "expected": 4}\n',
        },
        'runner = "function"\nmodule = "solution.py"\nentry_point = "double"\n',
    ),
}


@pytest.mark.parametrize("runner", sorted(LACKING))
def test_a_task_on_an_image_without_its_runners_program_is_infra_error(tmp_path: Path, runner: str) -> None:
    program, files, grading = LACKING[runner]
    root = tmp_path / "task"
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "task.toml").write_text(
        f'[grading]\n{grading}[limits]\ntimeout = "10s"\n[environment]\nimage = "{shell_only(tmp_path)}"\n'
    )
    task = load_task(root)
    verdict = asyncio.run(grade(task, task.workspace))
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
    assert verdict.error is not None and f"has no {program!r} on its PATH" in verdict.error, verdict.error


def test_has_program_follows_links_inside_the_image_only(tmp_path: Path) -> None:
    layer = tar_layer(
        [
            Entry("usr", "dir", mode=0o755),
            Entry("usr/bin", "dir", mode=0o755),
            Entry("usr/bin/tool", data=b"#!/bin/sh\n", mode=0o755),
            Entry("usr/bin/alias", "symlink", target="tool"),
            Entry("usr/bin/absolute", "symlink", target="/usr/bin/tool"),
            Entry("usr/bin/host-only", "symlink", target="/usr/bin/python3"),  # the host has it; the image not
            Entry("usr/bin/loop", "symlink", target="loop"),
            Entry("usr/bin/up", "symlink", target="../../../../usr/bin/tool"),
            Entry("usr/bin/adir", "dir", mode=0o755),
            Entry("bin", "symlink", target="usr/bin"),  # a merged /usr
        ]
    )
    image = ImageStore(tmp_path / "store").import_layout(write_layout(tmp_path / "layout", [layer]))
    for name in ("tool", "alias", "absolute", "up"):
        assert image.has_program(name, "/bin") is True, name
        assert image.has_program(name, "/usr/local/bin:/usr/bin") is True, name
    for name in ("host-only", "loop", "adir", "missing"):
        assert image.has_program(name, "/usr/local/bin:/bin") is False, name
    assert image.has_program("missing", "/opt/rollbox/env/bin:/usr/bin") is None  # the runtime layer may have it
    assert image.has_program("missing", "/usr/bin:/workspace/bin") is None
    assert image.has_program("missing", "bin") is None
    assert image.has_program("./tool", "/usr/bin") is None
