"""Where a sandbox's Python lives inside it: paths of rollbox's choosing, whatever the host's paths are.

Inside every sandbox::

    /opt/rollbox/python/        the interpreter's installation (its prefix), read-only; absent for an
                                interpreter of the system's (under /usr), which the sandbox has at its own path
    /opt/rollbox/env/           the environment ``python3`` runs in, read-only: a runtime layer, or a view of the
                                host's own virtual environment (its pyvenv.cfg, ``bin/`` with its scripts, and
                                its site-packages bound in)
    PATH=/opt/rollbox/env/bin:/usr/local/bin:/usr/bin:/bin

So nothing of the runtime is ever mounted in /tmp or /workspace (a checkout under /tmp, a CI runner's /tmp
virtual environment): they start empty, and a reset empties them in place. An interpreter whose binary finds
``libpython`` through an absolute run path is started from a copy whose run path is ``$ORIGIN/../lib`` (see
``_elf``), bound over the original inside the sandbox.

The host-side pieces (that copy, the view of the host's environment) are made once per host state directory,
under names that hash what they were made from, so that concurrent rollbox processes share them and a change
to the host's environment makes new ones instead of changing those running sandboxes use.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rollbox.sandbox._errors import SandboxError

from ._elf import RELOCATABLE_RUNPATH, read_runpath, with_runpath
from ._python import Interpreter, host_interpreter

__all__ = ["ENV", "PATH", "PYTHON", "RuntimeMounts", "host_mounts", "interpreter_home", "layer_mounts", "write_env"]

#: Where a sandbox's interpreter installation is mounted (unless it is the system's own, under /usr).
PYTHON = "/opt/rollbox/python"
#: Where a sandbox's environment (a layer, or the view of the host's) is mounted.
ENV = "/opt/rollbox/env"
#: Every sandbox command's PATH: the environment's scripts first.
PATH = f"{ENV}/bin:/usr/local/bin:/usr/bin:/bin"
#: Host directories every sandbox has at their own path: an interpreter installed there needs no mount.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


@dataclass(frozen=True)
class RuntimeMounts:
    """What a sandbox mounts for its Python: read-only binds of host paths at sandbox paths, in order (a later
    one may lie inside an earlier one)."""

    binds: tuple[tuple[str, str], ...]


def _system(path: Path) -> bool:
    return any(path == Path(d) or Path(d) in path.parents for d in SYSTEM_DIRS)


def interpreter_home(interpreter: Interpreter) -> str:
    """The directory holding ``interpreter``'s binary inside a sandbox (a pyvenv.cfg's ``home``)."""
    if _system(interpreter.executable):
        return str(interpreter.executable.parent)
    return f"{PYTHON}/{interpreter.executable.parent.relative_to(interpreter.prefix)}"


@contextlib.contextmanager
def _made_atomically(target: Path) -> Iterator[Path]:
    """A temporary path beside ``target`` to make it in, renamed to ``target`` when the block ends (another
    process that made it first wins; ours is dropped)."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        yield staging / "made"
        try:
            (staging / "made").rename(target)
        except OSError:
            if not target.exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _interpreter_binds(interpreter: Interpreter, views: Path) -> list[tuple[str, str]]:
    """The binds that put ``interpreter`` at :data:`PYTHON` (none for the system's own).

    Raises:
        SandboxError: its layout cannot be mounted elsewhere (its binary lies outside its prefix, or its run path
            cannot be rewritten).
    """
    if _system(interpreter.executable):
        return []
    prefix, binary = interpreter.prefix, interpreter.executable
    if prefix not in binary.parents:
        raise SandboxError(
            f"the Python at {binary} lies outside its prefix {prefix}: rollbox cannot mount it in a sandbox; use an "
            "interpreter installed in one directory (pyenv's, uv's, python.org's, or the system's)"
        )
    inside = f"{PYTHON}/{binary.relative_to(prefix)}"
    binds = [(str(prefix), PYTHON)]
    runpath = read_runpath(binary)
    if (
        runpath is None
        or runpath.startswith("$ORIGIN")
        or not any(Path(p) == prefix or prefix in Path(p).parents for p in runpath.split(":"))
    ):
        return binds
    st = binary.stat()
    digest = hashlib.sha256(f"{binary}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    copy = views / f"python-{digest}"
    if not copy.exists():
        try:
            data = with_runpath(binary, RELOCATABLE_RUNPATH)
        except ValueError as exc:
            raise SandboxError(f"cannot mount the Python at {binary} in a sandbox: {exc}") from exc
        with _made_atomically(copy) as staging:
            staging.write_bytes(data)
            staging.chmod(0o755)
    return [*binds, (str(copy), inside)]


def _rewrite_scripts(source: Path, dest: Path, pythons: set[Path]) -> None:
    """Copy into ``dest`` the scripts of ``source`` whose ``#!`` line runs one of ``pythons``, with it pointing to
    the sandbox's environment instead (as pip writes them, absolute); other files are left out."""
    for entry in sorted(source.iterdir()) if source.is_dir() else []:
        if not entry.is_file() or entry.is_symlink() or entry.name.startswith("python"):
            continue
        with contextlib.suppress(OSError, UnicodeDecodeError), entry.open("rb") as f:
            first = f.readline(4096)
            if not first.startswith(b"#!"):
                continue
            interpreter, _, rest = first[2:].strip().decode().partition(" ")
            if Path(interpreter) not in pythons and Path(interpreter).parent not in {p.parent for p in pythons}:
                continue
            target = dest / entry.name
            target.write_bytes(f"#!{ENV}/bin/python{' ' + rest if rest else ''}\n".encode() + f.read())
            target.chmod(0o755)


def write_env(
    root: Path, interpreter: Interpreter, *, system_site_packages: bool, scripts: tuple[Path, set[Path]] | None
) -> None:
    """Make ``root`` an environment of ``interpreter`` as a sandbox sees it at :data:`ENV`: pyvenv.cfg pointing to
    the interpreter's sandbox home, ``bin/python*`` links to it, an empty site-packages (a layer fills it, the
    host's view has the host's bound over it), and, with ``scripts`` (a directory and the interpreters its scripts
    may name), those scripts rewritten to run the sandbox's ``python``."""
    home = interpreter_home(interpreter)
    (root / "bin").mkdir(parents=True, exist_ok=True)
    (root / interpreter.site_packages).mkdir(parents=True, exist_ok=True)
    include = "true" if system_site_packages else "false"
    (root / "pyvenv.cfg").write_text(
        f"home = {home}\ninclude-system-site-packages = {include}\nversion = {interpreter.version}\n"
    )
    for name in ("python", "python3", f"python{interpreter.minor}"):
        link = root / "bin" / name
        link.unlink(missing_ok=True)
        link.symlink_to(f"{home}/{interpreter.executable.name}")
    if scripts is not None:
        _rewrite_scripts(scripts[0], root / "bin", scripts[1])
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)


