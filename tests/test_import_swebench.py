"""The SWE-bench importer on a real repository made here (tests/test_scrub.py's: a bug at the base commit, its fix
and its tests in a later commit, a tag, a branch, a stash): a pytest task over the scrubbed clone, and a precise
refusal for each kind of malformed instance."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import TIME_SCALE
from rollbox.cli import main
from rollbox.judge import Outcome, VerdictStatus, grade
from rollbox.judge._runtime import task_sandboxes
from rollbox.sandbox import FreshSandboxes, Limits, Sandbox, SandboxConfig, Status
from rollbox.tasks import Environment, PytestGrading, Task, audit_task, import_tasks, load_task
from rollbox.tasks._git import GitError
from rollbox.tasks._import_swebench import read_swebench
from rollbox.tasks._importing import Draft, run_import
from rollbox.train import naive_check
from test_scrub import FIXED_OPS, NEW_TESTS, OPS, CalcRepo, make_calc_repo, objects, run_git, write


@pytest.fixture(autouse=True)
def rollbox_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLBOX_HOME", str(tmp_path / "rollbox-home"))


@pytest.fixture
def repo(tmp_path: Path) -> CalcRepo:
    return make_calc_repo(tmp_path / "repos" / "acme__calc")


F2P = ["tests/test_ops.py::test_median_even", "tests/test_ops.py::test_median_empty"]
P2P = ["tests/test_ops.py::test_add", "tests/test_ops.py::test_median_odd"]


def instance(repo: CalcRepo, **changes: Any) -> dict[str, Any]:
    record = {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": repo.base,
        "patch": repo.diff("calc"),
        "test_patch": repo.diff("tests"),
        # As the published data set has them: JSON-encoded lists in strings.
        "FAIL_TO_PASS": json.dumps(F2P),
        "PASS_TO_PASS": json.dumps(P2P),
        "problem_statement": "median() is wrong for even lengths and crashes on empty input.\n",
        "environment_setup_commit": repo.base,
        "version": "1.0",
        "requirements": "pytest>=7\n# comment\n",
        "created_at": "2024-01-01",
    }
    record.update(changes)
    return record


def import_instances(tmp_path: Path, repo: CalcRepo, *records: dict[str, Any] | str) -> Any:
    source = tmp_path / "instances.jsonl"
    source.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return import_tasks("swebench", source, tmp_path / "tasks", repos=repo.path.parent)


def test_an_instance_becomes_a_pytest_task_over_the_scrubbed_clone(tmp_path: Path, repo: CalcRepo) -> None:
    report = import_instances(tmp_path, repo, instance(repo))
    assert report.ok, report.refused
    task = load_task(report.imported[0].path)
    assert task.id == "acme__calc-1" and task.path.name == "acme__calc-1"
    assert task.grading == PytestGrading(fail_to_pass=tuple(F2P), pass_to_pass=tuple(P2P), tests_in_workspace=True)
    assert task.instruction.startswith("median() is wrong") and task.environment == Environment(
        requirements=("pytest>=7",)
    )
    assert task.metadata == {
        "source": "swebench",
        "repo": "acme/calc",
        "base_commit": repo.base,
        "environment_setup_commit": repo.base,
        "version": "1.0",
    }
    assert task.limits.timeout_s == 300 and task.limits.disk_bytes > 1 << 30
    assert (task.workspace / "calc" / "ops.py").read_text() == OPS
    assert task.solution is not None and (task.solution / "calc" / "ops.py").read_text() == FIXED_OPS
    assert [p.relative_to(task.solution).as_posix() for p in task.solution.rglob("*") if p.is_file()] == ["calc/ops.py"]
    assert [p.relative_to(task.tests).as_posix() for p in task.tests.rglob("*") if p.is_file()] == ["tests/test_ops.py"]
    assert (task.tests / "tests" / "test_ops.py").read_text() == NEW_TESTS
    # Only the base commit's history: no fix, tag, branch, stash or remote survived, and nothing leaks.
    workspace = task.workspace
    assert run_git(workspace, "log", "--all", "--format=%H") == repo.base
    assert run_git(workspace, "for-each-ref", "--format=%(refname)") == "refs/heads/main"
    assert run_git(workspace, "stash", "list") == run_git(workspace, "remote") == run_git(workspace, "tag") == ""
    assert repo.fix_blob not in objects(workspace) and repo.dangling_blob not in objects(workspace)
    assert run_git(workspace, "status", "--porcelain") == ""
    assert audit_task(task).clean
    assert run_git(repo.path, "rev-parse", "refs/tags/v1.0^{commit}") == repo.fix  # the clone itself is untouched


def test_the_reference_passes_and_the_untouched_workspace_fails(tmp_path: Path, repo: CalcRepo) -> None:
    task = load_task(import_instances(tmp_path, repo, instance(repo)).imported[0].path)
    assert task.solution is not None
    reference = {
        p.relative_to(task.solution).as_posix(): p.read_bytes() for p in task.solution.rglob("*") if p.is_file()
    }
    passing = asyncio.run(grade(task, reference))
    assert passing.status is VerdictStatus.PASSED and passing.reward == 1.0, passing
    failing = asyncio.run(grade(task, task.workspace))
    assert failing.status is VerdictStatus.FAILED and failing.reward == 0.0, failing


def commit_on(repo: CalcRepo, start: str, branch: str, files: dict[str, str | None]) -> tuple[str, str]:
    """Commit ``files`` (``None``: delete the file) on ``start`` as ``branch`` of the repository, git-ignored files
    included; the commit and its diff from ``start``, as SWE-bench makes its patches."""
    run_git(repo.path, "checkout", "-q", "-b", branch, start)
    write(repo.path, {name: content for name, content in files.items() if content is not None})
    for name in (name for name, content in files.items() if content is None):
        (repo.path / name).unlink()
    run_git(repo.path, "add", "--all", "--force")
    run_git(repo.path, "commit", "-qm", branch)
    run_git(repo.path, "checkout", "-q", "main")
    commit = run_git(repo.path, "rev-parse", branch)
    return commit, run_git(repo.path, "diff", "--binary", start, commit) + "\n"


FILES_TEST = """

