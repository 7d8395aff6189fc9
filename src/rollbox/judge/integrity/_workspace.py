"""What the candidate contributes to grading: its changes to the pristine workspace, minus what it may not touch.

The candidate's directory is hostile. It is walked without following any link, every file is opened component by
component with ``O_NOFOLLOW`` (so no link, old or swapped in, leads the judge outside it), FIFOs and devices are
never opened, and a link is carried into the grading tree only as a link that stays inside it.

A change is dropped, and reported as a :class:`Flag`, when it could influence the test runner instead of the code
under test: conftest files, runner configuration, interpreter start-up hooks, modules that shadow the runner or the
standard library, the task's test paths, and test files (the agent's own, or edits to the visible ones). Exceptions::

    RollboxError
    └── WorkspaceError      the candidate's workspace is over a limit or cannot be read (its doing, not the host's)
"""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import stat
import sys
import tomllib
from collections.abc import Collection, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.machinery import all_suffixes
from pathlib import Path

from rollbox.sandbox import RollboxError, WorkspaceChanges

__all__ = [
    "Candidate",
    "Changes",
    "Flag",
    "WorkspaceError",
    "build_grading_tree",
    "candidate_files",
    "diff_workspace",
    "is_protected",
    "removals",
    "stage_changes",
    "workspace_size",
]

_MiB = 1024 * 1024
_IGNORED_NAMES = frozenset({"__pycache__", ".git"})
_RUNNER_CONFIG = frozenset({"pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg"})
_STARTUP_HOOKS = frozenset({"sitecustomize.py", "usercustomize.py"})
_SHADOWED = frozenset({"pytest", "_pytest", "pluggy", "py", "sitecustomize", "usercustomize"}) | sys.stdlib_module_names
_IMPORT_SUFFIXES = sorted(all_suffixes(), key=len, reverse=True)
_CHUNK = 1024 * 1024
#: Linux's limits on one file name and a whole path; the grading tree's own directory comes on top of the path.
_NAME_MAX, _PATH_MAX = 255, 3072


#: The candidate's work: its workspace directory; only its files (workspace-relative path -> content), which
#: stand for the task's workspace with those files written over it; or what it changed in a sandbox's
#: copy-on-write workspace (:meth:`rollbox.Sandbox.read_changes`).
Candidate = Path | Mapping[str, bytes] | WorkspaceChanges


def candidate_files(candidate: Candidate) -> Path | Mapping[str, bytes]:
    """Where the candidate's added and modified files are read from: its directory, its files, or the directory
    its changes were copied to."""
    return candidate.root if isinstance(candidate, WorkspaceChanges) else candidate


class WorkspaceError(RollboxError):
    """The candidate's workspace cannot be graded as submitted: over a limit, or unreadable. The message says why."""


@dataclass(frozen=True)
class Flag:
    """One finding about the candidate's changes. Flags inform; they never fail code by themselves."""

    #: Stable machine name, such as ``protected_path_dropped`` or ``exit_at_import``.
    code: str
    #: Workspace-relative POSIX path, or ``""`` when the finding is not about one file.
    path: str
    #: One readable sentence.
    detail: str

    def to_json(self) -> dict[str, str]:
        """As ``{"code": ..., "path": ..., "detail": ...}``."""
        return {"code": self.code, "path": self.path, "detail": self.detail}


@dataclass(frozen=True)
class Changes:
    """The candidate's changes that grading applies, and what it refused. Paths are relative POSIX, sorted."""

    added: tuple[str, ...]
    modified: tuple[str, ...]
    deleted: tuple[str, ...]
    #: Paths whose change (add, edit or delete) was refused because they are protected; the pristine state stays.
    dropped: tuple[str, ...]
    flags: tuple[Flag, ...]
    #: The size of each added and modified file when it was compared: the grading tree takes no more of it from a
    #: candidate directory (a file grown since, by whatever can still write there, is refused).
    sizes: Mapping[str, int]


@dataclass(frozen=True)
class _Entry:
    kind: str  # "file", "link" or "other" (FIFO, socket, device)
    size: int = 0
    target: str = ""


