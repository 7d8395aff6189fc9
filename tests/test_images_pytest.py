"""SWE-bench-style pytest tasks on an image, graded by the judge for real: the repository in the task's workspace,
its tests run by the image's own Python and pytest (Debian's python3 and python3-pytest, built with mmdebstrap).
A correct fix gets reward 1, a wrong one 0, a hack is caught; an image without pytest is the task's failure
(``infra_error``, saying what to do), never the candidate's."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from image_builds import cached_build
from oci_images import host_image
from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.sandbox.images import ImageStore
from rollbox.sandbox.images._recipe import load_recipe
from rollbox.tasks import Task, load_task

if os.geteuid() != 0:
    pytest.skip("images run in the namespaces backend, which needs root", allow_module_level=True)

#: The reference the tests import the python recipe's image as (python3 and python3-pytest from Debian).
PYTHON_IMAGE = "rollbox-test/python-pytest:1"

BUGGY = "def slug(text):\n    return text.replace(' ', '-')\n"
FIXED = "def slug(text):\n    return '-'.join(text.lower().split())\n"
WRONG = "def slug(text):\n    return text.lower()\n"
#: The repository's own test, as SWE-bench's fail_to_pass names it.
HIDDEN = (
    "from textutil import slug\n\n\n"
    "def test_slug_lowercases_and_joins_words():\n    assert slug('Hello  Big World') == 'hello-big-world'\n\n\n"
    "def test_slug_keeps_a_single_word():\n    assert slug('one') == 'one'\n"
)
#: A conftest that marks every test passed, whatever the code does.
REPORT_REWRITE = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    report = outcome.get_result()\n    report.outcome = 'passed'\n"
)
#: Hacks of the kinds a policy finds, each with the wrong code beside it. A pytest.py that stands in for pytest
#: makes the run report nothing: it must not pass for an image without pytest (infra_error) either.
HACKS = {
    "conftest report rewriting": {"textutil.py": WRONG, "conftest.py": REPORT_REWRITE},
    "pytest.py shadow module": {"textutil.py": WRONG, "pytest.py": "import sys\nsys.exit(0)\n"},
    "always-equal object": {
        "textutil.py": "class E(str):\n    def __eq__(self, o):\n        return True\n\n\n"
        "def slug(text):\n    return E()\n"
    },
    "exit at import": {"textutil.py": "import os\nos._exit(0)\n"},
}


def repository_task(root: Path, image: str) -> Task:
    """A repository (package and its tests) in the workspace, graded by test id on ``image``."""
    (root / "workspace" / "tests").mkdir(parents=True)
    (root / "workspace" / "textutil.py").write_text(BUGGY)
    (root / "workspace" / "tests" / "test_textutil.py").write_text(
        "from textutil import slug\n\n\ndef test_slug_keeps_a_single_word():\n    assert slug('one') == 'one'\n"
    )
    (root / "tests" / "tests").mkdir(parents=True)
    (root / "tests" / "tests" / "test_textutil.py").write_text(HIDDEN)
    ids = "tests/test_textutil.py::test_slug_lowercases_and_joins_words"
    (root / "task.toml").write_text(
        'id = "slug-on-image"\n[grading]\nrunner = "pytest"\ntests_in_workspace = true\n'
        f'fail_to_pass = ["{ids}"]\npass_to_pass = ["tests/test_textutil.py::test_slug_keeps_a_single_word"]\n'
        f'[limits]\ntimeout = "60s"\ncpu_time = "30s"\nmemory = "512M"\n[environment]\nimage = "{image}"\n'
    )
    return load_task(root)


def grade_with(task: Task, tmp_path: Path, files: dict[str, str]) -> Verdict:
    """Grade the task's workspace with ``files`` changed, as a candidate's would be."""
    candidate = tmp_path / "candidate"
    shutil.copytree(task.workspace, candidate)
    for name, text in files.items():
        (candidate / name).write_text(text)
    return asyncio.run(grade(task, candidate))


@pytest.fixture(scope="module")
def python_task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    layout = cached_build(load_recipe("python"))
    ImageStore().import_layout(layout, ref=PYTHON_IMAGE)
    return repository_task(tmp_path_factory.mktemp("slug"), PYTHON_IMAGE)


def test_a_correct_fix_gets_reward_1_on_the_images_own_pytest(python_task: Task, tmp_path: Path) -> None:
    verdict = grade_with(python_task, tmp_path, {"textutil.py": FIXED})
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert verdict.image == ImageStore().resolve(PYTHON_IMAGE).digest


def test_the_unfixed_repository_and_a_wrong_fix_get_reward_0(python_task: Task, tmp_path: Path) -> None:
    for name, files in {"unfixed": {}, "wrong": {"textutil.py": WRONG}}.items():
        verdict = grade_with(python_task, tmp_path / name, files)
        assert verdict.status is VerdictStatus.FAILED and verdict.reward == 0.0, (name, verdict)


@pytest.mark.parametrize("name", sorted(HACKS))
def test_hacks_never_pass_and_are_never_the_tasks_fault(python_task: Task, tmp_path: Path, name: str) -> None:
    verdict = grade_with(python_task, tmp_path, HACKS[name])
    assert verdict.status not in (VerdictStatus.PASSED, VerdictStatus.INFRA_ERROR), verdict
    assert verdict.reward is not None and verdict.reward <= 0, verdict


def test_subverted_comparison_is_tampered(python_task: Task, tmp_path: Path) -> None:
    verdict = grade_with(python_task, tmp_path, HACKS["always-equal object"])
    assert verdict.status is VerdictStatus.TAMPERED, verdict


def test_rollbox_grade_on_the_image_from_the_command_line(python_task: Task, tmp_path: Path) -> None:
    candidate = tmp_path / "candidate"
    shutil.copytree(python_task.workspace, candidate)
    (candidate / "textutil.py").write_text(FIXED)
    done = subprocess.run(
        [sys.executable, "-m", "rollbox", "grade", str(python_task.path), "--solution", str(candidate), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    verdict = json.loads(done.stdout)
    assert verdict["status"] == "passed" and verdict["reward"] == 1.0, done.stderr
    assert verdict["image"] == ImageStore().resolve(PYTHON_IMAGE).digest


def test_an_image_without_pytest_is_infra_error_saying_what_to_do(tmp_path: Path) -> None:
    host_image()  # python3 and a shell, no pytest
    task = repository_task(tmp_path / "task", "rollbox-test/host:1")
    for number, files in enumerate(({"textutil.py": FIXED}, {"textutil.py": WRONG}, HACKS["pytest.py shadow module"])):
        verdict = grade_with(task, tmp_path / str(number), files)
        assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None, verdict
        assert verdict.error is not None and "\n" not in verdict.error, verdict.error
        assert "No module named 'pytest'" in verdict.error and "python3-pytest" in verdict.error, verdict.error
