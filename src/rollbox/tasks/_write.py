"""Writing a native task directory: what importers produce, and what :func:`load_task` reads back.

A task is written whole or not at all: it is built in a staging directory beside its destination, its workspace
hash recorded in task.toml, checked by loading it, and only then renamed into place.
"""

from __future__ import annotations

import contextlib
import enum
import os
import re
import secrets
import shutil
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path, PurePosixPath
from typing import Any

from rollbox.sandbox import Limits, Network

from ._digest import record_workspace, tree_entries, verify_workspace
from ._environment import Environment
from ._errors import TaskFormatError
from ._load import load_task
from ._model import FunctionGrading, Grading, PytestGrading, RewardSpec, ScriptGrading, StdioGrading, Task
from ._toml import dumps

__all__ = ["Files", "put_in_place", "rehash_task", "settle", "write_task"]

#: Files to write: a mapping of relative paths (``/``-separated) to contents (text is written as UTF-8), or a host
#: directory whose files, directories and links are copied (links as links, executable bits kept).
Files = Mapping[str, str | bytes] | Path

_RUNNERS: dict[type, str] = {
    PytestGrading: "pytest",
    FunctionGrading: "function",
    StdioGrading: "stdio",
    ScriptGrading: "script",
}
_MiB = 1 << 20


def _duration(seconds: float) -> str:
    text = f"{seconds:.6f}".rstrip("0").rstrip(".")
    return f"{text}s"


def _size(count: int) -> str:
    return f"{count // _MiB}M" if count % _MiB == 0 else str(count)


def _limits_table(limits: Limits, network: Network) -> dict[str, Any]:
    """The ``[limits]`` keys that differ from the defaults."""
    if limits.file_size_bytes is not None:
        raise ValueError("Limits.file_size_bytes has no task.toml key; leave it unset (it follows the disk limit)")
    default = Limits()
    table: dict[str, Any] = {}
    for key, name, spell in (
        ("timeout", "timeout_s", _duration),
        ("cpu_time", "cpu_time_s", _duration),
        ("memory", "memory_bytes", _size),
        ("output", "output_bytes", _size),
        ("disk", "disk_bytes", _size),
        ("pids", "pids", int),
        ("open_files", "open_files", int),
    ):
        value = getattr(limits, name)
        if value != getattr(default, name):
            table[key] = spell(value)
    if network is not Network.NONE:
        table["network"] = network.value
    return table


def _plain(value: Any) -> Any:
    """A model value as TOML holds it: an enum by its value, a tuple as a list."""
    if isinstance(value, enum.Enum):
        return value.value
    return list(value) if isinstance(value, tuple) else value


def _grading_table(grading: Grading, reward: RewardSpec) -> dict[str, Any]:
    """``[grading]``: the runner, its settings and the reward's, each only where it differs from the default (a
    function task's cases always: the loader's default for them depends on ``check``)."""
    table: dict[str, Any] = {"runner": _RUNNERS[type(grading)]}
    for spec in fields(grading):
        value = getattr(grading, spec.name)
        explicit = isinstance(grading, FunctionGrading) and spec.name == "cases"
        if value is not None and (explicit or value != spec.default):
            table[spec.name] = _plain(value)
    for spec in fields(reward):
        value = getattr(reward, spec.name)
        if value != spec.default:
            table["reward" if spec.name == "kind" else spec.name] = _plain(value)
    return table


def _environment_table(environment: Environment) -> dict[str, Any]:
    table: dict[str, Any] = {}
    if environment.python is not None:
        table["python"] = environment.python
    if environment.requirements:
        table["requirements"] = list(environment.requirements)
    if environment.env:
        table["env"] = dict(environment.env)
    if environment.image is not None:
        table["image"] = environment.image
    return table