def _protection(
    path: str, extra: Sequence[str], packages: Container[str] | None, content: bytes | None
) -> tuple[str, str] | None:
    parts = path.split("/")
    name = parts[-1]
    if (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.py"):
        return "test", "it is a test file (test_*.py or *_test.py)"
    for entry in extra:
        root = posixpath.normpath(entry).strip("/")
        if path == root or path.startswith(root + "/"):
            return "other", f"it is under the task's test path {entry!r}"
    if name == "conftest.py":
        return "other", "conftest.py files are loaded by pytest"
    if name in _RUNNER_CONFIG:
        return "other", f"{name} can configure the test runner"
    if name in _STARTUP_HOOKS or name.endswith(".pth"):
        return "other", f"{name} runs at interpreter start-up"
    if name == "pyproject.toml":
        if content is None:
            return "other", "pyproject.toml may configure pytest (its content was not given)"
        try:
            tool = tomllib.loads(content.decode()).get("tool", {})
        # Not UTF-8, not TOML, an integer too long to convert (ValueErrors all), or nested too deeply to parse.
        except (ValueError, RecursionError):
            return "other", "pyproject.toml could not be parsed, so it may configure pytest"
        if isinstance(tool, dict) and "pytest" in tool:
            return "other", "pyproject.toml has a [tool.pytest] section"
    for i, part in enumerate(parts):
        if i > 0 and packages is not None and "/".join(parts[:i]) in packages:
            continue  # inside a package: importable only as pkg.name, never as a top-level name
        last = i == len(parts) - 1
        if not last and packages is not None and "/".join(parts[: i + 1]) not in packages:
            continue  # a directory without __init__.py never shadows a regular module
        module = next((part[: -len(s)] for s in _IMPORT_SUFFIXES if last and part.endswith(s)), part)
        if module in _SHADOWED:
            return "shadow", f"{'/'.join(parts[: i + 1])!r} would shadow the top-level module {module!r}"
    return None


def is_protected(
    path: str,
    *,
    extra: Sequence[str] = (),
    packages: Collection[str] | None = None,
    content: bytes | None = None,
) -> str | None:
    """Why the candidate may not change ``path``, or ``None`` when it may.

    Args:
        path: workspace-relative POSIX path.
        extra: the task's test paths; a path equal to one, or under it, is protected.
        packages: directories ("" for the root) that hold an ``__init__.py``. A module deeper inside a package
            (``mypkg/json.py``) shadows nothing; the root always counts as on ``sys.path``. ``None``: every
            directory is treated as on ``sys.path``.
        content: the file's bytes, for ``pyproject.toml`` (protected without them).

    >>> is_protected("conftest.py")
    'conftest.py files are loaded by pytest'
    >>> is_protected("mypkg/json.py", packages={"mypkg"}) is None
    True
    """
    found = _protection(path, extra, packages, content)
    return found[1] if found else None


def _walk(
    root: Path,
    *,
    bounds: _Bounds | None = None,
    known: Mapping[str, _Entry] | None = None,
    known_dirs: Collection[str] = (),
) -> tuple[dict[str, _Entry], set[str]]:
    """Every non-ignored leaf under ``root`` (never following links), and every directory (relative paths).

    With ``bounds``, what the walk meets past them raises: entries past ``bounds.files``, and bytes of files past
    ``bounds.total_bytes``. With ``known`` (the pristine workspace's leaves) and ``known_dirs`` (its directories),
    only what differs from them counts: an entry at a path they lack, and a file where they have no file of that
    size. So a large workspace costs nothing against the bounds; what the candidate added or grew does.
    """
    leaves: dict[str, _Entry] = {}
    dirs: set[str] = set()
    stack = [""]
    known = known or {}
    count = total = 0
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as it:
            entries = list(it)
        for entry in entries:
            child = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name in _IGNORED_NAMES or entry.name.endswith(".pyc"):
                continue
            st = entry.stat(follow_symlinks=False)
            if child not in known and child not in known_dirs:
                count += 1
                if bounds is not None and count > bounds.files:
                    raise WorkspaceError(
                        f"the candidate workspace {root} adds more than {bounds.files} files and directories to the "
                        "task's; remove generated files, or raise max_files"
                    )
            if stat.S_ISDIR(st.st_mode):
                dirs.add(child)
                stack.append(child)
            elif stat.S_ISREG(st.st_mode):
                leaves[child] = _Entry("file", st.st_size)
                old = known.get(child)
                if old is None or old.kind != "file" or old.size != st.st_size:
                    total += st.st_size
                    if bounds is not None and bounds.total_bytes is not None and total > bounds.total_bytes:
                        raise WorkspaceError(
                            f"the candidate workspace {root} adds or changes more than {bounds.total_bytes} bytes "
                            "of files, the task's disk limit"
                        )
            elif stat.S_ISLNK(st.st_mode):
                leaves[child] = _Entry("link", target=os.readlink(entry.path))
            else:
                leaves[child] = _Entry("other")
    return leaves, dirs


def _open_beneath(root: Path, rel: str) -> int:
    """A read-only fd on the regular file ``rel`` under ``root``; no component may be a link."""
    *parents, name = rel.split("/")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parents:
            parent_fd = fd
            fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
            os.close(parent_fd)
        # O_NONBLOCK: a FIFO swapped in must not hang the judge.
        file_fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(os.fstat(file_fd).st_mode):
        os.close(file_fd)
        raise WorkspaceError(f"{rel!r} in the candidate workspace {root} is no longer a regular file")
    os.set_blocking(file_fd, True)
    return file_fd


def read_candidate_file(candidate: Candidate, rel: str, max_bytes: int) -> bytes:
    """The bytes of the candidate's file ``rel``; in a directory, a regular file read without following links.

    Raises:
        WorkspaceError: it is over ``max_bytes``, or not a regular file.
    """
    files = candidate_files(candidate)
    if isinstance(files, Mapping):
        data = files[rel]
    else:
        with os.fdopen(_open_beneath(files, rel), "rb") as f:
            data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise WorkspaceError(f"{rel!r} in the candidate workspace is over {max_bytes} bytes; raise max_file_bytes")
    return data


def _same_content(pristine: Path, candidate: Path, rel: str) -> bool:
    with open(pristine / rel, "rb") as ours, os.fdopen(_open_beneath(candidate, rel), "rb") as theirs:
        while True:
            a, b = ours.read(_CHUNK), theirs.read(_CHUNK)
            if a != b:
                return False
            if not a:
                return True


def _link_stays_inside(root: Path, rel: str, target: str) -> bool:
    if os.path.isabs(target) or os.path.normpath(os.path.join(os.path.dirname(rel), target)).split("/")[0] == "..":
        return False
    real_root = os.path.realpath(root)
    return os.path.commonpath([real_root, os.path.realpath(root / rel)]) == real_root


def _ancestors(path: str) -> Iterator[str]:
    parts = path.split("/")
    for i in range(1, len(parts)):
        yield "/".join(parts[:i])


def _unusable(candidate: Path, path: str, entry: _Entry, max_file_bytes: int) -> Flag | None:
    """Why a candidate entry cannot be carried over at all (a flag), or None; raises for an oversized file."""
    if entry.kind == "file" and entry.size > max_file_bytes:
        raise WorkspaceError(
            f"{path!r} in the candidate workspace is {entry.size} bytes, over the {max_file_bytes}-byte limit; "
            "raise max_file_bytes if the task needs such files"
        )
    if entry.kind == "other":
        return Flag("special_file_skipped", path, f"{path} is not a regular file or a link, so it was skipped.")
    if entry.kind == "link" and not _link_stays_inside(candidate, path, entry.target):
        return Flag("unsafe_symlink_dropped", path, f"{path} links to {entry.target!r}, outside the workspace.")
    return None


def _unchanged(pristine: Path, candidate: Path, path: str, old: _Entry, new: _Entry) -> bool:
    if old.kind != new.kind:
        return False
    if new.kind == "link":
        return old.target == new.target
    return old.size == new.size and _same_content(pristine, candidate, path)


def _refusal(
    path: str, protected: Sequence[str], packages: Container[str], in_pristine: bool, versions: Sequence[bytes | None]
) -> Flag | None:
    """The flag for a refused change to ``path``, or None when it may be applied."""
    found = None
    for content in versions:  # pyproject.toml: protected when either version configures pytest
        found = found or _protection(path, protected, packages, content)
    if found is None or (found[0] == "shadow" and in_pristine):
        return None  # a stdlib-named module that the task itself ships is the task's to change
    if found[0] != "test":
        code = "protected_path_dropped"
    else:
        code = "visible_test_edit_dropped" if in_pristine else "agent_test_dropped"
    return Flag(code, path, f"The change to {path} was not applied: {found[1]}.")


def _conflicts(applied: Sequence[str], kept: set[str]) -> list[str]:
    """Applied paths that clash with a kept pristine file (a file where the other has a directory)."""
    kept_dirs = {a for k in kept for a in _ancestors(k)}
    return [p for p in applied if p in kept_dirs or any(a in kept for a in _ancestors(p))]


def diff_workspace(
    pristine: Path,
    candidate: Candidate,
    *,
    protected: Sequence[str] = (),
    guard: bool = True,
    max_file_bytes: int = 16 * _MiB,
    max_files: int = 20_000,
    max_total_bytes: int | None = None,
) -> Changes:
    """Compare the candidate's workspace with the pristine one and decide which changes grading applies.

    The bounds hold the candidate's changes, never the task's own workspace: a repository larger than the disk
    limit, with one line changed, is graded like a small one.

    Args:
        pristine: the task's workspace (trusted).
        candidate: the workspace the candidate left behind (hostile); or only its files (workspace-relative path
            -> content), which stand for the pristine workspace with them written over it (nothing is deleted);
            or what it changed in a sandbox whose workspace started as ``pristine``
            (:meth:`rollbox.Sandbox.read_changes`): then only the changes are walked and read.
        protected: the task's test paths (``"tests/"``, or exact files); changes there are refused.
        guard: refuse changes to protected paths (conftest, runner configuration, shadowing modules, tests...).
            Runners that run a test framework over the workspace need it; for a ``function`` or ``stdio`` task
            the candidate's files are only its own program, and nothing is refused.
        max_file_bytes: the largest candidate file accepted.
        max_files: the most files and directories the candidate may add to the pristine workspace.
        max_total_bytes: the most bytes its added and changed files may hold together (the task's disk limit).

    Raises:
        WorkspaceError: the candidate adds more than ``max_files`` entries, a file over ``max_file_bytes``, more
            than ``max_total_bytes`` of added and changed files in all, a path too long for the host (over 255
            bytes a name, 3072 in all), or something that cannot be read; its files name a path that is not a
            clean relative one, or a file where the workspace has a directory (or the reverse).
    """
    bounds = _Bounds(file_bytes=max_file_bytes, files=max_files, total_bytes=max_total_bytes)
    try:
        if isinstance(candidate, Mapping):
            return _diff_files(pristine, candidate, protected, guard, bounds)
        return _diff(pristine, candidate, protected, guard, bounds)
    except OSError as exc:
        what = "files" if isinstance(candidate, Mapping) else f"workspace {candidate_files(candidate)}"
        raise WorkspaceError(f"could not compare the candidate's {what} with {pristine}: {exc}") from exc


@dataclass(frozen=True)
class _Bounds:
    """What :func:`diff_workspace` accepts of a candidate: its ``max_*`` arguments."""

    file_bytes: int
    files: int
    total_bytes: int | None


def _hidden(path: str, deleted: Collection[str], upper: Mapping[str, _Entry], upper_dirs: Collection[str]) -> bool:
    """Whether the overlay's changes replace or remove the pristine leaf ``path``: it, or a directory above it, was
    removed; a file or link was put at it or above it; or a directory at it."""
    if path in deleted or path in upper or path in upper_dirs:
        return True
    return any(a in deleted or a in upper for a in _ancestors(path))


def _ignored(path: str) -> bool:
    return any(part in _IGNORED_NAMES for part in path.split("/")) or path.endswith(".pyc")


def _pristine_at(pristine: Path, points: Iterable[str], subtrees: Iterable[str]) -> dict[str, _Entry]:
    """The pristine workspace's leaves at each of ``points`` (a file or link there), and at or under each of
    ``subtrees``: what the walk of the whole would find there, without walking the rest. A path below a link or a
    non-directory of the pristine workspace has nothing (the walk never follows a link)."""
    found: dict[str, _Entry] = {}
    real_dirs: dict[str, bool] = {"": True}

    def real_dir(path: str) -> bool:
        if path not in real_dirs:
            parent = path.rpartition("/")[0]
            try:
                real_dirs[path] = real_dir(parent) and stat.S_ISDIR(os.lstat(pristine / path).st_mode)
            except FileNotFoundError:
                real_dirs[path] = False
        return real_dirs[path]

    for path, whole in [*((p, False) for p in points), *((p, True) for p in subtrees)]:
        if _ignored(path) or not real_dir(path.rpartition("/")[0]):
            continue
        try:
            st = os.lstat(pristine / path)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode) and whole:
            found.update({f"{path}/{p}": e for p, e in _walk(pristine / path)[0].items()})
        elif stat.S_ISREG(st.st_mode):
            found[path] = _Entry("file", st.st_size)
        elif stat.S_ISLNK(st.st_mode):
            found[path] = _Entry("link", target=os.readlink(pristine / path))
    return {p: e for p, e in found.items() if e.kind != "other"}


