"""Reading the JSON Lines files importers take (plain or gzip-compressed), one record a line (a newline alone ends
one), each bad line refused alone with its file and line number."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ._importing import ImportRefused, ImportSourceError, Refusal

__all__ = ["Record", "records", "require", "shorten"]

T = TypeVar("T")


@dataclass(frozen=True)
class Record:
    """One JSON object of the input, with where it came from (``FILE:LINE``)."""

    where: str
    data: dict[str, Any]


def shorten(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters for a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        # Bytes, so that only "\n" ends a row: text mode would end one at a raw "\r" too, which JSON allows
        # inside a row as whitespace, and every later line number would be off.
        with opener(path, "rb") as f:
            for number, line in enumerate(f, 1):
                yield number, line.decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        raise ImportSourceError(
            f"cannot read {path}: {exc}; give a readable JSON Lines file (.jsonl, or .jsonl.gz)"
        ) from None


def records(path: Path) -> list[Record | Refusal]:
    """Every non-blank line of ``path``: a :class:`Record`, or a :class:`Refusal` for a line that is not a JSON
    object.

    Raises:
        ImportSourceError: the file cannot be read (missing, not gzip, not UTF-8): nothing of it can be imported.
    """
    found: list[Record | Refusal] = []
    for number, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            data = json.loads(line)
        except (ValueError, RecursionError) as exc:
            found.append(Refusal(None, where, f"not JSON ({exc}); each line must be one JSON object"))
            continue
        if not isinstance(data, dict):
            found.append(Refusal(None, where, f"expected a JSON object, got {shorten(data)}"))
            continue
        found.append(Record(where, data))
    return found


def require(data: dict[str, Any], key: str, kind: type[T] | tuple[type, ...], expected: str) -> T:
    """``data[key]``, which must be of ``kind``.

    Raises:
        ImportRefused: the key is missing or holds something else; the message names the key and what to give.
    """
    if key not in data:
        raise ImportRefused(f"missing key {key!r}: give {expected}")
    value = data[key]
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ImportRefused(f"key {key!r}: expected {expected}, got {shorten(value)}")
    return value  # type: ignore[return-value]
