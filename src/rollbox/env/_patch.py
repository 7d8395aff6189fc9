"""A careful unified-diff applier in pure Python: it computes new file contents and never touches a filesystem.

The episode reads the files a diff names from the sandbox, applies every hunk here, and writes the results back
through the sandbox, all or nothing. Hunks must match their context exactly; a hunk that does not sit at the line
its header names is looked for nearby (as ``patch`` does with an offset), never fuzzily. Paths are whatever the
diff names, ``a/`` and ``b/`` prefixes removed; the caller checks that they stay inside the workspace.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["FilePatch", "PatchError", "apply_patch", "parse_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NULL = "/dev/null"


class PatchError(Exception):
    """The diff cannot be read, or does not apply; the message says which file and hunk, and why."""


@dataclass
class _Hunk:
    old_start: int
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)


@dataclass
class FilePatch:
    """The hunks for one file. ``old_path`` is ``None`` for a new file, ``new_path`` ``None`` for a deletion."""

    old_path: str | None
    new_path: str | None
    hunks: list[_Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        """The file this patch changes (its new name, or its old one when it is deleted)."""
        path = self.new_path or self.old_path
        assert path is not None
        return path


def _header_path(line: str) -> str | None:
    name = line[4:].split("\t", 1)[0].strip()
    if name.startswith('"') and name.endswith('"') and len(name) > 1:
        name = name[1:-1]
    return None if name == _NULL else name


def _strip_prefixes(patch: FilePatch) -> None:
    old, new = patch.old_path, patch.new_path
    if all(p is None or p.startswith(prefix) for p, prefix in ((old, "a/"), (new, "b/"))):
        patch.old_path = old[2:] if old else None
        patch.new_path = new[2:] if new else None


def parse_patch(text: str) -> list[FilePatch]:
    """The file patches of a unified diff, in order.

    Raises:
        PatchError: there is no file header, a hunk comes before one, a hunk header is malformed, or a hunk
            holds a line that is no context, removal or addition.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    patches: list[FilePatch] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            patch = FilePatch(_header_path(line), _header_path(lines[i + 1]))
            if patch.old_path is None and patch.new_path is None:
                raise PatchError(f"line {i + 1}: both sides of the file header are /dev/null")
            _strip_prefixes(patch)
            patches.append(patch)
            i += 2
            continue
        if line.startswith("@@"):
            if not patches:
                raise PatchError(f"line {i + 1}: a hunk before any '--- a/FILE' / '+++ b/FILE' header")
            i = _read_hunk(lines, i, patches[-1])
            continue
        i += 1  # diff --git, index, mode lines, commentary: not needed to apply
    if not patches:
        raise PatchError("no file header ('--- a/FILE' then '+++ b/FILE') found: is this a unified diff?")
    for patch in patches:
        if not patch.hunks and patch.old_path is not None and patch.new_path is not None:
            raise PatchError(f"{patch.path}: the diff has a header but no hunk ('@@ -L,N +L,N @@')")
    return patches


def _read_hunk(lines: list[str], i: int, patch: FilePatch) -> int:
    match = _HUNK.match(lines[i])
    if not match:
        raise PatchError(
            f"line {i + 1}: malformed hunk header {lines[i]!r}; expected '@@ -START,COUNT +START,COUNT @@'"
        )
    old_count = int(match.group(2)) if match.group(2) is not None else 1
    new_count = int(match.group(4)) if match.group(4) is not None else 1
    hunk = _Hunk(old_start=int(match.group(1)))
    i += 1
    while i < len(lines):
        line = lines[i]
        if line.startswith("\\"):  # "\ No newline at end of file": the line before it has none
            kind = lines[i - 1][:1] or " "
            for side, own in ((hunk.old, "-"), (hunk.new, "+")):
                if side and kind in (" ", own):
                    side[-1] = side[-1].removesuffix("\n")
            i += 1
            continue
        if len(hunk.old) >= old_count and len(hunk.new) >= new_count:
            break
        kind, body = (line[:1], line[1:]) if line else (" ", "")  # an empty line: a blank context line
        if kind not in (" ", "-", "+") or _is_header(lines, i):
            break  # the counts promised more than the hunk holds: take what it holds
        if kind in (" ", "-"):
            hunk.old.append(body + "\n")
        if kind in (" ", "+"):
            hunk.new.append(body + "\n")
        i += 1
    if not hunk.old and not hunk.new:
        raise PatchError(f"line {i}: an empty hunk")
    patch.hunks.append(hunk)
    return i


def _is_header(lines: list[str], i: int) -> bool:
    return lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")


def _find(content: list[str], old: list[str], expected: int, start: int) -> int | None:
    """Where ``old`` sits in ``content`` at or after ``start``, nearest to ``expected``."""
    last = len(content) - len(old)
    if last < start:
        return None
    expected = min(max(expected, start), last)
    for offset in range(max(expected - start, last - expected) + 1):
        for at in (expected - offset, expected + offset):
            if start <= at <= last and content[at : at + len(old)] == old:
                return at
    return None


def _apply_hunks(path: str, text: str, hunks: list[_Hunk]) -> str:
    content = text.splitlines(keepends=True)
    result: list[str] = []
    position = 0  # the first line of content not yet copied
    delta = 0
    for number, hunk in enumerate(hunks, 1):
        expected = max(hunk.old_start - 1, 0) + delta
        at = _find(content, hunk.old, expected, position) if hunk.old else min(max(expected, position), len(content))
        if at is None:
            shown = "".join(hunk.old[:3]).rstrip("\n")
            raise PatchError(
                f"{path}: hunk {number} (at line {hunk.old_start}) does not apply: its lines {shown!r}... are not "
                "in the file as given; read the file and make the diff against its current content"
            )
        result += content[position:at]
        result += hunk.new
        position = at + len(hunk.old)
        delta += len(hunk.new) - len(hunk.old)
    result += content[position:]
    return "".join(result)


def apply_patch(text: str, read: Callable[[str], str | None]) -> dict[str, str | None]:
    """The new content of every file the diff ``text`` changes (``None``: delete it).

    ``read(path)`` gives a file's current text, or ``None`` when it does not exist. Nothing is applied unless
    everything applies.

    Raises:
        PatchError: the diff is malformed, creates a file that exists, changes or deletes one that does not, or
            a hunk's context is not in the file.

    >>> apply_patch("--- a/f\\n+++ b/f\\n@@ -1 +1 @@\\n-x\\n+y\\n", lambda p: "x\\n")
    {'f': 'y\\n'}
    """
    changes: dict[str, str | None] = {}
    for patch in parse_patch(text):
        source = patch.old_path
        current = changes[source] if source in changes else (read(source) if source else None)
        if source is not None and current is None:
            raise PatchError(f"{source}: the diff changes this file, but it does not exist")
        if source is None and patch.new_path is not None and read(patch.new_path) is not None:
            raise PatchError(f"{patch.new_path}: the diff creates this file, but it exists already")
        new_text = _apply_hunks(patch.path, current or "", patch.hunks)
        if patch.new_path is None:
            if new_text:
                raise PatchError(f"{source}: the diff deletes this file, but its hunks do not remove all of it")
            changes[patch.path] = None
            continue
        if source is not None and source != patch.new_path:
            changes[source] = None  # a rename
        changes[patch.new_path] = new_text
    return changes
