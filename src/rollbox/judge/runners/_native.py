"""The judge's native pieces (``_reward_shim.c``): built once per source version with the system C compiler, as
rollbox's sandbox agent is, and cached beside it."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from rollbox.sandbox import RollboxError

__all__ = ["reward_shim"]


def _cache_dir() -> Path:
    base = os.environ.get("ROLLBOX_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME")
    return Path(base) / "rollbox" if base else Path.home() / ".cache" / "rollbox"


@functools.cache
def reward_shim() -> bytes:
    """The compiled reward shim (a shared object), built on first use.

    Raises:
        RollboxError: no C compiler, or the build failed; the message says what to install.
    """
    source = resources.files("rollbox.judge.runners").joinpath("_reward_shim.c").read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = _cache_dir() / f"rollbox-reward-shim-{digest}.so"
    if not target.exists():
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            raise RollboxError(
                "the script runner builds a small shared object on first use and needs a C compiler: "
                "install one (apt-get install gcc) or set CC"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        src = target.with_name(f"reward-shim-{digest}-{os.getpid()}.c")
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        src.write_bytes(source)
        try:
            command = [compiler, "-O2", "-shared", "-fPIC", "-o", str(tmp), str(src), "-ldl"]
            build = subprocess.run(command, capture_output=True, text=True, check=False)
            if build.returncode != 0:
                raise RollboxError(f"building the script runner's reward shim with {compiler} failed:\n{build.stderr}")
            tmp.replace(target)
        finally:
            src.unlink(missing_ok=True)
            tmp.unlink(missing_ok=True)
    return target.read_bytes()