@functools.cache
def host_mounts(views: Path) -> RuntimeMounts:
    """The mounts for the Python rollbox runs on, with the packages of its virtual environment (or, without one,
    of its installation), its view made under ``views`` if need be.

    Raises:
        SandboxError: the interpreter cannot be mounted in a sandbox (see :func:`_interpreter_binds`).
    """
    interpreter = host_interpreter()
    in_venv = sys.prefix != sys.base_prefix
    source_bin = Path(sys.prefix) / "bin"
    pythons = {Path(sys.executable), Path(sys.prefix, "bin", "python3"), interpreter.executable}
    site = Path(sysconfig.get_path("purelib"))
    views.mkdir(mode=0o755, parents=True, exist_ok=True)
    binds = _interpreter_binds(interpreter, views)
    facts = [str(interpreter), sys.prefix, interpreter_home(interpreter)]
    facts += [f"{p.name}:{p.stat().st_mtime_ns}" for p in sorted(source_bin.iterdir()) if p.is_file()]
    digest = hashlib.sha256("\n".join(facts).encode()).hexdigest()[:16]
    view = views / f"env-{digest}"
    if not view.exists():
        with _made_atomically(view) as staging:
            write_env(staging, interpreter, system_site_packages=not in_venv, scripts=(source_bin, pythons))
    binds.append((str(view), ENV))
    if in_venv:
        binds.append((str(site), f"{ENV}/{interpreter.site_packages}"))
    return RuntimeMounts(tuple(binds))


def layer_mounts(env: Path, interpreter: Interpreter, views: Path) -> RuntimeMounts:
    """The mounts for a runtime layer: ``env`` (its environment, made by :func:`write_env` and filled by its
    build) at :data:`ENV`, and the interpreter it was built with.

    Raises:
        SandboxError: the interpreter cannot be mounted in a sandbox.
    """
    views.mkdir(mode=0o755, parents=True, exist_ok=True)
    return RuntimeMounts((*_interpreter_binds(interpreter, views), (str(env), ENV)))
