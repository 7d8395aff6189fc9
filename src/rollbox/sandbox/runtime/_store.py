"""The layer store: each runtime layer built once, under the key of its resolved spec, shared read-only.

Layout (``$ROLLBOX_HOME/layers``; ``ROLLBOX_HOME`` defaults to ``~/.rollbox``)::

    <key>/                  a layer, whole: it appears under its name only once built (a rename)
        env/                what sandboxes mount at /opt/rollbox/env (see ``_build``)
        requirements.txt    the requirements asked for
        requirements.lock   what was installed, exact versions (``uv pip freeze``)
        build.log           what uv printed
        layer.json          the spec, the interpreter, the packages, when it was built
    <key>.lock              flock: exclusive while the layer is built or removed, shared while a sandbox uses it
                            (and while a caller checks it is there); its mtime is the layer's last use
    .build-<key>-*/         a build under way, or left by a builder that died (``gc`` removes it)
    .failed/<key>.log       the log of the last failed build of <key>

Concurrent requests for one layer, from any number of processes, build it once: the first takes the exclusive
lock and builds, the others wait for the lock and find it built. A failed build leaves nothing under the
layer's name. ``gc`` removes what no sandbox uses and nothing used for ``keep_days``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ._build import build_into
from ._errors import LayerBuildError
from ._mounts import RuntimeMounts, layer_mounts
from ._python import Interpreter, find_python
from ._spec import RuntimeSpec

__all__ = [
    "Layer",
    "LayerStore",
    "advice",
    "discard",
    "publish",
    "remove_partials",
    "rollbox_home",
    "unheld",
    "write_durably",
]

_DAY_S = 86_400.0
ABANDONED_S = 3600.0  #: a build, a removal, a download or a partial write this old and unheld was left by a crash


def rollbox_home() -> Path:
    """Where rollbox keeps what it builds to last: ``ROLLBOX_HOME``, default ``~/.rollbox``."""
    return Path(os.environ.get("ROLLBOX_HOME") or Path.home() / ".rollbox")


def advice(exc: OSError, where: Path, gc: str) -> str:
    """What to do about ``exc``, an OSError of a store under ``where``, by its errno: free space (``gc`` is the
    command that does) for a full disk, check permissions for a refusal, nothing more for anything else (a
    program missing, a path that is not a directory), whose message says what it is."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f": free space under {where} ('{gc}')"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f": check the permissions of {where}"
    return ""


def publish(staging: Path, target: Path, *, linked: bool = False) -> None:
    """Rename the finished directory ``staging`` to ``target``, its files and directories flushed to disk first
    and the rename after: a power loss leaves the whole tree under ``target``, or nothing, never empty files under
    a name that says it is complete.

    ``linked`` says that the tree's files with more than one name are hard links to files already published
    (an image's root, made of its layers' files): their data is on disk, so only its directories and its own new
    files are flushed."""
    for base, _dirs, files in os.walk(staging):
        for name in files:
            path = os.path.join(base, name)
            st = os.lstat(path)
            # Links and fifos hold no data of their own; a published file's other names share its flushed data.
            if stat.S_ISREG(st.st_mode) and not (linked and st.st_nlink > 1):
                _fsync(path, os.O_RDONLY)
        _fsync(base, os.O_RDONLY | os.O_DIRECTORY)
    staging.rename(target)
    _fsync(str(target.parent), os.O_RDONLY | os.O_DIRECTORY)