def test_median_from_files():
    import pathlib

    here = pathlib.Path(__file__).parent
    values = [int(v) for v in (here / "build" / "values.txt").read_text().split()]
    assert median(values) == float((here / "expected.log").read_text())
"""


STALE = "from calc.ops import median\n\n\ndef test_stale():\n    assert median([4, 1, 3, 2]) == 3\n"
STALE_GONE_TEST = """

def test_the_stale_tests_are_gone():
    import pathlib

    assert not (pathlib.Path(__file__).parent / "test_stale.py").exists()
"""


def test_a_test_patch_adds_ignored_files_and_deletes_files(tmp_path: Path, repo: CalcRepo) -> None:
    base, _ = commit_on(repo, repo.base, "ignoring", {".gitignore": "*.log\nbuild/\n", "tests/test_stale.py": STALE})
    _, test_patch = commit_on(
        repo,
        base,
        "tests",
        {
            "tests/test_ops.py": NEW_TESTS + FILES_TEST + STALE_GONE_TEST,
            "tests/expected.log": "2.5\n",  # ignored by name, and by the directory below
            "tests/build/values.txt": "4 1 3 2\n",
            "tests/test_stale.py": None,  # what the fix makes wrong goes with it
        },
    )
    f2p = [*F2P, "tests/test_ops.py::test_median_from_files"]
    p2p = [*P2P, "tests/test_ops.py::test_the_stale_tests_are_gone"]
    record = instance(repo, base_commit=base, test_patch=test_patch, FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p)
    report = import_instances(tmp_path, repo, record)
    assert report.ok, report.refused
    task = load_task(report.imported[0].path)
    tests = sorted(p.relative_to(task.tests).as_posix() for p in task.tests.rglob("*") if p.is_file())
    assert tests == ["tests/build/values.txt", "tests/expected.log", "tests/test_ops.py"]
    # The agent's workspace keeps what test_patch deletes (as base_commit has it); the judge removes it.
    assert isinstance(task.grading, PytestGrading) and task.grading.removed_by_tests == ("tests/test_stale.py",)
    assert (task.workspace / "tests" / "test_stale.py").read_text() == STALE
    assert (task.workspace / ".gitignore").is_file() and audit_task(task).clean
    assert task.solution is not None
    passing = asyncio.run(grade(task, {"calc/ops.py": (task.solution / "calc" / "ops.py").read_bytes()}))
    assert passing.status is VerdictStatus.PASSED and passing.reward == 1.0, passing
    failing = asyncio.run(grade(task, task.workspace))
    assert failing.status is VerdictStatus.FAILED and failing.reward == 0.0, failing
    outcomes = {t.id: t.outcome for t in failing.tests}
    assert outcomes["tests/test_ops.py::test_the_stale_tests_are_gone"] is Outcome.PASSED  # removed by the judge
    # A candidate that deleted the file itself (or its directory) is graded as one that left it.
    candidate = tmp_path / "candidate"
    shutil.copytree(task.workspace, candidate, symlinks=True)
    shutil.copyfile(task.solution / "calc" / "ops.py", candidate / "calc" / "ops.py")
    (candidate / "tests" / "test_stale.py").unlink()
    deleted = asyncio.run(grade(task, candidate))
    assert deleted.status is VerdictStatus.PASSED and deleted.reward == 1.0, deleted
    # The naive arm's harness (as SWE-bench's) has them gone too: its check passes only without the stale tests.
    assert naive_exit_code(task, {"calc/ops.py": (task.solution / "calc" / "ops.py").read_text()}) == 0


def naive_exit_code(task: Task, files: dict[str, str]) -> int | None:
    """The exit code of the naive arm's check of ``task`` with ``files`` written over its workspace, run as a
    rollout runs it: in a sandbox of the task's over its workspace."""
    check = naive_check(task)
    assert check is not None

    async def main() -> int | None:
        source = await task_sandboxes(task, FreshSandboxes())
        config = SandboxConfig(limits=task.limits, network=task.network, workspace=task.workspace)
        async with source.sandbox(config) as sb:
            await sb.write_files({**files, **check.staged()})
            result = await sb.exec(["bash", "-c", check.script()])
            assert result.status in (Status.OK, Status.NONZERO_EXIT), result
            return result.exit_code

    return asyncio.run(main())


