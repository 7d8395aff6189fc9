"""Answer leaks: a workspace that hands the agent the reference solution or the hidden tests' expected values.

Every file of the workspace is read, and every object of every git repository in it (loose objects here; packed
ones by ``git cat-file`` run in a sandbox, as the repository is the task's data). A leak is:

- a copy of a file the reference writes or changes, or of a hidden test file (blank lines and trailing spaces
  ignored);
- a function, in Python source, whose code equals one the reference changes (its ``ast``, names included);
- most of the hidden cases' distinctive expected values in one file (at least three, and at least 60% of them:
  a docstring's example or two is no leak).
"""

from __future__ import annotations

import ast
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox import Limits, Sandbox, SandboxError, Status
from rollbox.tasks import FunctionGrading, StdioGrading, Task, TaskFormatError
from rollbox.tasks._cases import load_function_cases, load_stdio_cases
from rollbox.tasks._values import encode

from ._reasons import Reason, ReasonCode
from ._reference import Reference
from ._source import functions

__all__ = ["find_leaks"]

_MAX_BLOB_BYTES = 8 * 1024 * 1024
_MIN_VALUES = 3
_VALUE_SHARE = 0.6


@dataclass(frozen=True)
class _Blob:
    """One file's content, and where it was found (a workspace path, or a git object)."""

    where: str
    data: bytes


def _normal(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return "\n".join(line.rstrip() for line in text.splitlines() if line.strip())


def _loose_objects(git: Path) -> Iterator[_Blob]:
    objects = git / "objects"
    for directory in sorted(objects.glob("[0-9a-f][0-9a-f]")):
        for file in sorted(directory.iterdir()):
            try:
                raw = zlib.decompress(file.read_bytes())
            except (OSError, zlib.error):
                continue
            header, _, body = raw.partition(b"\0")
            if header.startswith(b"blob ") and len(body) <= _MAX_BLOB_BYTES:
                yield _Blob(f"{git.name} object {directory.name}{file.name}", body)


async def _packed_objects(git: Path, workspace: Path) -> list[_Blob]:
    """The blobs of the repository's pack files, read by git in a sandbox."""
    if not any((git / "objects" / "pack").glob("*.pack")):
        return []
    limits = Limits(timeout_s=60, cpu_time_s=60, output_bytes=256 * 1024 * 1024, disk_bytes=1024 * 1024 * 1024)
    try:
        async with Sandbox(limits=limits) as sb:
            await sb.write_tree(git, "/tmp/repo.git", read_only=True)
            result = await sb.exec(
                [
                    "git",
                    "-c",
                    "safe.directory=*",
                    "--git-dir=/tmp/repo.git",
                    "cat-file",
                    "--batch-all-objects",
                    "--batch",
                ],
                env={"HOME": "/tmp", "GIT_CONFIG_NOSYSTEM": "1"},
            )
    except (SandboxError, OSError):
        return []
    if result.status is not Status.OK:
        return []
    return list(_parse_batch(result.stdout, f"{git.relative_to(workspace).as_posix()} pack"))


def _parse_batch(output: bytes, where: str) -> Iterator[_Blob]:
    position = 0
    while position < len(output):
        end = output.find(b"\n", position)
        if end < 0:
            return
        parts = output[position:end].split()
        if len(parts) != 3:
            return
        size = int(parts[2])
        body = output[end + 1 : end + 1 + size]
        if parts[1] == b"blob":
            yield _Blob(f"{where} object {parts[0].decode()}", body)
        position = end + 1 + size + 1


async def _blobs(workspace: Path) -> list[_Blob]:
    blobs: list[_Blob] = []
    for path in sorted(workspace.rglob("*")):
        if path.is_symlink() or not path.exists():
            continue
        relative = path.relative_to(workspace).as_posix()
        if path.is_dir() and path.name == ".git":
            blobs += _loose_objects(path)
            blobs += await _packed_objects(path, workspace)
        elif (
            path.is_file()
            and ".git" not in path.relative_to(workspace).parts
            and path.stat().st_size <= _MAX_BLOB_BYTES
        ):
            blobs.append(_Blob(relative, path.read_bytes()))
    return blobs


def _expected_values(task: Task) -> list[str]:
    """The hidden cases' distinctive expected values, each as the texts it would be written as."""
    grading = task.grading
    values: set[str] = set()
    try:
        if isinstance(grading, FunctionGrading) and grading.cases:
            for case in load_function_cases(task.tests / grading.cases):
                text = json.dumps(encode(case.expected))
                if len(text) >= 4:
                    values.add(text)
        elif isinstance(grading, StdioGrading):
            for stdio_case in load_stdio_cases(task.tests / grading.cases):
                output = stdio_case.output.strip()
                if len(output) >= 4 and output not in stdio_case.input:
                    values.add(output)
    except TaskFormatError:
        return []
    return sorted(values)


def _secrets(task: Task, reference: Reference | None) -> tuple[dict[str, str], dict[str, str]]:
    """What must not be in the workspace: normalized file texts (text -> where it comes from), and function shapes
    (``ast.dump`` -> name)."""
    files: dict[str, str] = {}
    shapes: dict[str, str] = {}
    for test in sorted(task.tests.rglob("*")):
        if test.is_file():
            text = _normal(test.read_bytes())
            if len(text) >= 20:
                files[text] = f"the hidden test file tests/{test.relative_to(task.tests).as_posix()}"
    if reference is not None:
        for path, data in reference.files.items():
            original = task.workspace / path
            if original.is_file() and original.read_bytes() == data:
                continue
            text = _normal(data)
            if len(text) >= 20:
                files[text] = f"the reference's solution/{path}"
        for target in reference.targets:
            tree = ast.parse(target.source)
            for span in functions(tree):
                if span.qualname in target.functions:
                    shapes[ast.dump(span.node)] = f"the reference's {span.qualname} ({target.path})"
    return files, shapes


async def find_leaks(task: Task, reference: Reference | None) -> list[Reason]:
    """Every answer leak in the task's workspace, as ``answer_leak`` reasons."""
    files, shapes = _secrets(task, reference)
    values = _expected_values(task)
    found: list[Reason] = []
    for blob in await _blobs(task.workspace):
        text = _normal(blob.data)
        leaked = files.get(text)
        if leaked is None and (blob.where.endswith(".py") or b"def " in blob.data):
            leaked = _shape_leak(blob.data, shapes)
        if leaked is not None:
            found.append(Reason(ReasonCode.ANSWER_LEAK, f"{blob.where} holds {leaked}"))
            continue
        if len(values) >= _MIN_VALUES:
            hits = sum(value in text for value in values)
            if hits >= _MIN_VALUES and hits >= _VALUE_SHARE * len(values):
                found.append(
                    Reason(
                        ReasonCode.ANSWER_LEAK,
                        f"{blob.where} holds {hits} of the {len(values)} hidden cases' distinctive expected values",
                    )
                )
    return found


def _shape_leak(data: bytes, shapes: dict[str, str]) -> str | None:
    if not shapes:
        return None
    try:
        tree = ast.parse(data)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            leaked = shapes.get(ast.dump(node))
            if leaked is not None:
                return leaked
    return None