def write_durably(path: Path, data: bytes) -> None:
    """Write ``data`` as the file ``path`` whole: into a new file beside it (``.<name>.*.new``, which no reader
    takes for a record), flushed to disk, renamed over ``path``, and the rename flushed. A power loss leaves the
    old file or the new one under ``path``, never an empty or partial one; what it leaves under a temporary
    name is removed by :func:`remove_partials`."""
    fd, staging = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(staging, 0o644)
        os.rename(staging, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(staging)
        raise
    _fsync(str(path.parent), os.O_RDONLY | os.O_DIRECTORY)


def remove_partials(directory: Path) -> None:
    """Remove what :func:`write_durably` left in ``directory`` when it was cut off (a crash, a power loss)
    and no writer has touched for :data:`ABANDONED_S`."""
    for partial in directory.glob(".*.new") if directory.is_dir() else []:
        with contextlib.suppress(OSError):
            if time.time() - partial.lstat().st_mtime > ABANDONED_S:
                partial.unlink()


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Layer:
    """A built runtime layer: give it to a sandbox as ``Sandbox(runtime=layer)``.

    Attributes:
        key: Its content key (see :meth:`RuntimeSpec.key`).
        path: Its directory in the store.
        spec: What it was built for.
        python: The interpreter it runs on.
        packages: What it holds, ``(name, version)``, as its lock file says.
        built_at: When it was built (seconds since the epoch).
        built: Whether the call that returned it built it (rather than finding it built).
    """

    key: str
    path: Path
    spec: RuntimeSpec
    python: Interpreter
    packages: tuple[tuple[str, str], ...]
    built_at: float
    built: bool = field(default=False, compare=False)

    @property
    def env(self) -> Path:
        """The environment sandboxes mount at ``/opt/rollbox/env``."""
        return self.path / "env"

    @property
    def lock_file(self) -> Path:
        """The exact versions it holds, as ``uv pip freeze`` wrote them."""
        return self.path / "requirements.lock"

    def mounts(self, views: Path) -> RuntimeMounts:
        """What a sandbox mounts for it (see ``_mounts``), with host-side pieces made under ``views``."""
        return layer_mounts(self.env, self.python, views)

    def hold(self) -> int:
        """A descriptor holding the layer's shared lock, so that ``gc`` leaves it alone while it is open.

        Raises:
            FileNotFoundError: the layer was removed meanwhile (build it again: :meth:`LayerStore.ensure`).
            BlockingIOError: it is being removed right now.
        """
        fd = os.open(self.path.parent / f"{self.key}.lock", os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            if not (self.env / "pyvenv.cfg").exists():
                raise FileNotFoundError(errno.ENOENT, "the layer was removed", str(self.path))
        except BaseException:
            os.close(fd)
            raise
        return fd

    @classmethod
    def read(cls, path: Path) -> Layer:
        """The layer in ``path``, from its layer.json.

        Raises:
            OSError, ValueError, KeyError: ``path`` holds no layer.
        """
        facts = json.loads((path / "layer.json").read_text())
        spec, python = facts["spec"], facts["python"]
        return cls(
            key=facts["key"],
            path=path,
            spec=RuntimeSpec(
                python=spec["python"], requirements=tuple(spec["requirements"]), allow_sdists=spec["allow_sdists"]
            ),
            python=Interpreter(
                version=python["version"],
                executable=Path(python["executable"]),
                prefix=Path(python["prefix"]),
                lib=python["lib"],
            ),
            packages=tuple((name, version) for name, version in facts["packages"]),
            built_at=facts["built_at"],
        )


class LayerStore:
    """The runtime layers of this machine, each built once and shared read-only by every sandbox that uses it.

    Args:
        root: Where layers live (default ``$ROLLBOX_HOME/layers``).
        build_timeout_s: How long one step of a build (resolving and installing) may take before it fails.
    """

    def __init__(self, root: Path | None = None, *, build_timeout_s: float = 900.0) -> None:
        self.root = root or rollbox_home() / "layers"
        self.build_timeout_s = build_timeout_s

    def _lock_path(self, key: str) -> Path:
        return self.root / f"{key}.lock"

    def _open_lock(self, key: str) -> int:
        self.root.mkdir(mode=0o755, parents=True, exist_ok=True)
        return os.open(self._lock_path(key), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def get(self, key: str) -> Layer | None:
        """The built layer ``key`` (or a prefix of it, as ``rollbox env list`` shows), or None."""
        if not key or any(c not in "0123456789abcdef" for c in key):
            return None
        if len(key) < 64:
            matches = [p for p in self.root.glob(f"{key}*") if p.is_dir() and len(p.name) == 64]
            if len(matches) != 1:
                return None
            key = matches[0].name
        with contextlib.suppress(OSError, ValueError, KeyError):
            return Layer.read(self.root / key)
        return None

    def layers(self) -> list[Layer]:
        """Every built layer, most recently used first."""
        layers = [layer for p in self._layer_dirs() if (layer := self.get(p.name)) is not None]
        return sorted(layers, key=lambda layer: -self.last_used(layer.key))

    def _layer_dirs(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if p.is_dir() and len(p.name) == 64 and not p.name.startswith(".")]

    def last_used(self, key: str) -> float:
        """When the layer was last handed out (seconds since the epoch), or built."""
        with contextlib.suppress(OSError):
            return self._lock_path(key).stat().st_mtime
        return 0.0

    async def ensure(self, spec: RuntimeSpec) -> Layer:
        """The layer of ``spec``, built now if it is not yet (by one caller, however many ask at once).

        Raises:
            PythonNotFound: the spec's Python is not installed here.
            LayerBuildError: the build failed (its log is in the error and in ``.failed/<key>.log``), or the store
                could not be written (its disk full).
        """
        interpreter = find_python(spec.python)
        key = spec.key(interpreter)
        with self._failing(key):
            fd = self._open_lock(key)
            try:
                delay = 0.02
                while True:
                    # A shared lock is enough to use a built layer, so it is asked for again while waiting: a
                    # waiter for the exclusive lock alone would wait as long as any sandbox holds the layer.
                    if _try_lock(fd, fcntl.LOCK_SH):
                        if (found := self._found(key)) is not None:
                            return found
                        fcntl.flock(fd, fcntl.LOCK_UN)  # before asking for the exclusive one: no deadlock
                    if _try_lock(fd, fcntl.LOCK_EX):
                        found = self._found(key)
                        return found if found is not None else await self._build(key, spec, interpreter)
                    await asyncio.sleep(delay)  # a build or a removal is under way; the event loop goes on
                    delay = min(delay * 2, 0.5)
            finally:
                os.close(fd)

    @contextlib.contextmanager
    def _failing(self, key: str) -> Iterator[None]:
        """An OSError of the store's own in the block (its disk full, a file it cannot write) as a
        LayerBuildError naming the layer: the machine's failure, never that of a grading's candidate."""
        try:
            yield
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise LayerBuildError(
                f"cannot build or use the runtime layer {key[:12]} in {self.root}: {exc.strerror or exc}{where}"
                + advice(exc, self.root, "rollbox env gc"),
                log="",
                log_path=None,
            ) from exc

    def _found(self, key: str) -> Layer | None:
        """The built layer ``key`` (its use recorded), with its lock held by the caller."""
        layer = self.get(key)
        if layer is not None:
            os.utime(self._lock_path(key))
        return layer

    async def _build(self, key: str, spec: RuntimeSpec, interpreter: Interpreter) -> Layer:
        directory = Path(tempfile.mkdtemp(prefix=f".build-{key}-", dir=self.root))
        try:
            try:
                packages, log = await build_into(
                    directory, spec, interpreter, cache=rollbox_home() / "cache" / "uv", timeout_s=self.build_timeout_s
                )
            except LayerBuildError as exc:
                failed = self.root / ".failed" / f"{key}.log"
                failed.parent.mkdir(exist_ok=True)
                failed.write_text(exc.log)
                raise LayerBuildError(
                    f"cannot build the runtime layer for Python {interpreter.version} with "
                    f"{list(spec.requirements) or 'no packages'}: {exc}\n(whole log: {failed})",
                    log=exc.log,
                    log_path=failed,
                ) from None
            (directory / "build.log").write_text(log)
            built_at = time.time()
            facts = {
                "key": key,
                "spec": {
                    "python": spec.python,
                    "requirements": list(spec.requirements),
                    "allow_sdists": spec.allow_sdists,
                },
                "python": {
                    "version": interpreter.version,
                    "executable": str(interpreter.executable),
                    "prefix": str(interpreter.prefix),
                    "lib": interpreter.lib,
                },
                "packages": [list(p) for p in packages],
                "built_at": built_at,
            }
            (directory / "layer.json").write_text(json.dumps(facts, indent=2) + "\n")
            directory.chmod(0o755)
            if os.path.lexists(self.root / key):
                # A broken layer stands there (its layer.json unreadable): no rename goes onto it, so it goes first.
                discard(self.root / key, self.root)
            publish(directory, self.root / key)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        os.utime(self._lock_path(key))
        (self.root / ".failed" / f"{key}.log").unlink(missing_ok=True)
        return Layer(
            key=key,
            path=self.root / key,
            spec=spec,
            python=interpreter,
            packages=packages,
            built_at=built_at,
            built=True,
        )

    def gc(self, *, keep_days: float = 30.0) -> list[str]:
        """Remove every layer no sandbox holds and none used for ``keep_days`` days, and what dead builds left.
        Returns the keys removed.

        Raises:
            ValueError: ``keep_days`` is negative.
        """
        if keep_days < 0:
            raise ValueError(f"keep_days must be >= 0, got {keep_days}")
        removed: list[str] = []
        horizon = time.time() - keep_days * _DAY_S
        for directory in self._layer_dirs():
            with unheld(self._lock_path(directory.name)) as free:
                # Looked at again under the lock: a caller that found the layer meanwhile has used it now.
                if free and self.last_used(directory.name) < horizon:
                    discard(directory, self.root)
                    removed.append(directory.name)
        for leftover in self.root.glob(".build-*") if self.root.is_dir() else []:
            key = leftover.name.removeprefix(".build-").split("-", 1)[0]
            with unheld(self._lock_path(key)) as free:
                if free and time.time() - leftover.stat().st_mtime > ABANDONED_S:
                    shutil.rmtree(leftover, ignore_errors=True)
        for stale in [*self.root.glob(".trash-*"), *self.root.glob(".failed/*.log")] if self.root.is_dir() else []:
            if stale.stat().st_mtime >= min(horizon, time.time() - ABANDONED_S):
                continue
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
        return removed


@contextlib.contextmanager
def unheld(lock: Path) -> Iterator[bool]:
    """Whether the flock ``lock`` (made if missing) could be taken exclusively now: no build, sandbox or pull
    holds it. Held for the block."""
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        yield _try_lock(fd, fcntl.LOCK_EX)
    finally:
        os.close(fd)


def discard(path: Path, trash_dir: Path) -> None:
    """Take ``path`` (a tree, or whatever stands under its name) out of its name at once, a rename into a new
    ``.trash-<name>-*`` directory under ``trash_dir`` (on its filesystem; a crash may leave it there, for gc),
    then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=f".trash-{path.name}-", dir=trash_dir))
    path.rename(trash / path.name)
    shutil.rmtree(trash, ignore_errors=True)


def _try_lock(fd: int, operation: int) -> bool:
    """Take ``operation`` (``LOCK_SH`` or ``LOCK_EX``) on ``fd`` if nothing stands in its way now."""
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True
