"""``Sandbox.read_changes``: on a copy-on-write workspace, only what the program changed comes out (files made or
changed, and what it removed, from the overlay's whiteouts and opaque directories), never following a link and
within its bounds; elsewhere the whole workspace, said so. ``Sandbox.remove``: a file, a link or a directory,
never through a link."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from rollbox.sandbox import Limits, Sandbox, TreeTooLarge, WorkspaceChanges

LIMITS = Limits(timeout_s=30 * TIME_SCALE, cpu_time_s=15 * TIME_SCALE)


def _files(root: Path) -> dict[str, str]:
    """Every file and link under ``root``: its text, or ``-> target``."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[relative] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[relative] = path.read_text()
    return found


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    for i in range(200):  # a workspace of some size: none of it comes out unless changed
        (root / "lib" / f"m{i // 50}").mkdir(parents=True, exist_ok=True)
        (root / "lib" / f"m{i // 50}" / f"f{i}.py").write_text(f"X = {i}\n")
    (root / "gone").mkdir()
    (root / "gone" / "a.txt").write_text("a\n")
    (root / "emptied").mkdir()
    (root / "emptied" / "old.txt").write_text("old\n")
    (root / "file_then_dir").write_text("a file\n")
    (root / "main.py").write_text("print('hi')\n")
    return root


_EDIT = (
    "set -e; echo 'print(42)' > main.py; echo new > lib/m0/new.py; rm lib/m1/f50.py; rm -r gone;"
    " rm -r emptied; mkdir emptied; echo fresh > emptied/new.txt; rm file_then_dir; mkdir file_then_dir;"
    " echo in > file_then_dir/x; ln -s /etc/passwd out; touch lib/m2/f100.py"
)


def test_only_the_changes_of_an_overlaid_workspace_come_out_with_what_was_removed(
    tmp_path: Path, workspace: Path
) -> None:
    async def main() -> tuple[str | None, WorkspaceChanges]:
        async with Sandbox(limits=LIMITS, workspace=workspace) as sb:
            done = await sb.exec(["sh", "-c", _EDIT])
            assert done.ok, done
            changes = await sb.read_changes(tmp_path / "changes")
            whole = await sb.read_tree(tmp_path / "whole")
            assert whole > 200
            return sb.workspace_mode, changes

    mode, changes = asyncio.run(main())
    if mode != "overlay":
        pytest.skip(f"this kernel does not overlay the workspace ({mode})")
    assert not changes.whole
    assert changes.deleted == ("emptied", "file_then_dir", "gone", "lib/m1/f50.py")
    assert _files(changes.root) == {
        "emptied/new.txt": "fresh\n",
        "file_then_dir/x": "in\n",
        "lib/m0/new.py": "new\n",
        "lib/m2/f100.py": "X = 100\n",  # touched: copied up, its content unchanged (the judge compares)
        "main.py": "print(42)\n",
        "out": "-> /etc/passwd",  # a link, as a link: never followed
    }
    # The changes laid over the workspace, after its removals, are the workspace the program left.
    rebuilt = tmp_path / "rebuilt"
    shutil.copytree(workspace, rebuilt, symlinks=True)
    for path in changes.deleted:
        shutil.rmtree(rebuilt / path) if (rebuilt / path).is_dir() else (rebuilt / path).unlink()
    shutil.copytree(changes.root, rebuilt, symlinks=True, dirs_exist_ok=True)
    assert _files(rebuilt) == _files(tmp_path / "whole")


def test_changes_stop_at_their_bounds_however_large_the_workspace(tmp_path: Path, workspace: Path) -> None:
    async def main() -> str | None:
        async with Sandbox(limits=LIMITS, workspace=workspace) as sb:
            # The workspace itself (200 files) is over both bounds: only what was written counts.
            assert (await sb.exec(["sh", "-c", "echo 1 > main.py"])).ok
            small = await sb.read_changes(tmp_path / "one", max_files=3, max_bytes=100)
            assert _files(small.root) == {"main.py": "1\n"} or small.whole
            made = await sb.exec(["sh", "-c", "mkdir many; for i in $(seq 20); do echo $i > many/$i; done"])
            assert made.ok, made
            with pytest.raises(TreeTooLarge, match="more than 10 entries"):
                await sb.read_changes(tmp_path / "many", max_files=10)
            assert (await sb.exec(["sh", "-c", "head -c 5000 /dev/zero > big"])).ok
            with pytest.raises(TreeTooLarge, match="more than 4096 bytes"):
                await sb.read_changes(tmp_path / "big", max_bytes=4096)
            return sb.workspace_mode

    if asyncio.run(main()) != "overlay":
        pytest.skip("this kernel does not overlay the workspace")


def test_without_an_overlay_the_whole_workspace_comes_out_and_says_so(tmp_path: Path) -> None:
    async def main() -> WorkspaceChanges:
        async with Sandbox(limits=LIMITS) as sb:
            await sb.write_file("a/b.txt", "b\n")
            return await sb.read_changes(tmp_path / "out", max_files=5)

    changes = asyncio.run(main())
    assert changes.whole and changes.deleted == () and _files(changes.root) == {"a/b.txt": "b\n"}


def test_remove_takes_files_links_and_directories_and_never_follows_a_link(tmp_path: Path, workspace: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file\n")

    async def main() -> str:
        async with Sandbox(limits=LIMITS, workspace=workspace) as sb:
            assert (await sb.exec(["sh", "-c", f"ln -s {outside} escape; ln -s main.py alias"])).ok
            await sb.remove("lib/m3")
            await sb.remove("main.py")
            await sb.remove("alias")
            with pytest.raises(OSError, match="symbolic link"):
                await sb.remove("escape/keep.txt")
            await sb.remove("escape")  # the link itself, not what it points to
            with pytest.raises(FileNotFoundError):
                await sb.remove("main.py")
            with pytest.raises(ValueError, match="outside the writable"):
                await sb.remove("/etc/passwd")
            listing = await sb.exec(["sh", "-c", "ls; ls lib"])
            return listing.stdout_text

    assert asyncio.run(main()).split() == ["emptied", "file_then_dir", "gone", "lib", "m0", "m1", "m2"]
    assert (outside / "keep.txt").read_text() == "host file\n"
    assert (workspace / "main.py").exists() and (workspace / "lib" / "m3").is_dir()  # the task's copy: untouched
