"""The agent's /workspace is a copy-on-write overlay of the task's workspace/: a repository-sized one starts as a
small one does, the host's copy is never written, and episodes on one task (at once, or one after another in a
warm pool) never see each other's writes."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import rollbox
from rollbox.env import Episode
from rollbox.sandbox import Status, WarmSandboxes
from rollbox.tasks import Task, load_task, workspace_sha256
from test_env_tasks import BUGGY, write_calc_task

SUBMIT = {"name": "submit", "arguments": {}}


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def repository_task(root: Path, files: int = 3000) -> Task:
    """The calc task in a repository of ``files`` more files (3 levels of directories, a .git beside them), with
    its workspace's hash recorded as importers record it."""
    write_calc_task(root)
    workspace = root / "workspace"
    for i in range(files):
        directory = workspace / "vendor" / f"pkg{i // 500}" / f"mod{i // 50 % 10}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"file{i}.py").write_text(f"VALUE = {i}\n" + "# filler\n" * 20)
    (workspace / ".git" / "objects").mkdir(parents=True)
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    with (root / "task.toml").open("a") as toml:
        toml.write(f'\n[workspace]\nsha256 = "{workspace_sha256(workspace)}"\n')
    return load_task(root)


async def texts(env: Episode, *actions: dict[str, Any]) -> list[str]:
    """The observations' texts of ``actions``, each checked to have run."""
    found = []
    for action in actions:
        result = await env.step(action)
        assert not result.observation.error and result.observation.status in (None, Status.OK), result.observation
        found.append(result.observation.text)
    return found


def test_a_repository_sized_workspace_is_overlaid_and_the_hosts_copy_never_written(tmp_path: Path) -> None:
    task = repository_task(tmp_path / "repo")
    before = workspace_sha256(task.workspace)

    async def main() -> tuple[str, str | None, list[str], float | None]:
        async with rollbox.make(task) as env:
            first = (await env.reset()).text
            mode = env.workspace_mode
            seen = await texts(
                env,
                call("edit", path="calc.py", old="a - b", new="a + b"),
                call("bash", command="rm -r vendor/pkg0 && rm vendor/pkg1/mod0/file500.py && chmod +x calc.py"),
                call("bash", command="echo new > vendor/pkg1/added.py && mv vendor/pkg2 vendor/moved && rm -r .git"),
                call("bash", command="ls vendor; find . -type f | wc -l"),
                call("run_tests"),
            )
            result = await env.step(SUBMIT)
        return first, mode, seen, result.reward

    first, mode, seen, reward = asyncio.run(main())
    assert mode == "overlay"
    assert "calc.py\ntest_calc.py" in first and "vendor/pkg0/mod0/file0.py" in first and "more" in first
    assert ".git" not in first  # listed for the agent without the repository's internals
    assert seen[3].split()[:6] == ["moved", "pkg1", "pkg3", "pkg4", "pkg5", "2502"]
    assert "2 passed" in seen[4] and reward == 1.0
    # The host's copy: untouched, however the agent edited, deleted, moved and chmod-ed its overlay.
    assert workspace_sha256(task.workspace) == before
    assert (task.workspace / "calc.py").read_text() == BUGGY and not (task.workspace / "calc.py").stat().st_mode & 0o111
    assert (task.workspace / "vendor" / "pkg0" / "mod0" / "file0.py").is_file()
    assert (task.workspace / ".git" / "HEAD").is_file() and not (task.workspace / "vendor" / "moved").exists()


def test_episodes_on_one_task_never_see_each_others_writes(tmp_path: Path) -> None:
    task = write_calc_task(tmp_path / "calc")
    other = write_calc_task(tmp_path / "other")
    (other.workspace / "other_only.txt").write_text("the other task's file\n")
    all_wrote = asyncio.Barrier(3)
    look = call("bash", command="cat mine.txt 2>/dev/null; grep -c return calc.py; ls")

    async def agent(env: Episode, number: int) -> list[str]:
        await env.reset()
        wrote = await texts(
            env,
            call("write_file", path="mine.txt", content=f"episode {number}\n"),
            call(
                "bash", command=f"echo '    return {number}' >> calc.py" + ("; rm test_calc.py" if number == 1 else "")
            ),
        )
        await all_wrote.wait()
        return wrote + await texts(env, look, SUBMIT)

    async def main() -> tuple[list[list[str]], str, str]:
        async with WarmSandboxes(size=2) as agents:
            seen = await asyncio.gather(
                *(agent(rollbox.make(task, sandboxes=agents), n) for n in (0, 1)),
                agent(rollbox.make(task), 2),  # and a fresh sandbox beside the pooled ones
            )
            # The pool's sandboxes, handed back, start the next episode on the pristine workspace; the other
            # task's episode gets a sandbox of its own workspace, never one of this task's pool.
            async with rollbox.make(task, sandboxes=agents) as env:
                await env.reset()
                again = (await texts(env, look))[0]
            async with rollbox.make(other, sandboxes=agents) as env:
                await env.reset()
                elsewhere = (await texts(env, call("bash", command="ls")))[0]
        return seen, again, elsewhere

    seen, again, elsewhere = asyncio.run(
        asyncio.wait_for(main(), 300)  # a stuck barrier would otherwise hang the run
    )
    for number, texts_ in enumerate(seen):
        listing = texts_[2]
        assert listing.startswith(f"episode {number}\n3\n"), listing  # its own file and its one added line
        assert ("test_calc.py" in listing) is (number != 1), listing  # only episode 1 deleted its copy
    assert again.startswith("2\ncalc.py\ntest_calc.py\n"), again  # pristine: no mine.txt, calc.py as it was
    assert "other_only.txt" in elsewhere and "mine.txt" not in elsewhere
    assert (task.workspace / "calc.py").read_text() == BUGGY and not (task.workspace / "mine.txt").exists()


def test_the_first_observation_lists_the_workspace_as_it_is_now(tmp_path: Path) -> None:
    task = write_calc_task(tmp_path / "calc")
    (task.workspace / "pkg" / "sub").mkdir(parents=True)
    time.sleep(2.1)  # old enough for its walk to be kept and reused (a directory changed just now never is)

    async def first() -> str:
        async with rollbox.make(task) as env:
            return (await env.reset()).text

    def listed(text: str) -> list[str]:
        return text.split("/workspace:\n")[1].split("\n\n", maxsplit=1)[0].splitlines()

    assert listed(asyncio.run(first())) == ["calc.py", "pkg/", "pkg/sub/", "test_calc.py"]
    assert listed(asyncio.run(first())) == ["calc.py", "pkg/", "pkg/sub/", "test_calc.py"]  # the walk reused
    (task.workspace / "pkg" / "sub" / "test_deep.py").write_text("def test_deep():\n    pass\n")
    text = asyncio.run(first())
    assert listed(text) == ["calc.py", "pkg/", "pkg/sub/", "pkg/sub/test_deep.py", "test_calc.py"]
    assert "pkg/sub/test_deep.py" in text.split("The visible tests (")[1].split(")")[0]
    (task.workspace / "pkg" / "sub").rename(task.workspace / "pkg" / "moved")
    assert listed(asyncio.run(first())) == ["calc.py", "pkg/", "pkg/moved/", "pkg/moved/test_deep.py", "test_calc.py"]
