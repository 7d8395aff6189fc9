"""The SWE-bench importer: repository instances as native ``pytest`` tasks over a scrubbed clone.

Each line of the input is one instance, a JSON object with ``instance_id``, ``repo`` (``owner/name``),
``base_commit``, ``patch`` (the gold fix), ``test_patch``, ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` (lists of pytest
node ids relative to the repository root, or those lists JSON-encoded in a string, as the published data set has
them), and optionally ``problem_statement`` (the instruction), ``requirements`` (a list, or lines in a string:
pip requirements for ``[environment]``), ``environment_setup_commit`` and ``version`` (kept in ``[metadata]``).
Other keys are ignored.

``--repos DIR`` holds local clones: ``DIR/OWNER__NAME`` (SWE-bench's own spelling) or ``DIR/NAME``; each may be a
working tree or a bare repository, and must contain ``base_commit``. Nothing is fetched.

Each instance becomes:

- workspace/: a fresh clone at ``base_commit``, scrubbed (:mod:`rollbox.tasks._scrub`): no later commits, no
  other branches, tags, remotes, reflogs, stash, or objects only they reach;
- tests/: the files ``test_patch`` adds or changes (git-ignored paths included), as they are after it is applied,
  at their repository paths; the files it deletes are ``[grading] removed_by_tests``: the judge removes them
  before the tests run, as SWE-bench's harness has them gone then, while the workspace keeps them as
  ``base_commit`` has them (nothing of test_patch shows in the agent's git status, diff, index or objects: it is
  applied only to a throwaway clone);
- solution/: the files ``patch`` adds or changes, after it is applied (a patch that deletes a file, or one that
  changes a file ``test_patch`` also adds, changes or deletes, is refused: an overlay cannot say it);
- ``[grading] runner = "pytest"``, ``fail_to_pass``, ``pass_to_pass``, ``tests_in_workspace = true`` (the tests
  run inside the repository, with its conftest and configuration); ``[limits]``: 300 s wall and CPU, 2G memory,
  256 processes, and a disk limit of the workspace's size plus 1G.

Before it is put in place, the task is audited (:mod:`rollbox.tasks._audit`): a workspace that still holds the
fix or the hidden tests is refused with what was found.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

from rollbox.sandbox import Limits

from ._audit import audit_task
from ._environment import Environment
from ._git import GitError, git
from ._importing import Draft, ImportRefused, Refusal
from ._jsonl import Record, records, require, shorten
from ._model import PytestGrading, Task
from ._scrub import ScrubError, scrub_repository
from ._summary import Tree
from ._write import put_in_place, settle, write_task

__all__ = ["read_swebench"]

_REPO = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?[A-Za-z0-9_.-]+$")
_COMMIT = re.compile(r"^[0-9a-f]{7,64}$")
_DISK_SLACK = 1 << 30


def _ids(data: dict[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key)
    if key not in data:
        raise ImportRefused(f"missing key {key!r}: give a list of pytest node ids")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ImportRefused(
                f"key {key!r}: a string must hold a JSON list of test ids, got {shorten(value)}"
            ) from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImportRefused(f"key {key!r}: expected a list of test ids (strings), got {shorten(value)}")
    return tuple(value)


def _requirements(data: dict[str, Any]) -> tuple[str, ...]:
    value = data.get("requirements") or []
    if isinstance(value, str):
        value = [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImportRefused(f"key 'requirements': expected a list of requirement strings, got {shorten(value)}")
    return tuple(value)


def _instance(record: Record) -> dict[str, Any]:
    """One instance's fields, checked.

    Raises:
        ImportRefused: a key is missing or malformed.
    """
    data = record.data
    instance: dict[str, Any] = {
        "instance_id": require(data, "instance_id", str, "the instance's id (a string)"),
        "repo": require(data, "repo", str, "the repository as OWNER/NAME"),
        "base_commit": require(data, "base_commit", str, "the commit the task starts from (hex)"),
        "patch": require(data, "patch", str, "the gold patch (a unified diff)"),
        "test_patch": require(data, "test_patch", str, "the test patch (a unified diff)"),
        "fail_to_pass": _ids(data, "FAIL_TO_PASS"),
        "pass_to_pass": _ids(data, "PASS_TO_PASS"),
        "requirements": _requirements(data),
        "problem_statement": data.get("problem_statement") if isinstance(data.get("problem_statement"), str) else "",
        "metadata": {k: data[k] for k in ("environment_setup_commit", "version") if isinstance(data.get(k), str)},
    }
    if not _REPO.match(instance["repo"]) or ".." in instance["repo"]:
        raise ImportRefused(f"key 'repo': expected OWNER/NAME, got {instance['repo']!r}")
    if not _COMMIT.match(instance["base_commit"]):
        raise ImportRefused(f"key 'base_commit': expected a commit id in hex, got {instance['base_commit']!r}")
    if not instance["fail_to_pass"]:
        raise ImportRefused("key 'FAIL_TO_PASS': the list is empty, so nothing would show that the fix works")
    try:
        Environment(requirements=instance["requirements"])
    except ValueError as exc:
        raise ImportRefused(str(exc)) from None
    return instance


def _clone_of(repos: Path, repo: str) -> Path:
    owner, _, name = repo.rpartition("/")
    candidates = [repos / f"{owner}__{name}", repos / name] if owner else [repos / name]
    for path in candidates:
        if (path / ".git").exists() or (path / "HEAD").is_file():
            return path
    shown = " or ".join(str(p) for p in candidates)
    raise ImportRefused(f"no clone of {repo} in {repos}: expected {shown}; clone the repository there")


def _changes(workspace: Path, patch: str, key: str, scratch: Path, out: Path) -> list[str]:
    """Apply ``patch`` to a copy of ``workspace``; write the files it adds or changes under ``out`` (as they are
    after it, executable bits kept, git-ignored ones too); return the paths it deletes.

    Raises:
        ImportRefused: the patch does not apply, or makes a symbolic link.
    """
    copy = scratch / key
    git("clone", "-q", "--shared", "--template=", str(workspace), str(copy), cwd=scratch)
    try:
        # The patch's own list of what it writes: git status would hide files under git-ignored paths.
        listing = git("apply", "--numstat", "-z", "--apply", "--whitespace=nowarn", "-", cwd=copy, stdin=patch.encode())
    except GitError as exc:
        raise ImportRefused(
            f"{key} does not apply at base_commit: {str(exc).rpartition(': ')[2]}; check that base_commit and the "
            "patches belong together"
        ) from None
    # Each entry is ADDED<tab>DELETED<tab>PATH; a rename names only its new path, so deletions are read from git.
    written = [os.fsdecode(entry.split(b"\t", 2)[2]) for entry in listing.split(b"\0") if entry]
    deleted = [os.fsdecode(p) for p in git("ls-files", "--deleted", "-z", cwd=copy).split(b"\0") if p]
    for path in written:
        source, target = copy / path, out / path
        if source.is_symlink():
            raise ImportRefused(f"{key} makes {path} a symbolic link, which a task's {key} files cannot carry")
        if not source.is_file():
            continue  # deleted, or a directory now: ls-files names what was deleted
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        target.chmod(0o755 if source.stat().st_mode & stat.S_IXUSR else 0o644)
    shutil.rmtree(copy)
    return deleted


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _write(instance: dict[str, Any], repos: Path, root: Path, force: bool) -> Task:
    clone = _clone_of(repos, instance["repo"])
    base = instance["base_commit"]
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{root.name}.swebench-", dir=root.parent) as scratch_name:
        scratch = Path(scratch_name)
        workspace = scratch / "workspace"
        try:
            git(
                "clone", "-q", "--no-checkout", "--no-hardlinks", "--template=", str(clone), str(workspace), cwd=scratch
            )
            git("-c", "advice.detachedHead=false", "checkout", "-q", "--detach", base, cwd=workspace)
        except GitError as exc:
            raise ImportRefused(
                f"cannot check out base_commit {base} of {clone}: {str(exc).rpartition(': ')[2]}; fetch it into the "
                "clone"
            ) from None
        try:
            scrub_repository(workspace)
        except ScrubError as exc:
            raise ImportRefused(f"cannot scrub the clone: {exc}") from None
        tests, solution = scratch / "tests", scratch / "solution"
        obsolete = _changes(workspace, instance["test_patch"], "test_patch", scratch, tests)
        deleted = _changes(workspace, instance["patch"], "patch", scratch, solution)
        if deleted:
            raise ImportRefused(
                f"patch deletes {', '.join(deleted[:5])}; a rollbox solution/ is laid over the workspace and can "
                "only add or change files"
            )
        both = sorted((_files(tests) | set(obsolete)) & _files(solution))
        if both:
            raise ImportRefused(f"patch and test_patch both change {', '.join(both[:5])}; keep fix and tests apart")
        # The tests run as after test_patch, which SWE-bench applies whole: the judge removes what it deletes
        # (removed_by_tests). The workspace keeps those files, in its tree and its index, as base_commit has them:
        # a file gone from either would show in git status, a hint of what the hidden tests do.
        size = Tree.of(workspace).bytes
        task = write_task(
            scratch / "task",
            task_id=instance["instance_id"],
            grading=PytestGrading(
                fail_to_pass=instance["fail_to_pass"],
                pass_to_pass=instance["pass_to_pass"],
                tests_in_workspace=True,
                removed_by_tests=tuple(sorted(obsolete)),
            ),
            instruction=instance["problem_statement"],
            workspace=workspace,
            tests=tests if tests.is_dir() else {},
            solution=solution if solution.is_dir() else {},
            environment=Environment(image=instance["image"])
            if "image" in instance
            else Environment(requirements=instance["requirements"]),
            limits=Limits(timeout_s=300, cpu_time_s=300, memory_bytes=2 << 30, pids=256, disk_bytes=size + _DISK_SLACK),
            metadata={"source": "swebench", "repo": instance["repo"], "base_commit": base, **instance["metadata"]},
        )
        audit = audit_task(task)
        if not audit.clean:
            shown = "; ".join(str(f) for f in audit.findings[:3])
            raise ImportRefused(
                f"the scrubbed workspace still holds answers ({len(audit.findings)} findings: {shown}); see "
                f"'rollbox tasks audit' on a copy, and check the repository for copies of the fix"
            )
        if root.exists() and not force:
            raise FileExistsError(f"{root} exists; remove it, or replace it (--force)")
        put_in_place(scratch / "task", root)
    return settle(root)


def _image(template: str, instance: dict[str, Any]) -> str:
    """``template`` with ``{instance_id}``, ``{repo}`` (OWNER__NAME) and ``{version}`` of ``instance`` in place.

    Raises:
        ImportRefused: the template names anything else.
    """
    fields = {
        "instance_id": instance["instance_id"],
        "repo": instance["repo"].replace("/", "__"),
        "version": instance["metadata"].get("version", ""),
    }
    try:
        return template.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise ImportRefused(
            f"the image template {template!r} names {exc}; it may use {{instance_id}}, {{repo}} and {{version}}"
        ) from None


def read_swebench(
    source: str | os.PathLike[str], *, repos: str | os.PathLike[str], image: str | None = None
) -> list[Draft | Refusal]:
    """The instances of a SWE-bench JSON Lines file (see the module's docstring), with their repositories' clones
    in ``repos``: one draft each, or a refusal naming the line and the key.

    ``image``, when given, is a template of each instance's image (``[environment] image``), with
    ``{instance_id}``, ``{repo}`` and ``{version}`` filled in (``"sweb.eval.x86_64.{instance_id}:latest"``): the
    instance's tests run on that image, which holds its environment, and no runtime layer is built for it.
    Without it, each task gets a runtime layer of the instance's requirements (uv), as before.

    Raises:
        ImportSourceError: the file cannot be read.
    """
    found: list[Draft | Refusal] = []
    for record in records(Path(source)):
        if isinstance(record, Refusal):
            found.append(record)
            continue
        try:
            instance = _instance(record)
            if image is not None:
                instance["image"] = _image(image, instance)
        except ImportRefused as exc:
            raw = record.data.get("instance_id")
            found.append(Refusal(raw if isinstance(raw, str) else None, record.where, str(exc)))
            continue
        found.append(Draft(instance["instance_id"], record.where, functools.partial(_write, instance, Path(repos))))
    return found
