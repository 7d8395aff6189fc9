"""The candidate's workspace: which changes grading applies, which it drops, and the tree it builds from them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollbox.judge.integrity._workspace import (
    Changes,
    Flag,
    WorkspaceError,
    build_grading_tree,
    diff_workspace,
    is_protected,
    removals,
    stage_changes,
)
from rollbox.sandbox import RollboxError, WorkspaceChanges

PRISTINE = {
    "mod.py": "def f():\n    return 1\n",
    "mypkg/__init__.py": "",
    "mypkg/core.py": "X = 1\n",
    "queue.py": "# the task's own stdlib-named module\n",
    "test_visible.py": "def test_f():\n    assert True\n",
    "conftest.py": "# the task's conftest\n",
    "pyproject.toml": "[project]\nname = 'x'\n\n[tool.pytest.ini_options]\naddopts = '-q'\n",
    "docs/readme.md": "hello\n",
}


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every file and link under ``root``: ("file", text) or ("link", target)."""
    found: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_file():
                found[rel] = ("file", path.read_text())
    return found


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    """A pristine workspace and a candidate that starts as an exact copy of it."""
    pristine, candidate = tmp_path / "pristine", tmp_path / "candidate"
    write(pristine, PRISTINE)
    write(candidate, PRISTINE)
    return pristine, candidate


def codes(changes: Changes) -> dict[str, str]:
    return {f.path: f.code for f in changes.flags}


def test_untouched_candidate_has_no_changes(trees: tuple[Path, Path]) -> None:
    assert diff_workspace(*trees) == Changes((), (), (), (), (), {})


def test_identical_content_and_mode_only_change_are_not_modifications(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "mod.py").write_text(PRISTINE["mod.py"])
    (candidate / "mod.py").chmod(0o755)
    assert diff_workspace(pristine, candidate).modified == ()


@pytest.mark.parametrize(
    ("path", "text"),
    [
        ("conftest.py", "import os\n"),
        ("sub/dir/conftest.py", ""),
        ("pytest.ini", "[pytest]\n"),
        ("tox.ini", "[pytest]\n"),
        ("setup.cfg", "[tool:pytest]\n"),
        (".pytest.ini", "[pytest]\n"),
        ("sub/pytest.ini", "[pytest]\n"),
        ("sitecustomize.py", ""),
        ("lib/usercustomize.py", ""),
        ("evil.pth", "import os\n"),
        ("os.py", ""),
        ("re.py", ""),
        ("json/__init__.py", ""),
        ("unittest/__init__.py", ""),
        ("pytest.py", ""),
        ("_pytest/__init__.py", ""),
        ("pluggy.py", ""),
        ("py.py", ""),
        ("src/re.py", ""),  # src/ has no __init__.py: it may be on sys.path
        ("mypkg/sub/os.py", ""),  # mypkg/sub/ has no __init__.py
        ("tests/helper.py", ""),
        ("tests/data/expected.json", "{}"),
        ("checks.py", ""),
    ],
)
def test_protected_additions_are_dropped_and_flagged(trees: tuple[Path, Path], path: str, text: str) -> None:
    pristine, candidate = trees
    write(candidate, {path: text})
    changes = diff_workspace(pristine, candidate, protected=["tests/", "checks.py"])
    assert path not in changes.added
    assert path in changes.dropped
    assert codes(changes) == {path: "protected_path_dropped"}


@pytest.mark.parametrize(
    "path",
    [
        "conftest_helpers.py",
        "mypkg/conftest_notes.txt",
        "pytest.ini.bak",
        "docs/setup.cfg.txt",
        "notes.pth.txt",
        "site_helpers.py",
        "mypkg/json.py",  # mypkg.json, not json
        "mypkg/os/__init__.py",  # mypkg.os
        "data/json/x.json",  # a data directory without __init__.py shadows nothing
        "osutils.py",
        "pytest_plugins_notes.md",
        "tests_extra/x.py",  # not under tests/
        "notes_test.txt",
        "testing.py",
        "contest.py",
    ],
)
def test_near_misses_are_applied(trees: tuple[Path, Path], path: str) -> None:
    pristine, candidate = trees
    write(candidate, {path: "x = 1\n"})
    changes = diff_workspace(pristine, candidate, protected=["tests/", "checks.py"])
    assert changes.added == (path,)
    assert changes.flags == ()
    assert changes.dropped == ()