class _Packages:
    """The directories of the candidate's workspace that hold an ``__init__.py``, looked up as asked: over an
    overlay, the pristine workspace's own are looked up where the diff never walked."""

    def __init__(self, pristine: Path, theirs: Collection[str], known: Collection[str]) -> None:
        self._pristine, self._theirs, self._known = pristine, theirs, known
        self._found: dict[str, bool] = {}

    def __contains__(self, directory: object) -> bool:
        assert isinstance(directory, str)
        init = f"{directory}/__init__.py" if directory else "__init__.py"
        if init not in self._found:
            if init in self._theirs or init in self._known:  # a pristine one known and not theirs: it is gone
                self._found[init] = init in self._theirs
            else:
                self._found[init] = _pristine_at(self._pristine, [init], []).get(init, _Entry("")).kind == "file"
        return self._found[init]


@dataclass(frozen=True)
class _Trees:
    """The pristine leaves a diff needs, the candidate's leaves, those of them it wrote, and its packages."""

    ours: dict[str, _Entry]
    theirs: dict[str, _Entry]
    written: set[str]
    packages: Container[str]


def _trees(pristine: Path, candidate: Path | WorkspaceChanges, bounds: _Bounds) -> _Trees:
    """What :func:`_diff` compares. For a candidate directory: both whole trees. For an overlay's changes: only
    what they touch, so that the diff costs what they hold: the written leaves, and of the pristine workspace
    the leaves at their paths and under what they removed or replaced (the rest is the candidate's unchanged)."""
    if isinstance(candidate, WorkspaceChanges) and not candidate.whole:
        for path in candidate.deleted:
            _check_relative(path)
        written, upper_dirs = _walk(candidate.root, bounds=bounds)
        ours = _pristine_at(pristine, upper_dirs, [*candidate.deleted, *written])
        deleted = set(candidate.deleted)
        kept = {p: e for p, e in ours.items() if not _hidden(p, deleted, written, upper_dirs)}
        theirs = {**kept, **written}
        return _Trees(ours, theirs, set(written), _Packages(pristine, theirs, ours))
    leaves, our_dirs = _walk(pristine)
    ours = {p: e for p, e in leaves.items() if e.kind != "other"}
    root = candidate_files(candidate)
    assert isinstance(root, Path)
    theirs = _walk(root, bounds=bounds, known=ours, known_dirs=our_dirs)[0]
    packages = {p.rpartition("/")[0] for p in theirs if p.rpartition("/")[2] == "__init__.py"}
    return _Trees(ours, theirs, set(theirs), packages)


