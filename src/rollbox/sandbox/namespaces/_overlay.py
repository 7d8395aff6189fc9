"""Copy-on-write workspaces: a task's workspace under an overlay, in each sandbox's own mount namespace.

The sandbox's launcher mounts, in its private mount namespace and as root on the host (see ``agent.c``
``--overlay``), an overlayfs at /workspace: the task's directory on the host as its lower layer (read-only, and
idmapped so that its owner appears as the sandbox's uid), and as upper layer the workspace/ directory of the
sandbox's size-limited writable tree (with .work/ beside it). So starting on a large repository costs what
starting on an empty one does, every sandbox on one workspace shares its bytes (and its page cache), and the
disk limit counts only what the program writes. Because root mounts it in a namespace that no user namespace
owns, none of the kernel's limits on overlays made inside user namespaces applies.

The host reaches the merged view through the launcher's mount namespace (``/proc/<launcher>/root/workspace``,
the launcher's copy of the sandboxes' shared root), opened once per start and held as a descriptor: it writes
and reads the workspace through it as through the writable tree, never following a link. The upper directory
is never touched while the overlay is mounted (overlayfs leaves that undefined): a sandbox whose upper layer is
exactly as it started (nothing written, no attribute changed) is reset in place; any other restarts with a new
tree, which brings back the pristine workspace.

Whether this kernel and the workspace's filesystem allow it (overlayfs, an idmapped mount of that filesystem)
is tried once per filesystem (``agent.c overlay-probe``); where they do not, the sandbox copies the workspace
instead, which is slower, never weaker, and said so (see :class:`rollbox.Sandbox`).
"""

from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox._errors import SandboxError
from rollbox.sandbox._shortage import agent_error, agent_ran_short, host_error

__all__ = ["OverlayProbe", "UpperState", "open_merged"]


class OverlayProbe:
    """Whether workspaces of a filesystem can be overlaid here, tried once per filesystem per process."""

    def __init__(self, agent: Path, stage: Path) -> None:
        self._agent = agent
        self._stage = stage
        self._known: dict[int, str | None] = {}
        self._lock = threading.Lock()

    def unavailable(self, workspace: Path) -> str | None:
        """None when ``workspace`` can be overlaid; otherwise why not (the kernel's own words). A try that the
        host's shortage of something cut short says nothing about the filesystem: it is an error, and is tried again
        next time.

        Raises:
            OSError: ``workspace`` cannot be read.
            SandboxError: the host ran short of something (descriptors, processes, memory) while trying.
        """
        device = os.stat(workspace).st_dev
        with self._lock:
            if device not in self._known:
                try:
                    done = subprocess.run(
                        [str(self._agent), "overlay-probe", "--stage", str(self._stage), str(workspace)],
                        capture_output=True,
                        text=True,
                        timeout=30,
                        check=False,
                    )
                except OSError as exc:
                    raise SandboxError(host_error(f"cannot try overlaying {workspace}", exc, "process")) from exc
                if done.returncode != 0 and agent_ran_short(done.stderr):
                    raise SandboxError(f"cannot try overlaying {workspace}: {agent_error(done.stderr.strip())}")
                reason = agent_error(done.stderr.strip()) or f"exit {done.returncode}"
                self._known[device] = None if done.returncode == 0 else reason
            return self._known[device]


@dataclass(frozen=True)
class UpperState:
    """What the upper directory's root looked like: changed (an entry made, its mode, owner, times or extended
    attributes touched), the overlay is no longer the pristine workspace."""

    entries: bool
    mode: int
    uid: int
    gid: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, fs_fd: int) -> UpperState:
        """The state of workspace/ in the writable tree whose mount fd is ``fs_fd``."""
        st = os.stat("workspace", dir_fd=fs_fd, follow_symlinks=False)
        with os.scandir(f"/proc/self/fd/{fs_fd}/workspace") as entries:
            any_entry = next(iter(entries), None) is not None
        return cls(any_entry, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, st.st_ctime_ns)


def open_merged(launcher_pid: int) -> int:
    """A descriptor of the sandbox's /workspace overlay, reached through its launcher's mount namespace (the
    caller checks that the launcher still lives after: only then was ``launcher_pid`` surely its).

    Raises:
        SandboxError: the overlay could not be reached.
    """
    path = f"/proc/{launcher_pid}/root/workspace"
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SandboxError(host_error(f"cannot reach the sandbox's workspace overlay at {path}", exc)) from exc
    return fd