def test_pyproject_dropped_only_when_it_configures_pytest(tmp_path: Path) -> None:
    pristine, candidate = tmp_path / "p", tmp_path / "c"
    write(pristine, {"a.py": ""})
    write(candidate, {"a.py": "", "pyproject.toml": "[project]\nname = 'x'\n[tool.ruff]\nline-length = 100\n"})
    assert diff_workspace(pristine, candidate).added == ("pyproject.toml",)
    (candidate / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-p no:cacheprovider'\n")
    changes = diff_workspace(pristine, candidate)
    assert changes.added == ()
    assert codes(changes) == {"pyproject.toml": "protected_path_dropped"}
    # Not TOML; nested deeper than the parser goes; an integer too long to convert.
    for text in ("[tool.pytest\nthis is not toml", "x = " + "[" * 5000 + "]" * 5000, "x = " + "1" * 5000):
        (candidate / "pyproject.toml").write_text(text)
        assert "could not be parsed" in diff_workspace(pristine, candidate).flags[0].detail


def test_pyproject_edit_cannot_remove_the_pristine_pytest_section(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    changes = diff_workspace(pristine, candidate)
    assert changes.modified == ()
    assert changes.dropped == ("pyproject.toml",)
    (candidate / "pyproject.toml").unlink()
    assert diff_workspace(pristine, candidate).deleted == ()


def test_stdlib_named_module_the_task_ships_may_be_edited(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "queue.py").write_text("# solved\n")
    assert diff_workspace(pristine, candidate).modified == ("queue.py",)


def test_agent_tests_are_dropped(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    write(candidate, {"test_mine.py": "", "mypkg/core_test.py": "", "tests/test_more.py": ""})
    changes = diff_workspace(pristine, candidate, protected=["tests/"])
    assert changes.added == ()
    assert changes.dropped == ("mypkg/core_test.py", "test_mine.py", "tests/test_more.py")
    assert set(codes(changes).values()) == {"agent_test_dropped"}


def test_visible_test_edits_and_deletions_are_refused(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "test_visible.py").write_text("def test_f():\n    pass\n")
    changes = diff_workspace(pristine, candidate)
    assert changes.modified == ()
    assert codes(changes) == {"test_visible.py": "visible_test_edit_dropped"}
    (candidate / "test_visible.py").unlink()
    changes = diff_workspace(pristine, candidate)
    assert changes.deleted == ()
    assert codes(changes) == {"test_visible.py": "visible_test_edit_dropped"}
    build_grading_tree(pristine, candidate, tmp_path / "dest", changes)
    assert (tmp_path / "dest" / "test_visible.py").read_text() == PRISTINE["test_visible.py"]


def test_deletions_are_applied_but_not_of_protected_files(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "docs/readme.md").unlink()
    (candidate / "conftest.py").unlink()
    changes = diff_workspace(pristine, candidate)
    assert changes.deleted == ("docs/readme.md",)
    assert changes.dropped == ("conftest.py",)
    assert codes(changes) == {"conftest.py": "protected_path_dropped"}


def test_symlinks_out_of_the_workspace_are_dropped(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "secret.txt").symlink_to("/etc/passwd")
    (candidate / "up.txt").symlink_to("../../../../etc/passwd")
    (candidate / "chain.txt").symlink_to("secret.txt")  # inside, but the chain leads out
    (candidate / "etc").symlink_to("/etc")
    (candidate / "mod.py").unlink()
    (candidate / "mod.py").symlink_to("/etc/hostname")  # replaces a pristine file: the pristine one stays
    (candidate / "alias.py").symlink_to("mypkg/core.py")  # stays inside: carried as a link
    changes = diff_workspace(pristine, candidate)
    assert changes.added == ("alias.py",)
    assert changes.modified == ()
    assert codes(changes) == dict.fromkeys(
        ["chain.txt", "etc", "mod.py", "secret.txt", "up.txt"], "unsafe_symlink_dropped"
    )
    dest = tmp_path / "dest"
    build_grading_tree(pristine, candidate, dest, changes)
    assert snapshot(dest) == {**snapshot(pristine), "alias.py": ("link", "mypkg/core.py")}


def test_symlink_named_like_a_stdlib_package_is_dropped(trees: tuple[Path, Path]) -> None:
    candidate = trees[1]
    (candidate / "json").symlink_to("mypkg")
    assert codes(diff_workspace(*trees)) == {"json": "protected_path_dropped"}


def test_fifo_is_skipped_without_blocking(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    os.mkfifo(candidate / "pipe.py")
    (candidate / "mod.py").unlink()
    os.mkfifo(candidate / "mod.py")  # in place of a pristine file: the pristine one stays
    changes = diff_workspace(pristine, candidate)
    assert changes.added == changes.modified == changes.deleted == ()
    assert codes(changes) == {"pipe.py": "special_file_skipped", "mod.py": "special_file_skipped"}
    build_grading_tree(pristine, candidate, tmp_path / "dest", changes)
    assert snapshot(tmp_path / "dest") == snapshot(pristine)


def test_caches_and_git_are_ignored(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    write(candidate, {"__pycache__/mod.cpython-311.pyc": "x", "mypkg/stale.pyc": "x", ".git/HEAD": "ref"})
    (candidate / "mypkg/__pycache__").symlink_to("/etc")
    assert diff_workspace(pristine, candidate) == Changes((), (), (), (), (), {})


def test_too_many_files_raises(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    write(candidate, {f"gen/{i}.txt": "" for i in range(50)})
    with pytest.raises(WorkspaceError, match="more than 20 files and directories") as info:
        diff_workspace(pristine, candidate, max_files=20)
    assert isinstance(info.value, RollboxError)


def test_oversized_file_raises(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "big.bin").write_bytes(b"x" * 101)
    with pytest.raises(WorkspaceError, match=r"'big.bin' .* is 101 bytes, over the 100-byte limit"):
        diff_workspace(pristine, candidate, max_file_bytes=100)


def test_grading_tree_is_pristine_plus_changes(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    write(
        candidate,
        {
            "mod.py": "def f():\n    return 2\n",  # modified
            "new/deep/helper.py": "Y = 2\n",  # added, new directories
            "conftest.py": "# hacked\n",  # protected: dropped
            "test_mine.py": "",  # agent test: dropped
            "weird\nname \udcff.txt": "odd names are just names\n",
        },
    )
    (candidate / "docs/readme.md").unlink()
    (candidate / "docs").rmdir()
    write(candidate, {"docs": "a file where a directory was\n"})
    (candidate / "mypkg/core.py").unlink()
    write(candidate, {"mypkg/core.py/inner.py": "Z = 3\n"})  # a directory where a file was
    (candidate / "run.sh").write_text("#!/bin/sh\n")
    (candidate / "run.sh").chmod(0o755)
    changes = diff_workspace(pristine, candidate)
    assert changes.added == ("docs", "mypkg/core.py/inner.py", "new/deep/helper.py", "run.sh", "weird\nname \udcff.txt")
    assert changes.modified == ("mod.py",)
    assert changes.deleted == ("docs/readme.md", "mypkg/core.py")
    assert changes.dropped == ("conftest.py", "test_mine.py")
    dest = tmp_path / "dest"
    build_grading_tree(pristine, candidate, dest, changes)
    expected = snapshot(pristine)
    for rel in changes.deleted:
        del expected[rel]
    for rel in (*changes.added, *changes.modified):
        expected[rel] = ("file", (candidate / rel).read_text())
    assert snapshot(dest) == expected
    assert not (dest / "docs").is_dir()
    assert os.access(dest / "run.sh", os.X_OK)
    assert not os.access(dest / "mod.py", os.X_OK)


def test_protected_file_replaced_by_a_directory_keeps_the_file(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    (candidate / "conftest.py").unlink()
    write(candidate, {"conftest.py/x.py": "", "ok.py": ""})
    changes = diff_workspace(pristine, candidate)
    assert changes.added == ("ok.py",)
    assert codes(changes) == {"conftest.py": "protected_path_dropped", "conftest.py/x.py": "path_conflict_dropped"}
    build_grading_tree(pristine, candidate, tmp_path / "dest", changes)
    assert (tmp_path / "dest/conftest.py").read_text() == PRISTINE["conftest.py"]


def test_a_path_too_long_for_the_host_is_refused_as_files_and_as_a_directory(trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    deep = "/".join(["d" * 200] * 16) + "/x.py"  # 3,221 bytes: fits this directory, not every grading tree's
    write(candidate, {deep: ""})
    for given in ({deep: b""}, candidate):
        with pytest.raises(WorkspaceError, match="too long for a path"):
            diff_workspace(pristine, given)


def test_build_refuses_a_candidate_changed_since_the_diff(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    write(candidate, {"new.py": "x = 1\n"})
    changes = diff_workspace(pristine, candidate)
    (candidate / "new.py").unlink()
    (candidate / "new.py").symlink_to("/etc/passwd")
    with pytest.raises(WorkspaceError, match="link out of it"):
        build_grading_tree(pristine, candidate, tmp_path / "dest", changes)


def test_build_refuses_a_parent_swapped_for_a_link(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    write(candidate, {"sub/new.py": "x = 1\n"})
    changes = diff_workspace(pristine, candidate)
    (candidate / "sub/new.py").unlink()
    (candidate / "sub").rmdir()
    outside = tmp_path / "outside"
    write(outside, {"new.py": "stolen\n"})
    (candidate / "sub").symlink_to(outside)
    with pytest.raises(WorkspaceError, match="in the candidate workspace"):
        build_grading_tree(pristine, candidate, tmp_path / "dest", changes)


def test_a_file_grown_after_the_diff_is_refused_not_copied(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    # Whatever can still write the candidate's directory after the diff (a sandbox it came from, say) must not get
    # more into the grading tree than the diff approved: a sparse file would otherwise fill the host's memory.
    pristine, candidate = trees
    write(candidate, {"big.py": "x = 1\n"})
    changes = diff_workspace(pristine, candidate, max_file_bytes=1 << 20)
    os.truncate(candidate / "big.py", 64 << 20)
    with pytest.raises(WorkspaceError, match="grew since the diff"):
        build_grading_tree(pristine, candidate, tmp_path / "dest", changes)
    assert not (tmp_path / "dest" / "big.py").exists() or (tmp_path / "dest" / "big.py").stat().st_size <= 6


def test_build_needs_an_empty_destination_and_clean_paths(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    pristine, candidate = trees
    write(tmp_path / "dest", {"left.txt": ""})
    with pytest.raises(WorkspaceError, match="must be an empty directory"):
        build_grading_tree(pristine, candidate, tmp_path / "dest", Changes((), (), (), (), (), {}))
    with pytest.raises(WorkspaceError, match="not a clean workspace-relative path"):
        build_grading_tree(pristine, candidate, tmp_path / "d2", Changes(("../escape.py",), (), (), (), (), {}))


def test_is_protected_rules() -> None:
    assert is_protected("mypkg/json.py", packages={"mypkg"}) is None
    assert is_protected("mypkg/json.py") is not None  # without the tree, every directory may be on sys.path
    assert is_protected("json.py", packages={""}) is not None  # the root is always on sys.path
    assert is_protected("pyproject.toml") is not None  # cannot tell without the content
    assert is_protected("pyproject.toml", content=b"[tool.black]\n") is None
    assert is_protected("tests", extra=["tests/"]) is not None
    assert "test file" in (is_protected("a/test_x.py") or "")
    assert Flag("c", "p", "d").to_json() == {"code": "c", "path": "p", "detail": "d"}


EDITS = {
    "a modification": {"mod.py": "def f():\n    return 2\n"},
    "an addition in new directories": {"new/deep/helper.py": "Y = 2\n", "mypkg/extra.py": "E = 1\n"},
    "the same content": {"mod.py": PRISTINE["mod.py"]},
    "protected additions": {"conftest.py": "# hacked\n", "test_mine.py": "", "sitecustomize.py": "", "json.py": ""},
    "a visible test edited": {"test_visible.py": "def test_f():\n    assert False\n"},
    "pytest configured by pyproject": {"pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p evil'\n"},
    "the task's own stdlib-named module": {"queue.py": "# edited\n"},
    "a module inside a package": {"mypkg/json.py": "J = 1\n"},
}


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("guard", [True, False])
def test_files_diff_and_build_exactly_as_the_workspace_they_stand_for(
    tmp_path: Path, trees: tuple[Path, Path], edit: str, guard: bool
) -> None:
    """A candidate given as files is the pristine workspace with them written over it: the same changes, flags and
    grading tree as that workspace given as a directory."""
    pristine, candidate = trees
    files = EDITS[edit]
    write(candidate, files)
    as_files = diff_workspace(pristine, {p: t.encode() for p, t in files.items()}, guard=guard)
    as_directory = diff_workspace(pristine, candidate, guard=guard)
    assert as_files == as_directory
    build_grading_tree(pristine, {p: t.encode() for p, t in files.items()}, tmp_path / "from-files", as_files)
    build_grading_tree(pristine, candidate, tmp_path / "from-directory", as_directory)
    assert snapshot(tmp_path / "from-files") == snapshot(tmp_path / "from-directory")


@pytest.mark.parametrize(
    ("files", "error"),
    [
        ({"/etc/passwd": b""}, "not a clean workspace-relative path"),
        ({"../escape.py": b""}, "not a clean workspace-relative path"),
        ({"a/./b.py": b""}, "not a clean workspace-relative path"),
        ({"": b""}, "not a clean workspace-relative path"),
        ({"nul\0.py": b""}, "not a clean workspace-relative path"),
        ({"x" * 256 + ".py": b""}, "too long for a path"),
        ({"/".join(["deep"] * 700) + "/x.py": b""}, "too long for a path"),
        ({"\ud800.py": b""}, "cannot be a file name"),
        ({"docs": b"a file where the task has a directory"}, "'docs' is a directory of the task's workspace"),
        ({"mod.py/inner.py": b""}, "'mod.py/inner.py' needs 'mod.py' to be a directory"),
        ({"x": b"", "x/y.py": b""}, "'x/y.py' needs 'x' to be a directory"),
        ({"big.bin": b"x" * 101}, "'big.bin' of the candidate is 101 bytes, over the 100-byte limit"),
        ({f"{i}.py": b"" for i in range(21)}, "the candidate gave 21 files, more than 20"),
        (
            {"a.bin": b"x" * 90, "b.bin": b"x" * 90, "c.bin": b"x" * 90},
            "hold 270 bytes, more than 250, the task's disk",
        ),
    ],
)
def test_files_that_describe_no_workspace_or_pass_a_limit_are_refused(
    trees: tuple[Path, Path], files: dict[str, bytes], error: str
) -> None:
    pristine, _ = trees
    with pytest.raises(WorkspaceError, match=error):
        diff_workspace(pristine, files, max_file_bytes=100, max_files=20, max_total_bytes=250)


def test_the_bounds_hold_the_changes_not_a_workspace_larger_than_them(tmp_path: Path) -> None:
    """A repository over the disk limit and the file count, with one line changed, is graded like a small one."""
    pristine, candidate = tmp_path / "pristine", tmp_path / "candidate"
    big = {f"src/m{i}.py": f"X = {i}\n" + "#" * 100 for i in range(60)}
    write(pristine, big)
    write(candidate, {**big, "src/m7.py": "X = 'seven'\n" + "#" * 100})
    changes = diff_workspace(pristine, candidate, max_files=5, max_total_bytes=500)
    assert changes.modified == ("src/m7.py",) and not changes.added and not changes.deleted


@pytest.mark.parametrize(
    ("grow", "error"),
    [
        ({f"gen/{i}/f.txt": "" for i in range(20)}, "adds more than 20 files and directories"),  # a huge added tree
        ({f"gen/{i}.bin": "x" * 50 for i in range(8)}, "adds or changes more than 250 bytes"),
        ({"src/m1.py": "x" * 300}, "adds or changes more than 250 bytes"),  # an existing file grown
        ({f"src/m{i}.py": "Y" * 100 for i in range(3)}, "changed files hold 300 bytes, more than 250"),  # same sizes
    ],
)
def test_what_the_candidate_adds_or_grows_is_still_bounded(tmp_path: Path, grow: dict[str, str], error: str) -> None:
    pristine, candidate = tmp_path / "pristine", tmp_path / "candidate"
    big = {f"src/m{i}.py": "X" * 100 for i in range(60)}  # 6,000 bytes and 61 entries: over both bounds already
    write(pristine, big)
    write(candidate, {**big, **grow})
    with pytest.raises(WorkspaceError, match=error):
        diff_workspace(pristine, candidate, max_files=20, max_total_bytes=250)
    changed = tmp_path / "changed"
    write(changed, grow)
    with pytest.raises(WorkspaceError, match=r"more than (20 files|250)"):  # every byte it wrote counts
        diff_workspace(
            pristine, WorkspaceChanges(changed, (), whole=False, entries=0), max_files=20, max_total_bytes=250
        )


def as_changes(tmp_path: Path, pristine: Path, candidate: Path) -> WorkspaceChanges:
    """``candidate`` as an overlay over ``pristine`` records it: its files that differ (or are new), and what is
    gone (a directory of the pristine that is now a file, or missing, is deleted whole)."""
    root = tmp_path / "upper"
    root.mkdir()
    theirs, ours = snapshot(candidate), snapshot(pristine)
    for rel, (kind, value) in theirs.items():
        if ours.get(rel) == (kind, value) or (kind == "file" and (candidate / rel).is_dir()):
            continue
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        if kind == "link":
            (root / rel).symlink_to(value)
        elif (candidate / rel).is_file():
            (root / rel).write_bytes((candidate / rel).read_bytes())
            (root / rel).chmod((candidate / rel).stat().st_mode)
    every = [str(p.relative_to(pristine)) for p in sorted(pristine.rglob("*"))]
    deleted = [
        rel
        for rel in every
        if not os.path.lexists(candidate / rel) or (pristine / rel).is_dir() != (candidate / rel).is_dir()
    ]
    deleted = [d for d in deleted if not any(d.startswith(e + "/") for e in deleted)]
    return WorkspaceChanges(root, tuple(deleted), whole=False, entries=0)


def test_an_overlays_changes_diff_and_build_exactly_as_the_workspace_they_stand_for(
    tmp_path: Path, trees: tuple[Path, Path]
) -> None:
    """The same edits as test_grading_tree_is_pristine_plus_changes, given as what an overlay records: the same
    changes, flags and grading tree; and staged alone, with ``removals``, they make that tree over the pristine."""
    pristine, candidate = trees
    write(
        candidate, {"mod.py": "def f():\n    return 2\n", "new/deep/helper.py": "Y = 2\n", "conftest.py": "# hacked\n"}
    )
    write(candidate, {"test_mine.py": "", "test_visible.py": "def test_f():\n    assert False\n"})
    (candidate / "docs/readme.md").unlink()
    (candidate / "docs").rmdir()
    write(candidate, {"docs": "a file where a directory was\n"})
    (candidate / "mypkg/core.py").unlink()
    write(candidate, {"mypkg/core.py/inner.py": "Z = 3\n"})
    (candidate / "queue.py").unlink()
    (candidate / "link").symlink_to("mod.py")
    (candidate / "out").symlink_to("/etc/passwd")
    overlay = as_changes(tmp_path, pristine, candidate)
    assert "mypkg/core.py" in overlay.deleted and "docs" in overlay.deleted and "queue.py" in overlay.deleted
    for guard in (True, False):
        assert diff_workspace(pristine, overlay, guard=guard) == diff_workspace(pristine, candidate, guard=guard)
    changes = diff_workspace(pristine, overlay)
    assert changes.deleted == ("docs/readme.md", "mypkg/core.py", "queue.py")
    build_grading_tree(pristine, overlay, tmp_path / "from-overlay", changes)
    build_grading_tree(pristine, candidate, tmp_path / "from-directory", changes)
    assert snapshot(tmp_path / "from-overlay") == snapshot(tmp_path / "from-directory")
    # Staged: only the changes, laid over the pristine tree after its removals.
    stage_changes(overlay, tmp_path / "staged", changes)
    assert set(snapshot(tmp_path / "staged")) <= {*changes.added, *changes.modified, "mypkg", "new", "new/deep"}
    laid = tmp_path / "laid"
    build_grading_tree(pristine, pristine, laid, Changes((), (), (), (), (), {}))
    for rel in removals(pristine, changes):
        (laid / rel).unlink() if not (laid / rel).is_dir() else __import__("shutil").rmtree(laid / rel)
    for rel in (*changes.added, *changes.modified):
        (laid / rel).parent.mkdir(parents=True, exist_ok=True)
        (laid / rel).unlink(missing_ok=True)
        if (tmp_path / "staged" / rel).is_symlink():
            (laid / rel).symlink_to(os.readlink(tmp_path / "staged" / rel))
        else:
            (laid / rel).write_bytes((tmp_path / "staged" / rel).read_bytes())
    assert snapshot(laid) == snapshot(tmp_path / "from-directory")


def test_an_overlay_cannot_delete_or_replace_what_is_protected(tmp_path: Path, trees: tuple[Path, Path]) -> None:
    """Removals an overlay records are refused where the path is protected: a deleted directory of visible tests
    and configuration keeps them; a file over a protected path is dropped."""
    pristine, _ = trees
    write(pristine, {"tests/test_a.py": "def test_a():\n    assert True\n", "tests/conftest.py": "# task's\n"})
    root = tmp_path / "upper"
    write(root, {"tests": "now a file\n", "conftest.py/evil.py": ""})
    overlay = WorkspaceChanges(
        root, ("conftest.py", "pyproject.toml", "tests", "test_visible.py"), whole=False, entries=0
    )
    changes = diff_workspace(pristine, overlay, protected=["tests/"])
    assert changes.deleted == ()
    assert set(changes.dropped) == {
        "conftest.py",
        "conftest.py/evil.py",
        "pyproject.toml",
        "test_visible.py",
        "tests",
        "tests/conftest.py",
        "tests/test_a.py",
    }
    with pytest.raises(WorkspaceError, match="not a clean workspace-relative path"):
        diff_workspace(pristine, WorkspaceChanges(root, ("../x",), whole=False, entries=0))


def test_removals_remove_emptied_directories_whole(trees: tuple[Path, Path]) -> None:
    pristine, _ = trees
    write(pristine, {"a/b/c.py": "", "a/b/d.py": "", "a/e.py": "", "k/keep.py": "", "k/gone.py": ""})
    changes = Changes((), (), ("a/b/c.py", "a/b/d.py", "a/e.py", "k/gone.py"), (), (), {})
    assert removals(pristine, changes) == ("a", "k/gone.py")
    refill = Changes(("a/new.py",), (), ("a/b/c.py", "a/b/d.py", "a/e.py"), (), (), {"a/new.py": 0})
    assert removals(pristine, refill) == ("a/b", "a/e.py")


@pytest.mark.parametrize("edit", EDITS)
@pytest.mark.parametrize("guard", [True, False])
def test_an_overlays_changes_diff_as_the_directory_for_every_edit(
    tmp_path: Path, trees: tuple[Path, Path], edit: str, guard: bool
) -> None:
    """Over an overlay the diff reads only the changes and what they touch of the pristine workspace (its
    packages looked up as needed): the same changes and flags as the whole directory."""
    pristine, candidate = trees
    write(candidate, EDITS[edit])
    overlay = as_changes(tmp_path, pristine, candidate)
    assert diff_workspace(pristine, overlay, guard=guard) == diff_workspace(pristine, candidate, guard=guard)


def test_an_overlays_changes_never_lead_the_diff_through_a_pristine_link(tmp_path: Path) -> None:
    """A task's workspace may hold a link out of it; changes under its path (the link removed, a directory made
    there) are the candidate's new files, never compared with what the link points to on the host."""
    pristine, outside = tmp_path / "pristine", tmp_path / "outside"
    write(outside, {"secret.txt": "host data\n"})
    write(pristine, {"mod.py": ""})
    (pristine / "lnk").symlink_to(outside)
    upper = tmp_path / "upper"
    write(upper, {"lnk/secret.txt": "host data\n"})
    changes = diff_workspace(pristine, WorkspaceChanges(upper, ("lnk",), whole=False, entries=0))
    assert (changes.added, changes.modified, changes.deleted) == (("lnk/secret.txt",), (), ("lnk",))
    without_removal = diff_workspace(pristine, WorkspaceChanges(upper, (), whole=False, entries=0))
    assert without_removal.added == ("lnk/secret.txt",) and without_removal.modified == ()
