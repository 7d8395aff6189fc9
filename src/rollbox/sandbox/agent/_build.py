"""rollbox's native pieces (the agent, ``agent.c``; the judge's reward shim): each built once per source version
with the system C compiler, then cached."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from rollbox.sandbox._errors import IsolationUnavailable, RollboxError

__all__ = ["agent_binary", "compile_c"]


def _cache_dir() -> Path:
    base = os.environ.get("ROLLBOX_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "rollbox" if base else Path.home() / ".cache" / "rollbox"


def compile_c(
    source: bytes,
    *,
    name: str,
    flags: Sequence[str] = ("-O2",),
    libraries: Sequence[str] = (),
    what: str,
    error: type[RollboxError] = RollboxError,
) -> Path:
    """The path of ``source`` compiled with ``flags`` in rollbox's cache, as ``rollbox-NAME-DIGEST`` (of the source
    and the options); built on first use (by one process at a time or not: each builds its own file and renames it
    into place).

    Args:
        name: the cached file's name, such as ``agent`` or ``reward-shim.so`` (a suffix goes after the digest).
        flags: the compiler's options (``-O2``, ``-shared``).
        libraries: what to link, after the source (``-ldl``).
        what: what is built, for the error messages ("rollbox's agent").
        error: the exception to raise.

    Raises:
        error: no C compiler, or the build failed; the message says what to install.
    """
    digest = hashlib.sha256(source + repr((list(flags), list(libraries))).encode()).hexdigest()[:16]
    stem, dot, suffix = name.partition(".")
    target = _cache_dir() / f"rollbox-{stem}-{digest}{dot}{suffix}"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise error(
            f"rollbox builds {what} on first use and needs a C compiler for it: "
            "install one (apt-get install gcc) or set CC."
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    src = target.with_name(f"{stem}-{digest}-{os.getpid()}.c")
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    src.write_bytes(source)
    try:
        command = [compiler, *flags, "-o", str(tmp), str(src), *libraries]
        build = subprocess.run(command, capture_output=True, text=True, check=False)
        if build.returncode != 0:
            raise error(f"building {what} with {compiler} failed:\n{build.stderr}")
        tmp.chmod(0o755)
        tmp.replace(target)
    finally:
        src.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return target


@functools.cache
def agent_binary() -> Path:
    """The path of the compiled agent, building it on first use.

    Raises:
        IsolationUnavailable: no C compiler, or the build failed; the message says what to install.
    """
    source = resources.files("rollbox.sandbox.agent").joinpath("agent.c").read_bytes()
    try:
        # Static: each sandbox executes it once, as its pid 1, and a dynamic one spent its start on the dynamic
        # linker and kept its mappings (page tables, relocated pages) in the agent and in each command's process.
        return compile_c(source, name="agent", flags=("-O2", "-static"), what="a small native agent")
    except RollboxError:  # no static C library (glibc-static on Fedora, for one)
        return compile_c(source, name="agent", what="a small native agent", error=IsolationUnavailable)