MORE_TESTS = "from calc.ops import median\n\n\ndef test_two():\n    assert median([1, 2]) == 1.5\n"


def agent_view(workspace: Path, *commands: str) -> list[str]:
    """What each git command prints in a sandbox over ``workspace``, as an episode starts the agent's (its
    /workspace)."""

    async def main() -> list[str]:
        seen = []
        async with Sandbox(
            limits=Limits(timeout_s=60 * TIME_SCALE, cpu_time_s=30 * TIME_SCALE), workspace=workspace
        ) as sb:
            for command in commands:
                result = await sb.exec(["sh", "-c", command])
                assert result.status is Status.OK, (command, result)
                seen.append(result.stdout_text)
        return seen

    return asyncio.run(main())


def test_nothing_of_the_test_patch_shows_in_the_agents_git_state(tmp_path: Path, repo: CalcRepo) -> None:
    base, _ = commit_on(repo, repo.base, "stale", {"tests/test_stale.py": STALE, "tests/data.txt": "4 1 3 2\n"})
    _, test_patch = commit_on(
        repo,
        base,
        "tests",
        {
            "tests/test_ops.py": NEW_TESTS + STALE_GONE_TEST,  # modified
            "tests/test_more.py": MORE_TESTS,  # added
            "tests/data.txt": "4 1 3 2 9\n",  # modified, not a test module
            "tests/test_stale.py": None,  # deleted
        },
    )
    record = instance(repo, base_commit=base, test_patch=test_patch)
    report = import_instances(tmp_path, repo, record)
    assert report.ok, report.refused
    task = load_task(report.imported[0].path)
    assert isinstance(task.grading, PytestGrading) and task.grading.removed_by_tests == ("tests/test_stale.py",)
    # The blobs only test_patch has: its versions of the files it adds or changes.
    hidden = {run_git(task.tests, "hash-object", str(p)) for p in task.tests.rglob("*") if p.is_file()}
    assert len(hidden) == 3
    tree = run_git(repo.path, "ls-tree", "-r", "--full-tree", base)
    (status, ignored, diff, staged, log, reflog, stash, index, flags, stale, listed, reachable) = agent_view(
        task.workspace,
        "git status --porcelain --untracked-files=all",
        "git status --porcelain --ignored --untracked-files=all",
        "git diff HEAD",
        "git diff --cached",
        "git log --all --format=%H",
        "git reflog --all; ls .git/logs 2>/dev/null; true",
        "git stash list",
        "git ls-files --stage",
        "git ls-files -v | grep -v '^H ' || true",  # assume-unchanged, skip-worktree, ...
        "cat tests/test_stale.py 2>&1 || true",
        "git cat-file --batch-all-objects --batch-check='%(objectname)'",
        "git rev-list --objects --all | cut -d' ' -f1",
    )
    assert status == ignored == diff == staged == reflog == stash == flags == ""
    assert log.split() == run_git(repo.path, "log", "--format=%H", base).split()  # base_commit's history alone
    # The index is base_commit's tree, entry for entry (the deleted file included).
    assert [line.replace("\t", " ") for line in index.splitlines()] == [
        f"{mode} {oid} 0 {path}"
        for mode, _, oid, path in (e.replace("\t", " ").split(" ", 3) for e in tree.splitlines())
    ]
    assert stale == STALE
    # Every object in .git is reachable from base_commit; none is test_patch's.
    assert set(listed.split()) == set(reachable.split()) and not hidden & set(listed.split())
    assert not hidden & objects(task.workspace)


