"""Copy-on-write workspaces: ``Sandbox(workspace=DIR)`` overlays DIR at /workspace, one sandbox's changes seen by
no other sandbox and never by the host's copy, the disk limit counting only what is written, a reset bringing
back the pristine workspace; where the kernel cannot overlay, a copy that behaves the same."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from rollbox import telemetry
from rollbox.sandbox import InsecureBackendWarning, Limits, Sandbox, SandboxPool, Status

LIMITS = Limits(timeout_s=30 * TIME_SCALE, cpu_time_s=15 * TIME_SCALE)


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its text, and every directory (as ``"/"``)."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        found[relative] = "/" if path.is_dir() else path.read_text()
    return found


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "workspace"
    (root / "pkg").mkdir(parents=True)
    (root / "README.md").write_text("the task\n")
    (root / "pkg" / "core.py").write_text("def answer():\n    return 41\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o755)
    return root


_EDIT = (
    "set -e; sed -i s/41/42/ pkg/core.py; rm README.md; mv run.sh go.sh; mkdir -p new/deep; echo hi > new/deep/f;"
    " chmod 600 pkg/__init__.py; ./go.sh; python3 -c 'import pkg.core; print(pkg.core.answer())'"
)


def test_one_sandboxs_changes_are_invisible_to_another_on_the_same_workspace_and_to_the_host(
    workspace: Path,
) -> None:
    before = _tree(workspace)

    async def main() -> tuple[str | None, str, str, bytes, bytes]:
        async with (
            Sandbox(limits=LIMITS, workspace=workspace) as one,
            Sandbox(limits=LIMITS, workspace=workspace) as two,
        ):
            edited = await one.exec(["sh", "-c", _EDIT])
            assert edited.ok, edited
            seen = await two.exec(["sh", "-c", "cat pkg/core.py README.md; ls -A; stat -c '%a %U' pkg/__init__.py"])
            return (
                one.workspace_mode,
                edited.stdout_text,
                seen.stdout_text,
                await one.read_file("pkg/core.py"),
                (await two.read_file("pkg/core.py")),
            )

    mode, edited, seen, host_one, host_two = asyncio.run(main())
    assert mode == "overlay"
    assert edited == "ran\n42\n"
    assert seen == "def answer():\n    return 41\nthe task\nREADME.md\npkg\nrun.sh\n644 sandbox\n"
    assert host_one == b"def answer():\n    return 42\n" and host_two == b"def answer():\n    return 41\n"
    assert _tree(workspace) == before  # the host's copy, never written


def test_the_workspace_belongs_to_the_sandbox_user_and_files_of_other_owners_to_nobody(workspace: Path) -> None:
    # Its owner's files appear as the sandbox user's (a tool such as git trusts them, the program may chmod
    # them); a file of another host user appears as nobody's, readable by the rules of its mode only.
    other = workspace / "theirs.txt"
    other.write_text("someone else's\n")
    os.chown(other, 4242, 4242)

    async def main() -> str:
        async with Sandbox(limits=LIMITS, workspace=workspace) as sb:
            result = await sb.exec(
                ["sh", "-c", "stat -c '%U %G %n' /workspace README.md theirs.txt; chmod +x README.md && echo chmod"]
            )
            return result.stdout_text + result.stderr_text

    assert asyncio.run(main()).splitlines() == [
        "sandbox sandbox /workspace",
        "sandbox sandbox README.md",
        "nobody nogroup theirs.txt",
        "chmod",
    ]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_git_repository_as_workspace_works_inside_without_touching_the_hosts(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.py").write_text("x = 1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout

    async def main() -> str:
        async with Sandbox(limits=LIMITS, workspace=repo) as sb:
            script = "echo 'x = 2' > a.py && git diff --stat && git -c user.name=c -c user.email=c@c commit -qam fix"
            result = await sb.exec(["sh", "-c", script + " && git log --oneline | wc -l"])
            return result.stdout_text + result.stderr_text

    assert asyncio.run(main()).split()[-1] == "2"  # committed inside
    after = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
    assert after == head and (repo / "a.py").read_text() == "x = 1\n"


def test_a_pooled_sandbox_comes_back_with_the_pristine_workspace(workspace: Path) -> None:
    async def main() -> list[tuple[str, int | None]]:
        seen = []
        async with SandboxPool(size=1, limits=LIMITS, workspace=workspace) as pool:
            for script in (_EDIT, "cat pkg/core.py; ls -A", "cat README.md", "ls -A; echo x > /tmp/t"):
                async with pool.sandbox() as sb:
                    result = await sb.exec(["sh", "-c", script])
                    seen.append((result.stdout_text, sb._impl.agent.pid))  # type: ignore[union-attr]
        return seen

    seen = asyncio.run(main())
    assert seen[1][0] == "def answer():\n    return 41\nREADME.md\npkg\nrun.sh\n"
    assert seen[1][1] != seen[0][1]  # a changed workspace: restarted over a new overlay
    assert seen[2] == ("the task\n", seen[1][1])  # nothing changed in it: reset in place, the same agent
    assert seen[3] == ("README.md\npkg\nrun.sh\n", seen[1][1])


def test_the_disk_limit_counts_only_what_the_program_writes(tmp_path: Path) -> None:
    # A workspace four times the disk limit starts (a copy could not), and costs the sandbox's tree nothing;
    # what the program writes counts, up to the limit.
    big = tmp_path / "big"
    big.mkdir()
    (big / "data.bin").write_bytes(os.urandom(16 << 20))
    limits = Limits(timeout_s=30 * TIME_SCALE, cpu_time_s=15 * TIME_SCALE, disk_bytes=4 << 20)

    async def main() -> tuple[int, Status, Status, str]:
        async with Sandbox(limits=limits, workspace=big) as sb:
            st = os.statvfs(sb._impl.writable_root)  # type: ignore[union-attr]
            used = (st.f_blocks - st.f_bfree) * st.f_frsize
            small = await sb.exec(["sh", "-c", "head -c 1M /dev/zero > one.bin"])
            full = await sb.exec(["sh", "-c", "head -c 8M /dev/zero > more.bin"])
            size = await sb.exec(["sh", "-c", "wc -c < data.bin"])
            return used, small.status, full.status, size.stdout_text

    used, small, full, size = asyncio.run(main())
    assert used < 1 << 20 and small is Status.OK and full is Status.DISK_LIMIT and size.strip() == str(16 << 20)


def test_many_sandboxes_on_one_workspace_share_its_bytes(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    for i in range(50):
        (root / f"d{i % 5}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 5}" / f"f{i}.bin").write_bytes(os.urandom(200_000))  # 10 MB in all

    async def main() -> list[int]:
        boxes = [Sandbox(limits=LIMITS, workspace=root) for _ in range(20)]
        opened = await asyncio.gather(*(box.__aenter__() for box in boxes))
        try:
            read = await asyncio.gather(*(sb.exec(["sh", "-c", "cat d*/* | wc -c"]) for sb in opened))
            assert all(r.stdout_text.strip() == str(10_000_000) for r in read), read
            used = []
            for sb in opened:
                st = os.statvfs(sb._impl.writable_root)  # type: ignore[union-attr]
                used.append((st.f_blocks - st.f_bfree) * st.f_frsize)
            return used
        finally:
            await asyncio.gather(*(sb.close() for sb in opened))

    assert max(asyncio.run(main())) < 256 << 10  # each tree holds nothing of the 10 MB


def test_the_host_reads_and_writes_an_overlaid_workspace_without_following_its_links(
    workspace: Path, tmp_path: Path
) -> None:
    async def main() -> tuple[str, list[str], bytes]:
        async with Sandbox(limits=LIMITS, workspace=workspace) as sb:
            await sb.write_file("pkg/added.py", "ADDED = 1\n")
            await sb.write_file("README.md", "rewritten by the host\n")
            planted = await sb.exec(["sh", "-c", "ln -s /etc out && ln -s /etc/passwd pw && cat pkg/added.py"])
            with pytest.raises(OSError, match="symbolic link"):
                await sb.read_file("out/passwd")
            with pytest.raises(OSError, match="symbolic link"):
                await sb.read_file("pw")
            copied = tmp_path / "copied"
            await sb.read_tree(copied)
            return planted.stdout_text, sorted(_tree(copied)), await sb.read_file("README.md")

    out, copied, readme = asyncio.run(main())
    assert out == "ADDED = 1\n" and readme == b"rewritten by the host\n"
    assert copied == ["README.md", "out", "pkg", "pkg/__init__.py", "pkg/added.py", "pkg/core.py", "pw", "run.sh"]
    assert (workspace / "README.md").read_text() == "the task\n"


def test_where_the_kernel_cannot_overlay_the_workspace_is_copied_and_says_so(workspace: Path) -> None:
    # A kernel or filesystem without idmapped mounts (what the probe found, here set for this filesystem): the
    # same workspace, the same isolation and resets, by copying.
    from rollbox.sandbox.namespaces._backend import NamespaceHost

    overlays = NamespaceHost.get().overlays
    device = os.stat(workspace).st_dev
    overlays._known[device] = "an idmapped mount of the workspace: Invalid argument"  # as a 6.1 tmpfs answers
    events: list[telemetry.Event] = []

    class Events:
        def write(self, event: telemetry.Event) -> None:
            events.append(event)

    async def main() -> tuple[str | None, str, str]:
        with telemetry.recording(Events()):
            async with SandboxPool(size=1, limits=LIMITS, workspace=workspace) as pool:
                async with pool.sandbox() as sb:
                    edited = await sb.exec(["sh", "-c", _EDIT])
                async with pool.sandbox() as sb:
                    again = await sb.exec(["sh", "-c", "cat pkg/core.py; ls -A"])
                    return sb.workspace_mode, edited.stdout_text, again.stdout_text

    try:
        mode, edited, again = asyncio.run(main())
    finally:
        del overlays._known[device]
    assert mode == "copy" and edited == "ran\n42\n"
    assert again == "def answer():\n    return 41\nREADME.md\npkg\nrun.sh\n"
    copied = [e for e in events if e.kind == "sandbox.workspace_copied"]
    assert copied and "idmapped" in copied[0].fields["reason"]
    assert (workspace / "pkg" / "core.py").read_text() == "def answer():\n    return 41\n"


def test_the_process_backend_copies_the_workspace(workspace: Path) -> None:
    async def main() -> tuple[str | None, str]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InsecureBackendWarning)
            async with Sandbox(limits=LIMITS, workspace=workspace, backend="process") as sb:
                result = await sb.exec(["sh", "-c", "cat README.md"])
                return sb.workspace_mode, result.stdout_text

    assert asyncio.run(main()) == ("copy", "the task\n")


def test_a_workspace_that_is_no_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        Sandbox(workspace=tmp_path / "missing")


def test_the_probe_says_why_a_filesystem_cannot_be_overlaid() -> None:
    # procfs allows no idmapped mount: the probe names that step and the kernel's answer.
    from rollbox.sandbox.namespaces._backend import NamespaceHost

    reason = NamespaceHost.get().overlays.unavailable(Path("/proc/sys"))
    assert reason is not None and "idmapped mount" in reason, reason
