"""The workspace hash: the sha256 of a task's workspace/ tree, recorded in task.toml and checked when the task loads.

What it covers, in a deterministic order (entries sorted by their relative path's bytes): every directory's name,
every file's name, executable bit and content, every symbolic link's name and target (never followed). Nothing
else: not owners, times, or permission bits other than "executable", which is all a sandbox keeps of a file's mode
(the sandbox writes workspace files 0755 or 0644). A FIFO, socket or device in the tree is refused.

Why a stat cache: hashing a 100 MB tree costs about a second of reading on every load, and tasks are loaded
often (every grading process, every ``tasks list``). Each file's digest is kept under ``$ROLLBOX_HOME/cache``
keyed by its stat signature (inode, size, modification and change times, to the nanosecond), so a load re-reads
only the files whose signature changed and costs a walk of the tree otherwise. The change time cannot be set by
any user, so an edit that restores the old modification time (``touch -d``) is still seen. A file changed within
two seconds of being hashed is never cached (a later write in the same clock tick could keep its signature): it
is read again next time. A small tree (64 files, 1 MiB) is hashed directly: reading and writing its cache would
cost more. The cache is only a shortcut: a missing, unreadable or corrupt cache means every file is
read, never that a check is skipped. Verifying where sandboxes start instead would leave ``load_task`` answering
for a task whose pristine state it never checked; checking at load keeps one rule in one place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

from ._errors import TaskFormatError

__all__ = ["WorkspaceChangedError", "rollbox_home", "tree_entries", "verify_workspace", "workspace_sha256"]

_PREFIX = b"rollbox-workspace-v1\0"
_CACHE_VERSION = 1
#: A file modified this recently is not cached: a write in the same tick of the file system's clock could leave
#: its signature unchanged (git's "racy" entries).
_RACY_NS = 2_000_000_000
_SHOWN_CHANGES = 8
#: A tree this small (files and bytes) is hashed directly: cheaper than reading and writing its cache.
_DIRECT_FILES = 64
_DIRECT_BYTES = 1 << 20


class WorkspaceChangedError(TaskFormatError):
    """A task's workspace/ no longer matches the sha256 its task.toml records."""


def rollbox_home() -> Path:
    """rollbox's own directory for caches and stores: ``$ROLLBOX_HOME``, by default ``~/.rollbox``."""
    return Path(os.environ.get("ROLLBOX_HOME") or Path.home() / ".rollbox")


def _cache_file(root: Path) -> Path:
    key = hashlib.sha256(os.fsencode(os.path.realpath(root))).hexdigest()[:40]
    return rollbox_home() / "cache" / "workspace-hashes" / f"{key}.json"


def _read_cache(path: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError, RecursionError):
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, dict) and data.get("version") == _CACHE_VERSION:
            return data
    return {}


