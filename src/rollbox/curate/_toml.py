"""Setting one key of a task.toml in place: what ``--fix`` writes, with every other line (and comment) kept."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path

__all__ = ["set_key", "toml_list"]


def toml_list(items: Sequence[str]) -> str:
    """``items`` as a TOML array of strings, one a line."""
    return "[\n" + "".join(f"  {json.dumps(item)},\n" for item in items) + "]"


def _value_lines(lines: list[str], start: int) -> int:
    """How many lines the key's value at ``lines[start]`` spans (an array may span several)."""
    for end in range(start + 1, len(lines) + 1):
        try:
            tomllib.loads("\n".join(lines[start:end]))
            return end - start
        except tomllib.TOMLDecodeError:
            continue
    return 1


def set_key(toml: Path, table: str, key: str, value: str) -> None:
    """Set ``key = value`` (``value`` already written as TOML) in ``[table]`` of the file ``toml``: the key's line
    replaced, else added at the end of the table, which is added at the end of the file when there is none.

    Raises:
        OSError: the file cannot be read or written.
    """
    lines = toml.read_text(encoding="utf-8").splitlines()
    header = f"[{table}]"
    section, end = "", None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("["):
            if section == header:
                end = index
                break
            section = stripped
        elif section == header and stripped.split("=", 1)[0].strip() == key:
            lines[index : index + _value_lines(lines, index)] = [f"{key} = {value}"]
            break
    else:
        if section == header:
            lines.append(f"{key} = {value}")
        else:
            lines += ["", header, f"{key} = {value}"] if lines else [header, f"{key} = {value}"]
    if end is not None:
        while end > 0 and not lines[end - 1].strip():  # before the blank lines that end the table
            end -= 1
        lines.insert(end, f"{key} = {value}")
    toml.write_text("\n".join(lines) + "\n", encoding="utf-8")