def test_malformed_instances_are_refused_one_by_one(tmp_path: Path, repo: CalcRepo) -> None:
    good = instance(repo)
    corrupt = good["patch"].replace("return ordered[middle]", "return ordered[middle + 7]")
    deleting = run_git(repo.path, "diff", repo.base, "--", "README.md", stdin=None)
    records: list[dict[str, Any] | str] = [
        good,
        "not json at all",
        {k: v for k, v in good.items() if k != "patch"} | {"instance_id": "no-patch"},
        good | {"instance_id": "bad-f2p", "FAIL_TO_PASS": 3},
        good | {"instance_id": "bad-json", "FAIL_TO_PASS": "[not json"},
        good | {"instance_id": "empty-f2p", "FAIL_TO_PASS": []},
        good | {"instance_id": "unknown-repo", "repo": "acme/nothing"},
        good | {"instance_id": "bad-commit", "base_commit": "0123456789abcdef0123456789abcdef01234567"},
        good | {"instance_id": "no-apply", "patch": corrupt},
        good | {"instance_id": "deletes", "patch": _deletion(repo)},
        good | {"instance_id": "bad-req", "requirements": ["numpy==="]},
        good | {"instance_id": "acme__calc-1"},
        good | {"instance_id": "fixes-deleted", "test_patch": _deletion(repo), "patch": good["patch"] + _readme_edit()},
    ]
    assert deleting == ""  # the README is the same at both commits: the deletion is made by hand below
    report = import_instances(tmp_path, repo, *records)
    assert [t.task_id for t in report.imported] == ["acme__calc-1"]
    reasons = {(r.task_id, r.where.rsplit(":", 1)[1]): r.reason for r in report.refused}
    assert reasons[(None, "2")].startswith("not JSON")
    assert reasons[("no-patch", "3")] == "missing key 'patch': give the gold patch (a unified diff)"
    assert reasons[("bad-f2p", "4")] == "key 'FAIL_TO_PASS': expected a list of test ids (strings), got 3"
    assert reasons[("bad-json", "5")].startswith("key 'FAIL_TO_PASS': a string must hold a JSON list of test ids")
    assert reasons[("empty-f2p", "6")].startswith("key 'FAIL_TO_PASS': the list is empty")
    unknown = reasons[("unknown-repo", "7")]
    assert (
        unknown.startswith(f"no clone of acme/nothing in {repo.path.parent}: expected ") and "acme__nothing" in unknown
    )
    assert reasons[("bad-commit", "8")].startswith("cannot check out base_commit 0123456789abcdef")
    assert reasons[("no-apply", "9")].startswith("patch does not apply at base_commit: ")
    assert reasons[("deletes", "10")].startswith("patch deletes README.md; a rollbox solution/ is laid over")
    assert "'numpy===' is not a valid requirement" in reasons[("bad-req", "11")]
    assert "already taken by task 'acme__calc-1'" in reasons[("acme__calc-1", "12")]
    assert reasons[("fixes-deleted", "13")] == "patch and test_patch both change README.md; keep fix and tests apart"
    assert sorted(p.name for p in (tmp_path / "tasks").iterdir()) == ["acme__calc-1"]  # no scratch left behind
    with pytest.raises(ValueError, match="swebench needs repos"):
        import_tasks("swebench", tmp_path / "instances.jsonl", tmp_path / "x")