def _diff(
    pristine: Path, candidate: Path | WorkspaceChanges, protected: Sequence[str], guard: bool, bounds: _Bounds
) -> Changes:
    trees = _trees(pristine, candidate, bounds)
    ours, theirs, written, packages = trees.ours, trees.theirs, trees.written, trees.packages
    root = candidate_files(candidate)
    assert isinstance(root, Path)
    for path in written:
        _check_name_lengths(path)
    added: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    dropped: list[str] = []
    flags: list[Flag] = []

    def toml(root: Path, path: str, entry: _Entry | None) -> bytes | None:
        if entry is None or entry.kind != "file" or path.rpartition("/")[2] != "pyproject.toml":
            return None
        return read_candidate_file(root, path, bounds.file_bytes)

    def refused(path: str, *versions: bytes | None) -> bool:
        if not guard:
            return False
        flag = _refusal(path, protected, packages, path in ours, [v for v in versions if v is not None] or [None])
        if flag is not None:
            dropped.append(path)
            flags.append(flag)
        return flag is not None

    for path in sorted(written):
        entry = theirs[path]
        if (skip := _unusable(root, path, entry, bounds.file_bytes)) is not None:
            flags.append(skip)  # the pristine version, if any, stays
            continue
        old = ours.get(path)
        if old is not None and _unchanged(pristine, root, path, old, entry):
            continue
        if not refused(path, toml(root, path, entry), toml(pristine, path, old)):
            (added if old is None else modified).append(path)
    for path, old in sorted(ours.items()):
        if path not in theirs and not refused(path, toml(pristine, path, old)):
            deleted.append(path)
    for path in _conflicts([*added, *modified], set(ours) - set(deleted) - set(modified)):
        (added if path in added else modified).remove(path)
        dropped.append(path)
        flags.append(Flag("path_conflict_dropped", path, f"{path} clashes with a protected file that stays."))
    sizes = {path: theirs[path].size for path in (*added, *modified)}
    if bounds.total_bytes is not None and sum(sizes.values()) > bounds.total_bytes:
        raise WorkspaceError(
            f"the candidate's added and changed files hold {sum(sizes.values())} bytes, more than "
            f"{bounds.total_bytes}, the task's disk limit"
        )
    return Changes(
        added=tuple(added),
        modified=tuple(modified),
        deleted=tuple(deleted),
        dropped=tuple(sorted(dropped)),
        flags=tuple(flags),
        sizes=sizes,
    )


