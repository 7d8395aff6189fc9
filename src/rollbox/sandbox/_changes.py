"""What a program changed in its sandbox's /workspace, copied out to the host (:meth:`rollbox.Sandbox.read_changes`).

On a copy-on-write workspace (``Sandbox(workspace=...)``, overlaid) the changes are the overlay's upper directory:
the files and links the program made or changed, and its whiteouts and opaque directories, which say what it
removed of the workspace it started from. Reading them costs what the changes hold, whatever the size of the
workspace under them. Elsewhere (a workspace copied in, or none) the whole /workspace is the answer.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["WorkspaceChanges", "tree_size"]


@dataclass(frozen=True)
class WorkspaceChanges:
    """A sandbox's /workspace as a host directory of what changed over the workspace it started from.

    The workspace the program left is: the starting workspace, minus each path in :attr:`deleted` (with all that
    was below it), with :attr:`root` laid over it (its files and links replace what was at their paths). When
    :attr:`whole` is true, :attr:`root` holds the whole workspace instead, and :attr:`deleted` is empty: whatever
    of the starting workspace it lacks is gone.
    """

    #: The host directory the changes were copied to: every file and link the program made or changed, with the
    #: directories that hold them (and the directories it made).
    root: Path
    #: Workspace-relative POSIX paths of the starting workspace that the program removed, sorted. A path that
    #: :attr:`root` holds too was removed and made again (a directory emptied of what it started with).
    deleted: tuple[str, ...]
    #: True when :attr:`root` holds the whole workspace (it was copied in, not overlaid, or the overlay records
    #: renames in a way not read as changes).
    whole: bool
    #: The entries copied to :attr:`root` (files, links, directories) and removals counted.
    entries: int


def tree_size(root: str | os.PathLike[str]) -> tuple[int, int]:
    """The entries (directories, files, links) and the bytes of the regular files under ``root``.

    Raises:
        OSError: the tree cannot be read.
    """
    entries = size = 0
    stack = [os.fspath(root)]
    while stack:
        with os.scandir(stack.pop()) as found:
            for entry in found:
                info = entry.stat(follow_symlinks=False)
                entries += 1
                if stat.S_ISDIR(info.st_mode):
                    stack.append(entry.path)
                elif stat.S_ISREG(info.st_mode):
                    size += info.st_size
    return entries, size
