"""What a runner's grading sandbox holds at /workspace: the task's workspace plus the candidate's allowed changes.

A small workspace is built whole on the host and copied in (a sandbox of any task's pool can serve it, and is
reset in place after). A large one (a repository) is never copied: the grading sandbox starts over the task's
workspace as a copy-on-write overlay (``workspace=``), and only the candidate's changes are laid over it: the
removals first, then the added and modified files. So grading a one-line change to a 100 MB repository costs
what the line costs.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox import Limits, Network, Sandbox, SandboxConfig, SandboxSource

from ._probe import sandbox_config

__all__ = ["GradingTree", "TreeTooLarge", "candidates_room"]

#: What a write that found no room says: in a grading sandbox, its disk limit reached.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


class TreeTooLarge(OSError):
    """The candidate's tree did not fit the grading sandbox's disk limit (its blocks or inodes): a write inside
    the sandbox's own quota found no room. The candidate's failure (``workspace_too_large``), unlike a write of the
    host's own (its scratch, its store) that found its disk full, which is the machine's (``infra_error``)."""


@contextlib.contextmanager
def candidates_room(sb: Sandbox) -> Iterator[None]:
    """Writes into the grading sandbox ``sb`` once the candidate's tree is there (the tree itself, and the judge's
    files laid over it, which fit alone): one that found no room because the sandbox's own disk limit is reached
    is the tree's doing, raised as :class:`TreeTooLarge`; one that found the host's disk full (a backend with no
    limit of its own writes there) stays the OSError it is, the machine's."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _NO_ROOM or isinstance(exc, TreeTooLarge) or not sb.disk_full():
            raise
        raise TreeTooLarge(
            exc.errno, f"the candidate's tree does not fit the grading sandbox: {exc.strerror}", exc.filename
        ) from exc


@dataclass(frozen=True)
class GradingTree:
    """The grading tree as a runner lays it into a sandbox."""

    #: A host directory: with no :attr:`base`, the whole tree; over one, only the added and modified files.
    files: Path
    #: The task's workspace the grading sandbox starts from (copy-on-write), or None: an empty /workspace.
    base: Path | None = None
    #: Workspace-relative paths removed from :attr:`base` before :attr:`files` are written (files, links, whole
    #: directories), sorted.
    removed: tuple[str, ...] = ()

    @contextlib.asynccontextmanager
    async def sandbox(
        self, sandboxes: SandboxSource, *, limits: Limits, network: Network, forks: bool = False
    ) -> AsyncIterator[Sandbox]:
        """A sandbox from ``sandboxes`` whose /workspace starts as :attr:`base` (lay the tree with :meth:`lay`); with
        ``forks`` (the runner forks its pre-started Python), one whose zygote started under a probe's variables."""
        config = SandboxConfig(limits=limits, network=network, workspace=self.base)
        async with sandboxes.sandbox(sandbox_config(config) if forks else config) as sb:
            yield sb

    async def lay(self, sb: Sandbox) -> None:
        """Make ``sb``'s /workspace the grading tree: remove what the candidate removed from :attr:`base`, then
        write :attr:`files` (the candidate's changes, or the whole tree).

        Raises:
            TreeTooLarge: the tree does not fit the sandbox's disk limit (the candidate's doing).
            OSError: another write failed.
        """
        with candidates_room(sb):
            for path in self.removed:
                await sb.remove(path)
            await sb.write_tree(self.files)