def _diff_files(
    pristine: Path, files: Mapping[str, bytes], protected: Sequence[str], guard: bool, bounds: _Bounds
) -> Changes:
    leaves, dirs = _walk(pristine)
    ours = {p: e for p, e in leaves.items() if e.kind != "other"}
    _check_files(files, ours, dirs, bounds)
    packages = {p.rpartition("/")[0] for p in (*ours, *files) if p.rpartition("/")[2] == "__init__.py"}
    added: list[str] = []
    modified: list[str] = []
    dropped: list[str] = []
    flags: list[Flag] = []
    for path, data in sorted(files.items()):
        old = ours.get(path)
        before = (pristine / path).read_bytes() if old is not None and old.kind == "file" else None
        if before == data:
            continue
        versions = [data, *([before] if before is not None else [])]
        flag = _refusal(path, protected, packages, old is not None, versions) if guard else None
        if flag:
            dropped.append(path)
            flags.append(flag)
        else:
            (added if old is None else modified).append(path)
    return Changes(
        added=tuple(added),
        modified=tuple(modified),
        deleted=(),
        dropped=tuple(sorted(dropped)),
        flags=tuple(flags),
        sizes={path: len(files[path]) for path in (*added, *modified)},
    )


def _check_files(
    files: Mapping[str, bytes], ours: Mapping[str, _Entry], dirs: Collection[str], bounds: _Bounds
) -> None:
    """Refuse candidate files that do not describe a workspace, or pass a limit."""
    if len(files) > bounds.files:
        raise WorkspaceError(f"the candidate gave {len(files)} files, more than {bounds.files}; raise max_files")
    for path, data in files.items():
        check_solution_path(path)
        if len(data) > bounds.file_bytes:
            raise WorkspaceError(
                f"{path!r} of the candidate is {len(data)} bytes, over the {bounds.file_bytes}-byte limit; raise "
                "max_file_bytes if the task needs such files"
            )
        if path in dirs:
            raise WorkspaceError(f"{path!r} is a directory of the task's workspace; the candidate gave it as a file")
        for ancestor in _ancestors(path):
            if ancestor in ours or ancestor in files:
                raise WorkspaceError(f"{path!r} needs {ancestor!r} to be a directory, but it is a file")
    total = sum(map(len, files.values()))
    if bounds.total_bytes is not None and total > bounds.total_bytes:
        raise WorkspaceError(
            f"the candidate's files hold {total} bytes, more than {bounds.total_bytes}, the task's disk limit"
        )


