"""The Python interpreters installed on this machine, of which a sandbox's runtime takes one.

A runtime names a version (``"3.12"``, or exactly ``"3.12.1"``); :func:`find_python` picks the first installed
CPython of that version, looking in this order: ``ROLLBOX_PYTHONS`` (interpreter paths, ``:``-separated), the
interpreter rollbox runs on, ``python3.X`` on ``PATH``, ``/usr/local/bin`` and ``/usr/bin``, and pyenv's
versions (``$PYENV_ROOT/versions``, default ``~/.pyenv``). Each candidate is asked what it is by running it
once per process (a few ms); a virtual environment's interpreter counts as the installation it was made from.
"""

from __future__ import annotations

import functools
import glob
import json
import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ._errors import PythonNotFound

__all__ = ["Interpreter", "find_python", "host_interpreter"]

_VERSION = re.compile(r"^3\.\d{1,2}(\.\d{1,3})?$")
_QUERY = (
    "import json, os, platform, sys, sysconfig\n"
    "print(json.dumps({'implementation': sys.implementation.name, 'version': platform.python_version(),\n"
    "    'prefix': sys.base_prefix, 'executable': os.path.realpath(sys.executable),\n"
    "    'lib': 'python' + sysconfig.get_python_version() + ('t' if sysconfig.get_config_var('Py_GIL_DISABLED')"
    " else '')}))\n"
)


@dataclass(frozen=True)
class Interpreter:
    """One CPython installation: what a runtime layer is built with, and what its sandboxes run.

    Attributes:
        version: Its full version, ``"3.12.1"``.
        executable: The interpreter binary, every link resolved.
        prefix: Its installation prefix (``sys.base_prefix``), holding ``lib/pythonX.Y``.
        lib: The name of its library directory under ``lib/``: ``"python3.12"`` (``"python3.13t"`` when
            free-threaded).
    """

    version: str
    executable: Path
    prefix: Path
    lib: str

    @property
    def minor(self) -> str:
        """``MAJOR.MINOR``: ``"3.12"``."""
        return ".".join(self.version.split(".")[:2])

    @property
    def site_packages(self) -> str:
        """Where a virtual environment of this interpreter keeps its packages, relative to the environment."""
        return f"lib/{self.lib}/site-packages"

    def matches(self, version: str) -> bool:
        """Whether this is Python ``version`` (``"3.12"`` or ``"3.12.1"``)."""
        return version in (self.version, self.minor)


@functools.cache
def host_interpreter() -> Interpreter:
    """The installation of the interpreter rollbox itself runs on (the base of its virtual environment, if any)."""
    base = getattr(sys, "_base_executable", sys.executable)
    gil_disabled = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    return Interpreter(
        version=".".join(str(v) for v in sys.version_info[:3]),
        executable=Path(os.path.realpath(base)),
        prefix=Path(sys.base_prefix),
        lib=f"python{sysconfig.get_python_version()}{'t' if gil_disabled else ''}",
    )


@functools.cache
def _query(executable: str) -> Interpreter | None:
    """What the interpreter at ``executable`` is; None when it is no CPython or does not run."""
    try:
        done = subprocess.run(
            [executable, "-I", "-S", "-c", _QUERY], capture_output=True, text=True, timeout=30, check=False
        )
        facts = json.loads(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if done.returncode != 0 or facts.get("implementation") != "cpython":
        return None
    return Interpreter(
        version=facts["version"], executable=Path(facts["executable"]), prefix=Path(facts["prefix"]), lib=facts["lib"]
    )


def _candidates(version: str) -> list[str]:
    """Interpreter paths that may be Python ``version`` (besides ``ROLLBOX_PYTHONS``), most preferred first, each
    real binary once."""
    minor = ".".join(version.split(".")[:2])
    paths: list[str] = []
    for directory in [*os.environ.get("PATH", "").split(":"), "/usr/local/bin", "/usr/bin"]:
        if directory and os.path.basename(directory) != "shims":  # pyenv's shims are scripts that pick a version
            paths.append(os.path.join(directory, f"python{minor}"))
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    paths += sorted(glob.glob(os.path.join(glob.escape(pyenv), "versions", f"{minor}*", "bin", f"python{minor}")))
    real = [os.path.realpath(p) for p in paths if os.path.isfile(p) and os.access(p, os.X_OK)]
    return list(dict.fromkeys(real))


def find_python(version: str | None = None) -> Interpreter:
    """The installed CPython of ``version`` (``"3.12"``, or exactly ``"3.12.1"``); ``None``: the one rollbox runs on.

    Raises:
        ValueError: ``version`` is not ``3.X`` or ``3.X.Y``.
        PythonNotFound: no such interpreter is installed (the message says how to install or name one).
    """
    host = host_interpreter()
    if version is None:
        return host
    if not _VERSION.match(version):
        raise ValueError(f"python: expected a version such as '3.12' or '3.12.1', got {version!r}")
    named = [os.path.realpath(p) for p in os.environ.get("ROLLBOX_PYTHONS", "").split(":") if p]
    for path in [*named, *([] if host.matches(version) else _candidates(version))]:
        found = _query(path)
        if found is not None and found.matches(version):
            return found
    if host.matches(version):
        return host
    raise PythonNotFound(
        f"no Python {version} is installed on this machine (rollbox runs on {host.version}, {host.executable}); "
        f"install it (with pyenv, uv python install, or the system's packages), or name its binary in "
        "ROLLBOX_PYTHONS=/path/to/python3.X"
    )
