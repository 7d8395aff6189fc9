"""A careful unified-diff applier in pure Python: it computes new file contents and never touches a filesystem.

The episode reads the files a diff names from the sandbox, applies every hunk here, and writes the results back
through the sandbox, all or nothing. Hunks must match their context exactly; a hunk that does not sit at the line
its header names is looked for nearby (as ``patch`` does with an offset), never fuzzily. Paths are whatever the
diff names, ``a/`` and ``b/`` prefixes removed; the caller checks that they stay inside the workspace.

A diff is what a model wrote, so the work it asks for is bounded: lines are split on ``\n`` only (as ``diff``
splits them), a file patched many times is split once, and both parsing and applying stop at a ``deadline``
(:class:`PatchTimeout`), so that the caller can run them in a worker thread within its time.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["FilePatch", "PatchError", "PatchTimeout", "apply_patch", "parse_patch"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_NULL = "/dev/null"
#: How many lines or candidate places are looked at between two looks at the clock.
_TICK = 4096


class PatchError(Exception):
    """The diff cannot be read, or does not apply; the message says which file and hunk, and why."""


class PatchTimeout(PatchError):
    """Parsing or applying the diff ran past its deadline; nothing was applied."""


def _on_time(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise PatchTimeout("the diff took longer to apply than the time left")


def _split(text: str) -> list[str]:
    """``text`` as lines, each with its ``\n`` (the last without one when the text does not end in one)."""
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    return lines


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


def parse_patch(text: str, *, deadline: float | None = None) -> list[FilePatch]:
    """The file patches of a unified diff, in order.

    Raises:
        PatchError: there is no file header, a hunk comes before one, a hunk header is malformed, or a hunk
            holds a line that is no context, removal or addition.
        PatchTimeout: ``deadline`` (``time.monotonic()``) came first.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    patches: list[FilePatch] = []
    i = 0
    ticks = 0
    while i < len(lines):
        ticks += 1
        if ticks % _TICK == 0:
            _on_time(deadline)
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
    try:
        old_count, new_count = (int(n) if n is not None else 1 for n in match.group(2, 4))
        hunk = _Hunk(old_start=int(match.group(1)))
    except ValueError:  # a number of thousands of digits, which int() refuses
        raise PatchError(f"line {i + 1}: a hunk header's line number is too long: {lines[i][:60]!r}...") from None
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


def _find(content: list[str], old: list[str], expected: int, start: int, deadline: float | None) -> int | None:
    """Where ``old`` sits in ``content`` at or after ``start``, nearest to ``expected`` (before it on a tie)."""
    last = len(content) - len(old)
    if last < start:
        return None
    expected = min(max(expected, start), last)
    after = _first_match(content, old, expected, last + 1, deadline)
    reach = after - expected if after is not None else expected - start
    before = _last_match(content, old, max(start, expected - reach), expected, deadline)
    return before if before is not None else after


def _first_match(content: list[str], old: list[str], low: int, high: int, deadline: float | None) -> int | None:
    """The first place in [low, high) where ``old`` starts. Candidates are found by ``list.index`` (a scan at the
    speed of C), and only those whose first line matches are compared whole."""
    at, tried = low, 0
    while at < high:
        try:
            at = content.index(old[0], at, high)
        except ValueError:
            return None
        if content[at : at + len(old)] == old:
            return at
        at, tried = at + 1, tried + 1
        if tried % _TICK == 0:
            _on_time(deadline)
    return None


def _last_match(content: list[str], old: list[str], low: int, high: int, deadline: float | None) -> int | None:
    """The last place in [low, high) where ``old`` starts: windows of doubling size, scanned as
    :func:`_first_match` scans, from ``high`` down."""
    top, window = high, 64
    while top > low:
        bottom = max(low, top - window)
        found = None
        at = _first_match(content, old, bottom, top, deadline)
        while at is not None:
            found, at = at, _first_match(content, old, at + 1, top, deadline)
        if found is not None:
            return found
        _on_time(deadline)
        top, window = bottom, window * 2
    return None


def _apply_hunks(path: str, content: list[str], hunks: list[_Hunk], deadline: float | None) -> None:
    """Apply ``hunks`` to ``content`` in place (each a slice assignment: a file of 500,000 lines is not copied once
    a hunk)."""
    position = 0  # the first line after the last hunk applied
    delta = 0  # what the hunks applied so far added: a hunk's header counts lines of the file before them
    for number, hunk in enumerate(hunks, 1):
        _on_time(deadline)
        if hunk.old:
            at = _find(content, hunk.old, max(hunk.old_start - 1, 0) + delta, position, deadline)
        else:  # "-L,0": lines added after line L (diff -U0 writes such hunks)
            at = min(max(hunk.old_start + delta, position), len(content))
        if at is None:
            shown = "".join(hunk.old[:3]).rstrip("\n")
            raise PatchError(
                f"{path}: hunk {number} (at line {hunk.old_start}) does not apply: its lines {shown!r}... are not "
                "in the file as given; read the file and make the diff against its current content"
            )
        content[at : at + len(hunk.old)] = hunk.new
        position = at + len(hunk.new)
        delta += len(hunk.new) - len(hunk.old)


def apply_patch(
    patches: Sequence[FilePatch], read: Callable[[str], str | None], *, deadline: float | None = None
) -> dict[str, str | None]:
    """The new content of every file the parsed diff ``patches`` changes (``None``: delete it).

    ``read(path)`` gives a file's current text, or ``None`` when it does not exist; it is asked once a path.
    Nothing is applied unless everything applies.

    Raises:
        PatchError: the diff creates a file that exists, changes or deletes one that does not, or a hunk's
            context is not in the file.
        PatchTimeout: ``deadline`` (``time.monotonic()``) came first.

    >>> apply_patch(parse_patch("--- a/f\\n+++ b/f\\n@@ -1 +1 @@\\n-x\\n+y\\n"), lambda p: "x\\n")
    {'f': 'y\\n'}
    """
    # As lines, changed in place: a file patched many times is split once, joined once, and copied once.
    changes: dict[str, list[str] | None] = {}
    read_once: dict[str, list[str] | None] = {}

    def current(path: str) -> list[str] | None:
        if path in changes:
            return changes[path]
        if path not in read_once:
            text = read(path)
            read_once[path] = None if text is None else _split(text)
        return read_once[path]

    for patch in patches:
        source = patch.old_path
        lines = current(source) if source is not None else None
        if source is not None and lines is None:
            raise PatchError(f"{source}: the diff changes this file, but it does not exist")
        if source is None and patch.new_path is not None and current(patch.new_path) is not None:
            raise PatchError(f"{patch.new_path}: the diff creates this file, but it exists already")
        new_lines = lines if source in changes and lines is not None else list(lines or [])
        _apply_hunks(patch.path, new_lines, patch.hunks, deadline)
        if patch.new_path is None:
            if new_lines:
                raise PatchError(f"{source}: the diff deletes this file, but its hunks do not remove all of it")
            changes[patch.path] = None
            continue
        if source is not None and source != patch.new_path:
            changes[source] = None  # a rename
        changes[patch.new_path] = new_lines
    return {path: None if lines is None else "".join(lines) for path, lines in changes.items()}