def check_solution_path(path: str) -> None:
    """Refuse a path of a solution's files (:data:`rollbox.judge.Solution` as a mapping) that grading could never
    lay: one that is not a clean workspace-relative path, or one the host's filesystem cannot hold. A caller checks
    a solution with it before grading (a job's payload when it is submitted); grading checks it again.

    Raises:
        WorkspaceError: what is wrong with the path (a :class:`rollbox.RollboxError`).
    """
    _check_relative(path)
    _check_name_lengths(path)


def _check_name_lengths(path: str) -> None:
    """Refuse a path the host's filesystem cannot hold, which would otherwise fail as the host's error."""
    try:
        encoded = os.fsencode(path)
    except UnicodeEncodeError:
        raise WorkspaceError(f"{path!r} cannot be a file name (it is not valid text)") from None
    if len(encoded) > _PATH_MAX or any(len(part) > _NAME_MAX for part in encoded.split(b"/")):
        raise WorkspaceError(f"{path[:80]!r}... is too long for a path ({_NAME_MAX} bytes a name, {_PATH_MAX} in all)")


def _check_relative(path: str) -> None:
    if not path or path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in path.split("/")):
        raise WorkspaceError(f"{path!r} is not a clean workspace-relative path (like 'src/solution.py')")


def _copy_pristine(pristine: Path, dest: Path, replaced: Collection[str]) -> None:
    leaves, dirs = _walk(pristine)
    for rel in sorted(dirs):
        (dest / rel).mkdir()
    for rel, entry in leaves.items():
        if rel in replaced:
            continue  # the candidate's version goes there
        if entry.kind == "link":
            os.symlink(entry.target, dest / rel)
        elif entry.kind == "file":
            shutil.copy2(pristine / rel, dest / rel, follow_symlinks=False)


