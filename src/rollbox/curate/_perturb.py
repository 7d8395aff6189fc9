"""Data in the workspace that the hidden tests may read, and the rewrites of it an agent could make.

Hidden tests that read their inputs or expected values from a file of the workspace leave the verdict to the
agent, which may rewrite that file: a wrong solution passes tests whose data it emptied (a loop over nothing
asserts nothing) or zeroed (every input and every expected value 0, which ``return 0`` matches; ``return a - b``
with ``[[0, 0]]`` is the same trick). Validation grades those rewrites, laid over trivial solutions, as hacks
(``_candidates``); one that earns more than a trivial solution rejects the task (``test_data_in_workspace``).

Which files: every regular file of the workspace that is not Python (source, bytecode, an extension, a path hook)
and that the reference leaves as it is, outside ``.git``; at most :data:`_MAX_FILES`, those whose name (or a
directory's on their path) the hidden tests mention first. A rewrite is a submission any agent could make, so
rewriting a file the tests never read costs a little grading and proves nothing wrong.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import PurePosixPath
from typing import Any

from rollbox.tasks import Task

from ._reference import Reference, read_tree

__all__ = ["data_files", "emptied", "zeroed"]

#: Files rewritten at most per candidate (those the tests mention first).
_MAX_FILES = 64
#: Larger files are emptied but not zeroed (zeroing parses them).
_MAX_ZEROED_BYTES = 1024 * 1024
_CODE_SUFFIXES = (".py", ".pyi", ".pyc", ".pyo", ".pyd", ".so", ".pth")
_NUMBER = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _hidden_text(task: Task) -> bytes:
    """Every file of the hidden tests, one after another (for finding the names they mention)."""
    parts = [path.read_bytes() for path in sorted(task.tests.rglob("*")) if path.is_file()]
    return b"\n".join(parts)


def _mentioned(path: str, text: bytes) -> bool:
    return any(part.encode() in text for part in PurePosixPath(path).parts)


def data_files(task: Task, reference: Reference) -> dict[str, bytes]:
    """The workspace's data files the tests may read (see the module's docstring), by workspace-relative path."""
    workspace = read_tree(task.workspace)
    found = {
        path: data
        for path, data in workspace.items()
        if not path.endswith(_CODE_SUFFIXES)
        and not path.startswith(".git/")
        and reference.files.get(path, data) == data
    }
    text = _hidden_text(task)
    ranked = sorted(found, key=lambda path: (not _mentioned(path, text), path))
    return {path: found[path] for path in ranked[:_MAX_FILES]}


def _empty_json(value: Any) -> Any:
    """Lists emptied, at any depth under objects (whose keys stay); other values as they are."""
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {key: _empty_json(item) for key, item in value.items()}
    return value


def _zero_json(value: Any) -> Any:
    """The same shape with every number 0, every string empty, every boolean false (object keys stay)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return type(value)(0)
    if isinstance(value, str):
        return ""
    if isinstance(value, list):
        return [_zero_json(item) for item in value]
    if isinstance(value, dict):
        return {key: _zero_json(item) for key, item in value.items()}
    return value


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):  # nested deeper than the parser recurses: not data
        return _NOT_JSON


_NOT_JSON = object()


def _suffix(path: str) -> str:
    return PurePosixPath(path).suffix.lower()


def emptied(path: str, data: bytes) -> bytes:
    """``data`` with nothing left to test: a JSON document's lists emptied, a CSV file's rows (its header stays),
    any other file's every byte."""
    if _suffix(path) in (".csv", ".tsv"):
        return data.splitlines(keepends=True)[0] if data else data
    if _suffix(path) not in (".jsonl", ".ndjson") and (value := _json(data)) is not _NOT_JSON:
        return json.dumps(_empty_json(value)).encode()
    return b""


def zeroed(path: str, data: bytes) -> bytes:
    """``data`` in the same shape with every value zero: JSON (a document, or one a line) with numbers 0, strings
    empty and booleans false; a CSV file's numeric cells 0 and the others empty (its header stays); in any other
    text, every number 0. A file too large, or not text, stays as it is."""
    if len(data) > _MAX_ZEROED_BYTES:
        return data
    suffix = _suffix(path)
    if suffix in (".csv", ".tsv"):
        return _zero_csv(data, "\t" if suffix == ".tsv" else ",")
    if suffix in (".jsonl", ".ndjson"):
        lines = [_json(line) for line in data.splitlines() if line.strip()]
        if all(line is not _NOT_JSON for line in lines):
            return b"".join(json.dumps(_zero_json(line)).encode() + b"\n" for line in lines)
    elif (value := _json(data)) is not _NOT_JSON:
        return json.dumps(_zero_json(value)).encode()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data
    return _NUMBER.sub(b"0", data)


def _zero_csv(data: bytes, delimiter: str) -> bytes:
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8")), delimiter=delimiter))
    except (UnicodeDecodeError, csv.Error):
        return data
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter, lineterminator="\n")
    for index, row in enumerate(rows):
        writer.writerow(row if index == 0 else ["0" if _NUMBER.fullmatch(c.strip().encode()) else "" for c in row])
    return out.getvalue().encode()
