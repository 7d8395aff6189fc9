"""Scrubbing a repository to its base commit's history, and auditing a task for answers, on a real repository made
here: a bug, its fix in a later commit, a tag, a branch, a stash, a remote, a dangling blob."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from rollbox.cli import main
from rollbox.tasks import PytestGrading, ScrubError, audit_task, load_task, scrub_repository, write_task
from rollbox.tasks._git import environment

OPS = '''\
def add(a, b):
    return a + b


def median(values):
    """The median of values."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle]
'''
FIXED_OPS = '''\
def add(a, b):
    return a + b


def median(values):
    """The median of values."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of no values")
    middle = len(ordered) // 2
    if len(ordered) % 2 == 0:
        return (ordered[middle - 1] + ordered[middle]) / 2
    return ordered[middle]
'''
TESTS = """\
from calc.ops import add, median


def test_add(numbers):
    assert add(*numbers[:2]) == 4


def test_median_odd(numbers):
    assert median(numbers) == 3
"""
NEW_TESTS = (
    TESTS
    + """

def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_median_empty():
    try:
        median([])
    except ValueError as exc:
        assert "no values" in str(exc)
    else:
        raise AssertionError("median([]) must raise ValueError")
"""
)
CONFTEST = "import pytest\n\n\n@pytest.fixture\ndef numbers():\n    return [3, 1, 5]\n"


def run_git(repo: Path, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, input=stdin, capture_output=True, text=True, env=environment(), check=True
    )
    return done.stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)


@dataclass(frozen=True)
class CalcRepo:
    """A repository with a bug at ``base`` and its fix (with new tests) in the later commit ``fix``."""

    path: Path
    base: str
    fix: str
    #: The fixed module's blob id: it must never survive a scrub.
    fix_blob: str
    dangling_blob: str

    def diff(self, *paths: str) -> str:
        return run_git(self.path, "diff", self.base, self.fix, "--", *paths) + "\n"


def make_calc_repo(path: Path) -> CalcRepo:
    path.mkdir(parents=True)
    run_git(path, "init", "-q", "-b", "main")
    write(path, {"calc/__init__.py": "", "calc/ops.py": OPS, "tests/test_ops.py": TESTS, "conftest.py": CONFTEST})
    write(path, {"README.md": "calc: small numeric helpers\n"})
    run_git(path, "add", "-A")
    run_git(path, "commit", "-qm", "calc: add and median")
    base = run_git(path, "rev-parse", "HEAD")
    run_git(path, "tag", "v0.9")
    write(path, {"calc/ops.py": FIXED_OPS, "tests/test_ops.py": NEW_TESTS})
    run_git(path, "commit", "-qam", "median: even lengths and empty input")
    fix = run_git(path, "rev-parse", "HEAD")
    run_git(path, "tag", "-a", "v1.0", "-m", "release with the fix")
    run_git(path, "branch", "feature")
    run_git(path, "checkout", "-q", "feature")
    write(path, {"NOTES.md": "the fix, again\n"})
    run_git(path, "add", "-A")
    run_git(path, "commit", "-qm", "notes")
    run_git(path, "checkout", "-q", "main")
    run_git(path, "reset", "-q", "--hard", base)  # main back at the base: the fix lives in reflogs and refs only
    write(path, {"calc/ops.py": FIXED_OPS.replace("no values", "no values!")})
    run_git(path, "stash", "-q")
    run_git(path, "remote", "add", "origin", "https://example.com/acme/calc.git")
    run_git(path, "update-ref", "refs/remotes/origin/main", fix)
    run_git(path, "notes", "add", "-m", "see the fix", base)
    dangling = run_git(path, "hash-object", "-w", "--stdin", stdin=FIXED_OPS.replace("median", "middle"))
    fix_blob = run_git(path, "rev-parse", f"{fix}:calc/ops.py")
    return CalcRepo(path, base, fix, fix_blob, dangling)


def objects(repo: Path) -> set[str]:
    return set(run_git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())


def test_scrub_leaves_only_the_base_commits_history(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path / "calc")
    assert {repo.fix_blob, repo.dangling_blob} <= objects(repo.path)
    report = scrub_repository(repo.path)
    assert report.commit == repo.base and report.objects_after < report.objects_before
    assert set(report.removed_refs) >= {"refs/tags/v1.0", "refs/heads/feature", "refs/stash", "refs/notes/commits"}
    assert run_git(repo.path, "for-each-ref", "--format=%(refname)") == "refs/heads/main"
    assert run_git(repo.path, "log", "--all", "--format=%H") == repo.base
    for listing in (["tag"], ["stash", "list"], ["remote"], ["reflog", "--all"], ["notes", "list"]):
        assert run_git(repo.path, *listing) == "", listing
    reachable = set(run_git(repo.path, "rev-list", "--objects", "--all").replace(" ", "\n").split("\n"))
    assert objects(repo.path) <= reachable
    assert repo.fix_blob not in objects(repo.path) and repo.dangling_blob not in objects(repo.path)
    assert run_git(repo.path, "config", "--list", "--local").splitlines() == [
        "core.bare=false",
        "core.filemode=true",
        "core.logallrefupdates=false",
        "core.repositoryformatversion=0",
    ]
    git_dir = {p.name for p in (repo.path / ".git").iterdir()}
    assert git_dir <= {"HEAD", "config", "description", "index", "info", "objects", "refs", "packed-refs"}, git_dir
    assert run_git(repo.path, "status", "--porcelain") == ""  # the working tree is the base's, untouched
    assert (repo.path / "calc" / "ops.py").read_text() == OPS


def test_a_hostile_repository_runs_nothing_while_it_is_scrubbed(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path / "calc")
    marker = tmp_path / "ran"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("reference-transaction", "pre-auto-gc", "post-checkout", "post-rewrite"):
        (hooks / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        (hooks / name).chmod(0o755)
        (repo.path / ".git" / "hooks" / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        (repo.path / ".git" / "hooks" / name).chmod(0o755)
    run_git(repo.path, "config", "core.hooksPath", str(hooks))
    run_git(repo.path, "config", "core.fsmonitor", f"echo fsmonitor >> {marker}; true")
    run_git(repo.path, "config", "core.pager", f"echo pager >> {marker}; cat")
    scrub_repository(repo.path)
    assert not marker.exists(), marker.read_text()


def test_what_cannot_be_scrubbed_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScrubError, match=r"no \.git directory"):
        scrub_repository(tmp_path)
    repo = make_calc_repo(tmp_path / "calc")
    run_git(repo.path, "config", "extensions.partialclone", "origin")
    run_git(repo.path, "config", "core.repositoryformatversion", "1")
    with pytest.raises(ScrubError, match=r"uses extensions\.partialclone"):
        scrub_repository(repo.path)


# -- the audit -----------------------------------------------------------------------------------------------------


def calc_task(tmp_path: Path, workspace: Path) -> Path:
    """A task over ``workspace`` whose reference is the fix and whose hidden tests are the new tests."""
    write_task(
        tmp_path / "task",
        task_id="calc-median",
        grading=PytestGrading(fail_to_pass=("tests/test_ops.py::test_median_even",), tests_in_workspace=True),
        workspace=workspace,
        tests={"tests/test_ops.py": NEW_TESTS},
        solution={"calc/ops.py": FIXED_OPS},
    )
    return tmp_path / "task"


def test_the_audit_finds_the_fix_in_history_and_passes_a_scrubbed_clone(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path / "calc")
    unscrubbed = audit_task(calc_task(tmp_path / "a", repo.path))
    assert not unscrubbed.clean and unscrubbed.sources == {"solution/calc/ops.py": 4, "tests/tests/test_ops.py": 7}
    found = {(f.where, f.source) for f in unscrubbed.findings}
    assert (f"git object {repo.fix_blob} (blob)", "solution/calc/ops.py") in found
    assert any(where.startswith("git object") and source.startswith("tests/") for where, source in found)
    # The stash and the dangling blob hold changed copies of the fix: most of its lines, not its exact content.
    assert any(f.source == "solution/calc/ops.py" and not f.identical and f.matched >= 3 for f in unscrubbed.findings)
    scrub_repository(repo.path)
    clean = audit_task(calc_task(tmp_path / "b", repo.path))
    assert clean.clean, clean.findings
    assert clean.objects_read == len(objects(repo.path)) and clean.files_read > 4


def test_the_audit_finds_a_copied_file_a_dangling_blob_and_leaked_lines(tmp_path: Path) -> None:
    repo = make_calc_repo(tmp_path / "calc")
    scrub_repository(repo.path)
    task = calc_task(tmp_path, repo.path)
    workspace = load_task(task, verify=False).workspace
    (workspace / "docs").mkdir()
    (workspace / "docs" / "notes.py").write_text(FIXED_OPS)  # a file copy of the fix
    blob = run_git(workspace, "hash-object", "-w", "--stdin", stdin=NEW_TESTS)  # a dangling blob of the tests
    lines = "    if not ordered:\n        raise ValueError('x')\n    if len(ordered) % 2 == 0:\n"
    (workspace / "hint.txt").write_text("return (ordered[middle - 1] + ordered[middle]) / 2\n" + lines)
    (workspace / "one-line.txt").write_text("if not ordered:\n")  # one added line alone is no leak
    report = audit_task(task)
    described = sorted(str(f) for f in report.findings)
    assert described == [
        f"git object {blob} (blob) holds an exact copy of tests/tests/test_ops.py",
        "workspace/docs/notes.py holds an exact copy of solution/calc/ops.py",
        "workspace/hint.txt holds 3 of the 4 added lines of solution/calc/ops.py",
    ]
    assert main(["tasks", "audit", str(task), "--json"]) == 1


def test_rollbox_tasks_scrub_and_audit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = make_calc_repo(tmp_path / "calc")
    task = calc_task(tmp_path, repo.path)
    assert main(["tasks", "audit", str(task)]) == 1
    assert "holds an exact copy of solution/calc/ops.py" in capsys.readouterr().out
    assert main(["tasks", "scrub", str(task)]) == 0
    out = capsys.readouterr().out
    assert f"kept {repo.base[:12]}" in out and "refs/tags/v1.0" in out and "workspace sha256" in out
    assert load_task(task).workspace_sha256  # re-recorded: the scrubbed workspace loads
    assert main(["tasks", "audit", str(task), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["clean"] and report["findings"] == [] and report["objects_read"] > 0
    other = make_calc_repo(tmp_path / "bare-repo")
    assert main(["tasks", "scrub", str(other.path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["commit"] == other.base
    assert main(["tasks", "scrub", str(tmp_path / "nothing")]) == 2