def removals(pristine: Path, changes: Changes) -> tuple[str, ...]:
    """What to remove from the pristine workspace to apply ``changes``, before their files are written: the deleted
    files, the directories the deletions empty (of everything the walk sees, with nothing added in them), each
    directory instead of anything below it, and the links the candidate replaced (a file is never written through
    one). Sorted.

    Raises:
        OSError: the pristine workspace cannot be read.
    """
    gone = set(changes.deleted) | {p for p in changes.modified if (pristine / p).is_symlink()}
    written = {a for p in (*changes.added, *changes.modified) for a in _ancestors(p)}
    for directory in sorted({a for p in changes.deleted for a in _ancestors(p)}, key=lambda d: -d.count("/")):
        # Deepest first: a directory's emptied subdirectories are known by now. Its entries as the walk sees them.
        with os.scandir(pristine / directory) as entries:
            children = [f"{directory}/{e.name}" for e in entries if not _ignored(e.name)]
        if directory not in written and all(c in gone for c in children):
            gone.add(directory)
    return tuple(sorted(p for p in gone if not any(a in gone for a in _ancestors(p))))


@functools.lru_cache(maxsize=1024)
def workspace_size(pristine: Path) -> tuple[int, int]:
    """The entries (files, links, directories) and bytes of files of a task's workspace, as the judge walks it
    (without caches and .git). Remembered per path: it only chooses how a grading tree is made, never what it
    holds, so a workspace changed since costs at most a slower choice."""
    leaves, dirs = _walk(pristine)
    return len(leaves) + len(dirs), sum(e.size for e in leaves.values())


