"""An image as a sandbox takes it: its identity, its unpacked root, and the parts of its configuration that apply."""

from __future__ import annotations

import errno
import fcntl
import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Image", "ImageConfig"]

#: Where rollbox mounts its own file systems over the image's: what an image holds there is out of sight.
_MOUNTED = ("/workspace", "/tmp", "/dev", "/proc", "/sys", "/opt/rollbox")


@dataclass(frozen=True)
class ImageConfig:
    """What an image's configuration says about running it, as far as rollbox applies it.

    Attributes:
        env: Its ``Env``, in order, as ``(name, value)`` pairs: every command's environment starts from them
            (rollbox's own ``HOME``, ``TMPDIR``, ``USER`` and locale stay; the caller's variables come last).
        working_dir: Its ``WorkingDir``, or None: where ``rollbox exec --image`` starts a command that brings no
            files (see :meth:`Image.working_directory`); a task's commands start in /workspace.
        user: Its ``User``, as written; every user of an image is the sandbox's one unprivileged uid (1000).
        entrypoint, cmd: Its ``Entrypoint`` and ``Cmd``, for ``rollbox images inspect`` (rollbox runs the command
            it is given, never these).
    """

    env: tuple[tuple[str, str], ...] = ()
    working_dir: str | None = None
    user: str | None = None
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()

    @property
    def path(self) -> str | None:
        """Its ``PATH``, or None when it sets none."""
        return dict(self.env).get("PATH")


@dataclass(frozen=True)
class Image:
    """An image in the store, unpacked: give it to a sandbox as ``SandboxConfig(image=image)``.

    Two images are equal when their manifests are (their digest): the references they are known by do not count.

    Attributes:
        digest: The digest of its manifest (``sha256:...``): what records name it by (never a tag).
        root_id: The key of its unpacked root in the store: a hash of its layers' uncompressed digests, in order
            (images with the same layers share one root).
        root: The unpacked root file system, read-only and shared: sandboxes mount it at ``/``.
        config: What its configuration says (see :class:`ImageConfig`).
        refs: The references it is known by in the store (``name:tag``, what it was imported as).
        platform: ``os/architecture[/variant]``.
        size_bytes: What its unpacked layers hold (regular files' sizes).
    """

    digest: str
    root_id: str
    root: Path
    config: ImageConfig = field(default_factory=ImageConfig)
    refs: tuple[str, ...] = field(default=(), compare=False)
    platform: str = "linux/amd64"
    size_bytes: int = field(default=0, compare=False)

    @property
    def short(self) -> str:
        """The first 12 hex digits of its digest, as listings show it."""
        return self.digest.removeprefix("sha256:")[:12]

    def working_directory(self) -> str | None:
        """Its ``WorkingDir`` where a command can start there: a directory of the image itself, reached without a
        symbolic link (whose target would be read on the host here), and not below a mount of rollbox's own
        (/workspace, /tmp, /dev, /proc, /sys, /opt/rollbox); otherwise None (start in /workspace)."""
        written = self.config.working_dir
        if not written or not written.startswith("/"):
            return None
        path = posixpath.normpath(written).lstrip("/")
        if any(f"/{path}" == top or f"/{path}".startswith(f"{top}/") for top in _MOUNTED):
            return None
        here = self.root
        for part in path.split("/") if path else ():
            here = here / part
            try:
                if not stat.S_ISDIR(os.lstat(here).st_mode):
                    return None
            except OSError:
                return None
        return f"/{path}"

    def has_program(self, name: str, path: str) -> bool | None:
        """Whether ``name`` (a bare command name) is a file in a directory of ``path`` (a PATH) within the image:
        True, False, or None when that cannot be told from the image alone (a directory of ``path`` that another
        mount covers, /opt/rollbox's runtime layer or the writable /workspace and /tmp, or is not absolute). Symbolic
        links are followed as inside the sandbox, the image's root being ``/``; nothing outside it is looked at."""
        if not name or "/" in name:
            return None
        for directory in path.split(":"):
            if not directory.startswith("/") or any(
                directory == top or directory.startswith(f"{top}/") for top in (*_MOUNTED, "/dev/shm")
            ):
                return None
            if self._regular_file(posixpath.join(directory, name)):
                return True
        return False

    def _regular_file(self, path: str) -> bool:
        """Whether ``path`` (absolute, inside the image) is a regular file, its links followed within the root."""
        parts = [p for p in path.split("/") if p]
        done: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if done:
                    done.pop()
                continue
            if part == ".":
                continue
            here = self.root.joinpath(*done, part)
            try:
                mode = os.lstat(here).st_mode
            except OSError:
                return False
            if stat.S_ISLNK(mode):
                hops += 1
                if hops > 40:  # as the kernel gives up (ELOOP)
                    return False
                target = os.readlink(here)
                parts = [p for p in target.split("/") if p] + parts
                if target.startswith("/"):
                    done = []
                continue
            done.append(part)
            if parts and not stat.S_ISDIR(mode):
                return False
            if not parts:
                return stat.S_ISREG(mode)
        return False

    def hold(self) -> int:
        """A descriptor holding the root's shared lock, so that ``gc`` and ``remove`` leave the root alone while it
        is open (a sandbox holds it for its life).

        Raises:
            FileNotFoundError: the root was removed meanwhile (import the image again).
            BlockingIOError: it is being removed right now.
        """
        fd = os.open(self.root.parent / f"{self.root_id}.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            if not self.root.is_dir():
                raise FileNotFoundError(errno.ENOENT, "the image's root was removed", str(self.root))
        except BaseException:
            os.close(fd)
            raise
        return fd
