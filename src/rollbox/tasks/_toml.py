"""Writing TOML: the small subset task.toml needs (strings, numbers, booleans, arrays, tables), with the standard
library's ``tomllib`` reading back exactly what was written."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["dumps"]

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _string(value: str) -> str:
    # JSON's escapes are TOML's, except that TOML wants DEL escaped too and has no surrogate pairs (hence
    # ensure_ascii=False: non-ASCII text is written as UTF-8, which TOML allows).
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: TOML has no place for {value!r} here; give a finite number")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Mapping):
        items = ", ".join(f"{_key(str(k))} = {_value(v, f'{where}.{k}')}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    raise ValueError(f"{where}: cannot write {value!r} (a {type(value).__name__}) as TOML")


def _table(lines: list[str], path: tuple[str, ...], table: Mapping[str, Any]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if path and (scalars or not tables):
        lines.append(f"\n[{'.'.join(_key(p) for p in path)}]")
    for key, value in scalars.items():
        lines.append(f"{_key(key)} = {_value(value, '.'.join((*path, key)))}")
    for key, value in tables.items():
        _table(lines, (*path, key), value)


def dumps(document: Mapping[str, Any]) -> str:
    """``document`` as TOML: top-level values first, then each table (nested tables as ``[a.b]``).

    Raises:
        ValueError: a value TOML cannot hold (``None``, a non-finite float, an object); the message names its key.
    """
    lines: list[str] = []
    _table(lines, (), document)
    return "\n".join(lines).lstrip("\n") + "\n"
