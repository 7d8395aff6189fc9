"""Scrubbing a workspace's git repository down to one commit's history, so that it carries no answer.

What a scrubbed repository keeps: the commit HEAD points at and the history behind it, on one branch ``main``, a
clean index of that commit, and a configuration of only the repository format. What goes: every other branch and
tag, remote-tracking refs and remotes, notes, replace refs, the stash, reflogs, hooks, rerere records, the last
commit message, ``FETCH_HEAD``/``ORIG_HEAD`` and the like, linked worktrees' records, alternates (their objects
are copied in first), commit graphs, and every object, loose or packed, that the kept history does not reach
(pruned with expiry "now"). The end state is checked, not assumed: every object ``git cat-file
--batch-all-objects`` lists must be reachable from the kept branch (or the index), and nothing but that branch
may remain among the refs.

The repository's own configuration is replaced before any other git command runs in it, so that nothing in it
(a filter, an fsmonitor command, a pager) can run.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox import RollboxError

from ._git import GitError, git

__all__ = ["ScrubError", "ScrubReport", "scrub_repository"]

_BRANCH = "main"
#: What .git keeps at its top level; everything else (FETCH_HEAD, ORIG_HEAD, COMMIT_EDITMSG, logs/, hooks/,
#: rr-cache/, worktrees/, modules/, rebase state, ...) is removed.
_KEEP = {"HEAD", "config", "description", "index", "info", "objects", "refs", "packed-refs", "shallow"}
#: Configuration kept from the old file: the repository format and how the working tree's files are read.
_KEPT_CONFIG = ("core.repositoryformatversion", "core.filemode", "core.symlinks", "core.ignorecase", "extensions.")


class ScrubError(RollboxError):
    """A repository cannot be scrubbed (no .git directory, a partial clone, submodules), or the scrub did not
    leave what it must; the message says which and what to do."""


@dataclass(frozen=True)
class ScrubReport:
    """What a scrub kept and removed."""

    #: The commit kept, with its history.
    commit: str
    #: Every ref there was before, but the kept branch (branches, tags, remote-tracking refs, the stash, ...).
    removed_refs: tuple[str, ...]
    #: Objects in the repository before and after.
    objects_before: int
    objects_after: int


def _objects(repo: Path) -> set[str]:
    out = git("cat-file", "--batch-all-objects", "--batch-check=%(objectname)", cwd=repo)
    return set(out.decode().split())


def _new_config(repo: Path) -> str:
    """The configuration a scrubbed repository keeps, read from the old file without running anything."""
    try:
        listing = git("config", "--file", str(repo / ".git" / "config"), "--list", "-z", cwd=repo)
    except GitError as exc:
        raise ScrubError(f"{repo}/.git/config cannot be read: {exc}") from None
    kept: dict[str, str] = {"core.bare": "false", "core.logallrefupdates": "false"}
    for item in listing.decode("utf-8", "replace").split("\0"):
        key, _, value = item.partition("\n")
        key = key.lower()
        if key.startswith("extensions.") and key != "extensions.objectformat":
            raise ScrubError(
                f"{repo}: the repository uses {key} (a partial clone, or a worktree setup): clone it fully, "
                "without --filter, and scrub that clone"
            )
        if any(key == k or (k.endswith(".") and key.startswith(k)) for k in _KEPT_CONFIG):
            kept[key] = value
    lines: list[str] = []
    for section in sorted({k.split(".")[0] for k in kept}):
        lines.append(f"[{section}]")
        lines += [f"\t{k.split('.', 1)[1]} = {v}" for k, v in sorted(kept.items()) if k.split(".")[0] == section]
    return "\n".join(lines) + "\n"


def _clean_git_dir(repo: Path) -> None:
    """Reduce .git to what a repository needs (see ``_KEEP``), making its objects its own first."""
    dot_git = repo / ".git"
    linked = [*(dot_git / name for name in _KEEP), dot_git / "objects" / "info", dot_git / "objects" / "pack"]
    if any(p.is_symlink() for p in linked):
        shown = ", ".join(str(p.relative_to(repo)) for p in linked if p.is_symlink())
        raise ScrubError(f"{repo}: {shown} is a symbolic link; scrub only a repository whose .git is its own")
    if (dot_git / "modules").exists():
        raise ScrubError(f"{repo} has submodules (.git/modules); scrubbing their histories is not supported")
    config = _new_config(repo)
    _remove(dot_git / "config")
    (dot_git / "config").write_text(config)
    alternates = dot_git / "objects" / "info" / "alternates"
    if alternates.exists():  # objects borrowed from another repository: copy in what the repository reaches
        git("repack", "-a", "-d", "-q", cwd=repo)
        alternates.unlink()
    for entry in dot_git.iterdir():
        if entry.name not in _KEEP:
            _remove(entry)
    for entry in (dot_git / "info").iterdir() if (dot_git / "info").is_dir() else []:
        if entry.name != "exclude":
            _remove(entry)
    objects = dot_git / "objects"
    for extra in (objects / "info" / "commit-graph", objects / "info" / "commit-graphs", objects / "info" / "packs"):
        _remove(extra)
    for entry in (objects / "pack").iterdir() if (objects / "pack").is_dir() else []:
        if entry.suffix in (".keep", ".bitmap", ".rev", ".promisor", ".mtimes") or entry.name.startswith(
            "multi-pack-index"
        ):
            _remove(entry)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def scrub_repository(repo: str | os.PathLike[str]) -> ScrubReport:
    """Scrub the git repository whose working tree is ``repo`` down to the history of its HEAD commit (see the
    module's docstring). The working tree's files are left as they are.

    Raises:
        ScrubError: ``repo`` has no .git directory (a .git file points elsewhere), HEAD names no commit, it is a
            partial clone or has submodules, or the end state is not as it must be.
        GitError: a git command failed (the message has its error output).
    """
    repo = Path(repo)
    if not (repo / ".git").is_dir() or (repo / ".git").is_symlink():
        raise ScrubError(f"{repo}: no .git directory; give the working tree of a repository with its own .git")
    _clean_git_dir(repo)
    try:
        commit = git("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cwd=repo).decode().strip()
    except GitError:
        raise ScrubError(f"{repo}: HEAD names no commit; check out the commit to keep first") from None
    before = _objects(repo)
    refs = git("for-each-ref", "--format=%(refname)", cwd=repo).decode().split()
    git("update-ref", "--no-deref", "--stdin", cwd=repo, stdin="".join(f"delete {r}\n" for r in refs).encode())
    git("update-ref", f"refs/heads/{_BRANCH}", commit, cwd=repo)
    git("symbolic-ref", "HEAD", f"refs/heads/{_BRANCH}", cwd=repo)
    git("read-tree", commit, cwd=repo)  # the index holds the kept commit, and nothing staged beyond it
    _remove(repo / ".git" / "logs")
    git(
        *("-c", "gc.writeCommitGraph=false", "-c", "repack.writeBitmaps=false", "-c", "gc.cruftPacks=false"),
        *("-c", "gc.reflogExpire=now", "-c", "gc.reflogExpireUnreachable=now", "-c", "gc.pruneExpire=now"),
        *("gc", "--prune=now", "--quiet"),
        cwd=repo,
    )
    _remove(repo / ".git" / "logs")  # gc may begin one for the branch it packs
    after = _check(repo, commit)
    return ScrubReport(
        commit=commit,
        removed_refs=tuple(r for r in refs if r != f"refs/heads/{_BRANCH}"),
        objects_before=len(before),
        objects_after=len(after),
    )


def _check(repo: Path, commit: str) -> set[str]:
    """The objects left, after checking that every one is reachable and only the kept branch remains.

    Raises:
        ScrubError: anything else survived.
    """
    refs = git("for-each-ref", "--format=%(refname) %(objectname)", cwd=repo).decode().split("\n")
    if [r for r in refs if r] != [f"refs/heads/{_BRANCH} {commit}"]:
        raise ScrubError(f"{repo}: refs other than {_BRANCH} survived the scrub: {refs}")
    listing = git("rev-list", "--objects", "--all", "--indexed-objects", cwd=repo).decode()
    reachable = {line.split(" ", 1)[0] for line in listing.splitlines() if line}
    left = _objects(repo)
    unreachable = left - reachable
    if unreachable:
        raise ScrubError(
            f"{repo}: {len(unreachable)} objects the kept history does not reach survived the scrub "
            f"(such as {sorted(unreachable)[0]}); report this as a rollbox bug"
        )
    return left
