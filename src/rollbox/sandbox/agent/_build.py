"""The native agent (``agent.c``): built once per source version with the system C compiler, then cached."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from rollbox.sandbox._errors import IsolationUnavailable

__all__ = ["agent_binary"]


def _cache_dir() -> Path:
    base = os.environ.get("ROLLBOX_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "rollbox" if base else Path.home() / ".cache" / "rollbox"


@functools.cache
def agent_binary() -> Path:
    """The path of the compiled agent, building it on first use.

    Raises:
        IsolationUnavailable: no C compiler, or the build failed; the message says what to install.
    """
    source = resources.files("rollbox.sandbox.agent").joinpath("agent.c").read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = _cache_dir() / f"rollbox-agent-{digest}"
    if not target.exists():
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise IsolationUnavailable(
                "rollbox builds a small native agent on first use and needs a C compiler for it: "
                "install one (apt-get install gcc) or set CC."
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        src = target.with_name(f"agent-{digest}-{os.getpid()}.c")
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        src.write_bytes(source)
        try:
            build = subprocess.run(
                [compiler, "-O2", "-o", str(tmp), str(src)], capture_output=True, text=True, check=False
            )
            if build.returncode != 0:
                raise IsolationUnavailable(f"building rollbox's agent with {compiler} failed:\n{build.stderr}")
            tmp.chmod(0o755)
            tmp.replace(target)
        finally:
            src.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)
    return target