def _place(candidate: Path | Mapping[str, bytes], dest: Path, rel: str, size: int, made: set[str]) -> None:
    """Copy ``rel`` from the candidate to ``dest``. ``made`` holds the directories already made ready in ``dest``
    (with their ancestors): each is checked once, not once for each file below it, whose path the candidate can
    make hundreds of directories deep."""
    target = dest / rel
    if rel.rpartition("/")[0] not in made:
        for ancestor in _ancestors(rel):
            if ancestor in made:
                continue
            at = dest / ancestor
            if at.is_symlink() or (at.exists() and not at.is_dir()):
                at.unlink()  # a pristine file the candidate replaced with a directory (its deletion was applied)
            if not at.exists():
                at.mkdir()
            made.add(ancestor)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir():
        shutil.rmtree(target)  # a pristine directory the candidate replaced with a file
    if isinstance(candidate, Mapping):
        with open(target, "xb") as out:
            out.write(candidate[rel])
        target.chmod(0o644)
        return
    try:  # reading the candidate's tree: a failure here is the candidate's doing
        st = os.lstat(candidate / rel)
        link = os.readlink(candidate / rel) if stat.S_ISLNK(st.st_mode) else None
        source = None if link is not None else _open_beneath(candidate, rel)
    except OSError as exc:
        raise WorkspaceError(f"{rel!r} in the candidate workspace could not be read: {exc.strerror}") from exc
    if link is not None:
        if not _link_stays_inside(candidate, rel, link):
            raise WorkspaceError(f"{rel!r} in the candidate workspace changed into a link out of it since the diff")
        os.symlink(link, target)
        return
    assert source is not None
    with os.fdopen(source, "rb") as src, open(target, "xb") as out:
        left = size
        while left and (chunk := src.read(min(_CHUNK, left))):
            out.write(chunk)
            left -= len(chunk)
        if src.read(1):
            raise WorkspaceError(f"{rel!r} in the candidate workspace grew since the diff ({size} bytes then)")
    target.chmod(0o755 if st.st_mode & stat.S_IXUSR else 0o644)


def stage_changes(candidate: Candidate, dest: Path, changes: Changes) -> None:
    """Copy only the added and modified files of ``changes`` from the candidate to ``dest`` (an empty directory,
    made if missing): what is written over the pristine workspace, once :func:`removals` are removed from it.

    Links are copied as links, only where they stay inside the tree; no file is copied past its size when diffed.

    Raises:
        WorkspaceError: ``dest`` is not empty, ``changes`` holds an unclean path, or the candidate's workspace
            changed since the diff (a file turned into a link out of it, a FIFO, or vanished).
        RollboxError: writing ``dest`` failed (a host fault).
    """
    _build(candidate, dest, changes, None)


def build_grading_tree(pristine: Path, candidate: Candidate, dest: Path, changes: Changes) -> None:
    """Build ``dest`` = the pristine workspace plus the changes :func:`diff_workspace` allowed.

    Added and modified files are copied from the candidate (links as links, only where they stay inside the
    tree), deleted ones removed, with the directories their removal empties. ``dest`` must not exist, or be an
    empty directory.

    Raises:
        WorkspaceError: ``dest`` is not empty, ``changes`` holds an unclean path, or the candidate's workspace
            changed since the diff (a file turned into a link out of it, a FIFO, or vanished).
        RollboxError: writing ``dest`` failed (a host fault).
    """
    _build(candidate, dest, changes, pristine)


def _build(candidate: Candidate, dest: Path, changes: Changes, pristine: Path | None) -> None:
    for path in (*changes.added, *changes.modified, *changes.deleted):
        _check_relative(path)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise WorkspaceError(f"the grading tree {dest} must be an empty directory; it already holds files")
    files = candidate_files(candidate)
    try:
        if pristine is not None:
            _copy_pristine(pristine, dest, set(changes.modified))
            for rel in removals(pristine, changes):
                if (dest / rel).is_dir() and not (dest / rel).is_symlink():
                    shutil.rmtree(dest / rel)
                else:
                    (dest / rel).unlink(missing_ok=True)  # a modified file: never copied
        made = {""}  # dest itself
        for rel in sorted((*changes.added, *changes.modified)):
            _place(files, dest, rel, changes.sizes[rel], made)
    except OSError as exc:
        # Writing the host's temporary directory failed (the candidate's tree fit the limits already): a host fault.
        raise RollboxError(f"could not build the grading tree {dest} from {files}: {exc}") from exc
