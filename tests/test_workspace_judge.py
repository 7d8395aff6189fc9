"""A repository-sized task graded as cheaply as a small one: the candidate's workspace read out of its sandbox as
changes only (``Sandbox.read_changes``), bounded by what it changed (not by the repository, here larger than the
task's disk limit), and graded in a sandbox that starts over the task's workspace (copy-on-write) with only those
changes laid in; with every integrity rule kept (protected files, visible tests, removals, sizes)."""

from __future__ import annotations

import asyncio
import shutil
import textwrap
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.sandbox import Limits, Sandbox, WorkspaceChanges
from rollbox.tasks import Task, load_task

pytestmark = pytest.mark.slow

BUGGY = "def add(a, b):\n    return a - b\n"
HIDDEN = textwrap.dedent("""
    from calc import add
    from lib.m0.f0 import X


    def test_add():
        assert add(2, 3) == 5


    def test_library_is_there():
        assert X == 0
""")
#: 300 modules of 16 KiB: 4.7 MiB in more than 300 entries, over the task's 2 MiB disk limit.
MODULES = {f"lib/m{i // 100}/f{i}.py": f"X = {i}\n" + "#" * 16_384 + "\n" for i in range(300)}


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    root = tmp_path_factory.mktemp("repo")
    files = {
        "calc.py": BUGGY,
        "test_calc_visible.py": "from calc import add\n\n\ndef test_visible():\n    assert add(1, 1) == 2\n",
        "lib/__init__.py": "",
        **{f"lib/m{i}/__init__.py": "" for i in range(3)},
        **MODULES,
    }
    for name, text in files.items():
        (root / "workspace" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "workspace" / name).write_text(text)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(HIDDEN)
    (root / "task.toml").write_text(
        f'[grading]\nrunner = "pytest"\n[limits]\ntimeout = "{30 * TIME_SCALE}s"\ncpu_time = "{20 * TIME_SCALE}s"\n'
        'disk = "2M"\n'
    )
    return load_task(root)


def episode(task: Task, tmp_path: Path, script: str) -> tuple[Verdict, WorkspaceChanges, str | None]:
    """Run ``script`` in a sandbox on the task's workspace, read its changes out, grade them."""

    async def main() -> tuple[Verdict, WorkspaceChanges, str | None]:
        async with Sandbox(limits=Limits(timeout_s=30 * TIME_SCALE), workspace=task.workspace) as sb:
            done = await sb.exec(["sh", "-c", script])
            assert done.ok, done
            changes = await sb.read_changes(tmp_path / "changes", max_bytes=task.limits.disk_bytes)
            return await grade(task, changes), changes, sb.workspace_mode

    return asyncio.run(main())


def test_a_one_line_fix_to_a_repository_larger_than_the_disk_limit_passes(task: Task, tmp_path: Path) -> None:
    verdict, changes, mode = episode(task, tmp_path, "sed -i 's/a - b/a + b/' calc.py")
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    if mode == "overlay":
        assert not changes.whole and changes.entries == 1  # calc.py alone came out of the sandbox
    untouched, _, _ = episode(task, tmp_path / "untouched", "true")
    assert untouched.status is VerdictStatus.FAILED, untouched


def test_a_removal_in_the_candidates_workspace_is_graded(task: Task, tmp_path: Path) -> None:
    """The grading sandbox starts with the whole repository; what the candidate removed is removed there too."""
    verdict, changes, mode = episode(task, tmp_path, "sed -i 's/a - b/a + b/' calc.py; rm -r lib/m0")
    # The hidden tests import lib.m0: without it they cannot even be collected (the fix alone passes, above).
    assert verdict.status is VerdictStatus.ERROR and verdict.reward == 0.0, verdict
    assert {t.outcome.value for t in verdict.tests} == {"missing"}, verdict
    if mode == "overlay":
        assert changes.deleted == ("lib/m0",)


def test_protected_changes_are_dropped_from_an_overlays_changes(task: Task, tmp_path: Path) -> None:
    """A conftest that passes everything, a deleted visible test and a sitecustomize: dropped, as for a directory."""
    hack = (
        "printf 'import pytest\\n@pytest.hookimpl(tryfirst=True)\\ndef pytest_runtest_call(item):\\n    return True\\n'"
        " > conftest.py; rm test_calc_visible.py; echo 'import os' > sitecustomize.py"
    )
    verdict, _, _ = episode(task, tmp_path, hack)
    assert verdict.status is VerdictStatus.FAILED, verdict
    dropped = {f["path"]: f["code"] for f in verdict.flags if f["code"].endswith("_dropped")}
    assert dropped == {
        "conftest.py": "protected_path_dropped",
        "sitecustomize.py": "protected_path_dropped",
        "test_calc_visible.py": "visible_test_edit_dropped",
    }, verdict.flags


def test_a_workspace_directory_is_bounded_by_its_changes_not_its_size(task: Task, tmp_path: Path) -> None:
    """The same repository given as a directory (``rollbox grade --solution DIR``): a one-line fix passes although
    the tree is over the disk limit; a large tree added to it is refused, the candidate's failure."""
    fixed = tmp_path / "fixed"
    shutil.copytree(task.workspace, fixed)
    (fixed / "calc.py").write_text(BUGGY.replace("a - b", "a + b"))
    verdict = asyncio.run(grade(task, fixed))
    assert verdict.status is VerdictStatus.PASSED, verdict
    for i in range(200):  # 3.2 MiB added: more than the 2 MiB the task's disk allows
        (fixed / "vendor" / f"blob{i}.bin").parent.mkdir(exist_ok=True)
        (fixed / "vendor" / f"blob{i}.bin").write_bytes(b"x" * 16_384)
    refused = asyncio.run(grade(task, fixed))
    assert refused.status is VerdictStatus.ERROR and refused.reward == 0.0, refused
    assert [f["code"] for f in refused.flags] == ["workspace_refused"], refused.flags
    assert "more than 2097152 bytes" in refused.flags[0]["detail"]


def test_repository_tests_are_laid_over_an_overlaid_workspace(tmp_path: Path) -> None:
    """SWE-bench's shape (``tests_in_workspace``): the hidden version of a visible test file replaces it in the
    grading sandbox over the repository, and the candidate's own edit of that file is dropped."""
    root = tmp_path / "swe"
    files = {"calc.py": BUGGY, "test_calc.py": "def test_nothing():\n    pass\n", **MODULES}
    for name, text in files.items():
        (root / "workspace" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "workspace" / name).write_text(text)
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    (root / "task.toml").write_text(
        '[grading]\nrunner = "pytest"\ntests_in_workspace = true\nfail_to_pass = ["test_calc.py::test_add"]\n'
        f'[limits]\ntimeout = "{30 * TIME_SCALE}s"\ncpu_time = "{20 * TIME_SCALE}s"\ndisk = "2M"\n'
    )
    task = load_task(root)
    fix = "sed -i 's/a - b/a + b/' calc.py"
    verdict, _, _ = episode(task, tmp_path / "fixed", fix)
    assert verdict.status is VerdictStatus.PASSED and [t.id for t in verdict.tests] == ["test_calc.py::test_add"]
    cheat, _, _ = episode(task, tmp_path / "cheat", "printf 'def test_add():\\n    pass\\n' > test_calc.py")
    assert cheat.status is VerdictStatus.FAILED, cheat
    assert {f["path"]: f["code"] for f in cheat.flags} == {"test_calc.py": "visible_test_edit_dropped"}