def _write_cache(path: Path, data: dict[str, Any]) -> None:
    """Replace the cache file atomically; a cache that cannot be written only costs time later."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, separators=(",", ":"))
            os.replace(temporary, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


def tree_entries(root: Path) -> list[tuple[bytes, os.stat_result]]:
    """Every entry under ``root`` (relative path, lstat), sorted by path. Iterative: trees may be deep.

    Raises:
        TaskFormatError: the tree holds a FIFO, socket or device, or cannot be read.
    """
    base = os.fsencode(root)
    found: list[tuple[bytes, os.stat_result]] = []
    stack = [b""]
    try:
        while stack:
            relative = stack.pop()
            with os.scandir(os.path.join(base, relative) if relative else base) as listing:
                for entry in listing:
                    path = os.path.join(relative, entry.name) if relative else entry.name
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(path)
                    elif not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                        raise TaskFormatError(
                            root / os.fsdecode(path),
                            "is a FIFO, socket or device: a workspace holds only files, directories and links; "
                            "remove it",
                        )
                    found.append((path, st))
    except OSError as exc:
        raise TaskFormatError(root, f"cannot read the workspace tree ({exc})") from None
    found.sort(key=lambda item: item[0])
    return found


def _file_digest(path: bytes) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _compute(
    root: Path, entries: list[tuple[bytes, os.stat_result]], cache: dict[str, Any]
) -> tuple[str, dict[str, str], dict[str, list[Any]]]:
    """The tree's hash, its manifest (each entry's record, by path) and the file signatures to cache."""
    known: dict[str, list[Any]] = cache.get("files", {}) if isinstance(cache.get("files"), dict) else {}
    fresh: dict[str, list[Any]] = {}
    manifest: dict[str, str] = {}
    digest = hashlib.sha256(_PREFIX)
    base = os.fsencode(root)
    now_ns = time.time_ns()
    for path, st in entries:
        name = os.fsdecode(path)
        if stat.S_ISDIR(st.st_mode):
            record = b"d " + path + b"\0"
            manifest[name] = "directory"
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(os.path.join(base, path))
            record = b"l " + path + b"\0" + target + b"\0"
            manifest[name] = "link to " + os.fsdecode(target)
        else:
            signature = [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
            cached = known.get(name)
            if isinstance(cached, list) and len(cached) == 5 and cached[:4] == signature:
                content = str(cached[4])
            else:
                try:
                    content = _file_digest(os.path.join(base, path))
                except OSError as exc:
                    raise TaskFormatError(root / name, f"cannot read it to hash the workspace ({exc})") from None
            if max(st.st_mtime_ns, st.st_ctime_ns) < now_ns - _RACY_NS:
                fresh[name] = [*signature, content]
            executable = bool(st.st_mode & stat.S_IXUSR)
            record = b"f " + (b"x " if executable else b"- ") + path + b"\0" + bytes.fromhex(content)
            manifest[name] = ("executable file " if executable else "file ") + content
        digest.update(record)
    return digest.hexdigest(), manifest, fresh


def _hash(root: Path, *, good: str | None = None, record: bool = False) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The tree's hash, its manifest, and the cache as it was; the cache is updated with the new signatures, and
    with this tree's manifest when it is the ``good`` one (or, with ``record``, whatever it is). A small tree is
    hashed directly, the cache read only to say what changed: reading and writing the cache would cost more."""
    entries = tree_entries(root)
    files = [st for _, st in entries if stat.S_ISREG(st.st_mode)]
    if not record and len(files) <= _DIRECT_FILES and sum(st.st_size for st in files) <= _DIRECT_BYTES:
        tree, manifest, _ = _compute(root, entries, {})
        return tree, manifest, {} if good is None or tree == good else _read_cache(_cache_file(root))
    file = _cache_file(root)
    cache = _read_cache(file)
    tree, manifest, fresh = _compute(root, entries, cache)
    verified = cache.get("verified") if isinstance(cache.get("verified"), dict) else None
    if (record or tree == good) and (verified is None or verified.get("sha256") != tree):
        verified = {"sha256": tree, "manifest": manifest}
    if fresh != cache.get("files") or verified is not cache.get("verified"):
        _write_cache(file, {"version": _CACHE_VERSION, "root": os.fsdecode(root), "files": fresh, "verified": verified})
    return tree, manifest, cache


def workspace_sha256(root: str | os.PathLike[str]) -> str:
    """The sha256 (hex) of the workspace tree at ``root`` (see the module's docstring for what it covers).

    Raises:
        TaskFormatError: the tree holds a special file, or a file cannot be read.
    """
    tree, _, _ = _hash(Path(root))
    return tree


def record_workspace(root: Path) -> str:
    """The hash of ``root``, remembered as the good one (so that a later mismatch can name what changed)."""
    tree, _, _ = _hash(root, record=True)
    return tree


def _changes(before: dict[str, str], after: dict[str, str]) -> list[str]:
    changes = [f"{name} changed" for name in sorted(before.keys() & after.keys()) if before[name] != after[name]]
    changes += [f"{name} added" for name in sorted(after.keys() - before.keys())]
    changes += [f"{name} removed" for name in sorted(before.keys() - after.keys())]
    return changes


def verify_workspace(task_id: str, task_dir: Path, recorded: str) -> None:
    """Check ``task_dir``/workspace against the sha256 its task.toml records.

    Raises:
        WorkspaceChangedError: it no longer matches; the message names the task, what changed (when a verified
            state of this workspace is cached), and how to re-record the hash.
        TaskFormatError: the tree cannot be hashed.
    """
    root = task_dir / "workspace"
    tree, manifest, cache = _hash(root, good=recorded)
    if tree == recorded:
        return
    verified = cache.get("verified")
    detail = ""
    if isinstance(verified, dict) and verified.get("sha256") == recorded and isinstance(verified.get("manifest"), dict):
        changes = _changes(verified["manifest"], manifest)
        more = f", and {len(changes) - _SHOWN_CHANGES} more" if len(changes) > _SHOWN_CHANGES else ""
        detail = f" ({', '.join(changes[:_SHOWN_CHANGES])}{more})"
    raise WorkspaceChangedError(
        task_dir / "task.toml",
        f"task {task_id!r}: workspace/ no longer matches its recorded hash{detail}: [workspace] sha256 = "
        f"{recorded[:16]}..., the tree now hashes to {tree[:16]}.... Restore the workspace, or, if the change is "
        f"meant, record the new hash with 'rollbox tasks rehash {task_dir}' (or import the task again with --force)",
    )