def _relative(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if not name or "\0" in name or path.is_absolute() or ".." in path.parts or name.endswith("/"):
        raise ValueError(f"{name!r} is not a relative file path without '..'")
    return path


def _write_files(directory: Path, files: Files) -> None:
    """Write ``files`` under ``directory`` (made, even when there are none)."""
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(files, Path):
        _copy_tree(files, directory)
        return
    for name, content in files.items():
        target = directory.joinpath(*_relative(name).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode() if isinstance(content, str) else content)


def _copy_tree(source: Path, directory: Path) -> None:
    """Copy the files, directories and links under ``source``; any other kind of file is refused (a FIFO would
    block the copy)."""
    base = os.fsencode(source)
    for relative, st in tree_entries(source):
        target = directory / os.fsdecode(relative)
        if stat.S_ISDIR(st.st_mode):
            target.mkdir(exist_ok=True)
        elif stat.S_ISLNK(st.st_mode):
            os.symlink(os.readlink(os.path.join(base, relative)), target)
        else:
            shutil.copyfile(os.path.join(base, relative), target, follow_symlinks=False)
            target.chmod(0o755 if st.st_mode & stat.S_IXUSR else 0o644)


def write_task(
    dest: str | os.PathLike[str],
    *,
    task_id: str,
    grading: Grading,
    instruction: str = "",
    workspace: Files | None = None,
    tests: Files | None = None,
    solution: Files | None = None,
    environment: Environment | None = None,
    limits: Limits | None = None,
    network: Network = Network.NONE,
    reward: RewardSpec | None = None,
    metadata: Mapping[str, Any] | None = None,
    replace: bool = False,
) -> Task:
    """Write a native task directory at ``dest`` and return it, loaded.

    task.toml gets ``id``, ``[grading]`` (the runner and every setting that differs from its default),
    ``[limits]`` (those that differ from :class:`Limits`' defaults), ``[environment]``, ``[workspace] sha256``
    (the hash of the workspace as written) and ``[metadata]``. ``workspace``, ``tests`` and ``solution`` are
    :data:`Files`; ``solution`` ``None`` writes no solution/.

    Raises:
        FileExistsError: ``dest`` exists and ``replace`` is false.
        TaskFormatError: the written task does not load (a grading file it names is missing, a cases file is
            malformed, ...); nothing is left at ``dest``.
        ValueError: a file name is absolute or has ``..``, or a value cannot be written (a metadata ``None``).
    """
    dest = Path(dest)
    if dest.exists() and not replace:
        raise FileExistsError(f"{dest} exists; remove it, or replace it (--force, replace=True)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.tmp-{secrets.token_hex(4)}"
    try:
        _write_files(staging / "workspace", workspace or {})
        _write_files(staging / "tests", tests or {})
        if solution is not None:
            _write_files(staging / "solution", solution)
        if instruction:
            (staging / "instruction.md").write_text(instruction, encoding="utf-8")
        document: dict[str, Any] = {"id": task_id, "grading": _grading_table(grading, reward or RewardSpec())}
        for name, table in (
            ("limits", _limits_table(limits or Limits(), network)),
            ("environment", _environment_table(environment or Environment())),
            ("workspace", {"sha256": record_workspace(staging / "workspace")}),
            ("metadata", dict(metadata or {})),
        ):
            if table:
                document[name] = table
        (staging / "task.toml").write_text(dumps(document), encoding="utf-8")
        load_task(staging, verify=False)  # refuse, here and now, what the loader would
        put_in_place(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return settle(dest)


def settle(dest: Path) -> Task:
    """The task just put in place at ``dest``, loaded, its workspace hashed where it now lies (which keeps the
    manifest in the cache under that path, so that a later change can be named).

    Raises:
        TaskFormatError: the workspace does not hash to what task.toml records (it changed since it was written).
    """
    digest = record_workspace(dest / "workspace")
    task = load_task(dest, verify=False)
    if task.workspace_sha256 != digest:
        verify_workspace(task.id, dest, task.workspace_sha256 or "")  # raises, naming what changed
    return task


def put_in_place(staging: Path, dest: Path) -> None:
    """Rename ``staging`` to ``dest``, moving whatever is at ``dest`` aside first and removing it after."""
    old = dest.parent / f".{dest.name}.old-{secrets.token_hex(4)}"
    with contextlib.suppress(FileNotFoundError):
        os.rename(dest, old)
    os.rename(staging, dest)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            old.unlink()


_WORKSPACE_HEADER = re.compile(r"^[ \t]*\[[ \t]*workspace[ \t]*\][ \t]*(#.*)?$", re.MULTILINE)
_TABLE_HEADER = re.compile(r"^[ \t]*\[", re.MULTILINE)
_SHA256_LINE = re.compile(r"^[ \t]*sha256[ \t]*=.*$", re.MULTILINE)


def _with_workspace_hash(text: str, digest: str) -> str:
    """task.toml's text with ``[workspace] sha256`` set to ``digest``, everything else kept as written."""
    line = f'sha256 = "{digest}"'
    header = _WORKSPACE_HEADER.search(text)
    if header is None:
        return text.rstrip("\n") + f"\n\n[workspace]\n{line}\n"
    following = _TABLE_HEADER.search(text, header.end())
    end = following.start() if following else len(text)
    existing = _SHA256_LINE.search(text, header.end(), end)
    if existing:
        return text[: existing.start()] + line + text[existing.end() :]
    return text[: header.end()] + "\n" + line + text[header.end() :]


def rehash_task(path: str | os.PathLike[str]) -> str:
    """Record the current hash of the task's workspace in its task.toml (``[workspace] sha256``); returns it.

    The rest of task.toml is kept as written (comments included); the file is replaced atomically.

    Raises:
        TaskFormatError: the task does not load (apart from its workspace hash), or task.toml spells
            ``[workspace]`` in a way this edit cannot place a key in (an inline or dotted table): the message gives
            the line to write by hand.
    """
    root = Path(path).resolve()
    file = root / "task.toml"
    load_task(root, verify=False)
    digest = record_workspace(root / "workspace")
    text = file.read_text(encoding="utf-8")
    updated = _with_workspace_hash(text, digest)
    try:
        placed = tomllib.loads(updated).get("workspace", {}).get("sha256")
    except (tomllib.TOMLDecodeError, AttributeError):
        placed = None
    if placed != digest:
        raise TaskFormatError(
            file, f'cannot place the workspace hash in this file; write it by hand: [workspace] sha256 = "{digest}"'
        )
    temporary = file.with_name(f".task.toml.tmp-{secrets.token_hex(4)}")
    temporary.write_text(updated, encoding="utf-8")
    os.replace(temporary, file)
    return digest