def test_rollbox_tasks_import_swebench(tmp_path: Path, repo: CalcRepo, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "instances.jsonl"
    source.write_text(json.dumps(instance(repo)) + "\n")
    command = ["tasks", "import", "swebench", str(source), str(tmp_path / "out")]
    assert main(command) == 2 and "--repos DIR is required for swebench" in capsys.readouterr().err
    assert main([*command, "--repos", str(tmp_path / "nowhere")]) == 2
    assert main([*command, "--repos", str(repo.path.parent)]) == 0
    assert capsys.readouterr().out == f"imported 1 task into {tmp_path / 'out'}, refused 0\n"
    assert main(["tasks", "audit", str(tmp_path / "out" / "acme__calc-1")]) == 0
    assert "acme__calc-1: clean (11 added lines of 2 files" in capsys.readouterr().out
    assert main(["tasks", "import", "stdio", str(source), str(tmp_path / "o2"), "--repos", str(tmp_path)]) == 2


@pytest.mark.parametrize(
    "error",
    [
        GitError("git rm -q -- x (in /w) failed with exit status 128: fatal: bad object"),
        OverflowError("cannot convert float infinity to integer"),
    ],
)
def test_a_write_that_fails_refuses_its_task_alone(tmp_path: Path, repo: CalcRepo, error: Exception) -> None:
    def failing(path: Path, force: bool) -> Task:
        raise error

    source = tmp_path / "instances.jsonl"
    source.write_text(json.dumps(instance(repo)) + "\n")
    drafts = [Draft("broken", "broken.jsonl:1", failing), *read_swebench(source, repos=repo.path.parent)]
    report = run_import("swebench", drafts, tmp_path / "tasks")
    assert [t.task_id for t in report.imported] == ["acme__calc-1"]
    (refusal,) = report.refused
    assert refusal.task_id == "broken" and str(error) in refusal.reason, refusal


def _readme_edit() -> str:
    """A patch that changes README.md at the base commit."""
    return (
        "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
        "@@ -1 +1 @@\n-calc: small numeric helpers\n+calc: numeric helpers\n"
    )


def _deletion(repo: CalcRepo) -> str:
    """A patch that deletes README.md at the base commit."""
    return (
        "diff --git a/README.md b/README.md\ndeleted file mode 100644\n"
        f"index {run_git(repo.path, 'rev-parse', f'{repo.base}:README.md')[:7]}..0000000\n"
        "--- a/README.md\n+++ /dev/null\n@@ -1 +0,0 @@\n-calc: small numeric helpers\n"
    )
