"""The judge's programs that run inside grading sandboxes, shipped as bytecode compiled once per process.

The host compiles each driver and the value codec it loads once, and every grading pays for unmarshalling
instead of compiling: about a millisecond a sample on the function runner's hot path. A sandbox whose runtime
layer runs another Python version (bytecode differs between them) gets bytecode compiled by that interpreter,
once per process.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.util
import marshal
import subprocess
import sys
from collections.abc import Iterator
from importlib import resources

from rollbox.sandbox import RollboxError, Sandbox, SandboxError

from ._probe import forks_apply

__all__ = ["compiled", "driver_command", "install_driver", "judges_own", "sandbox_python"]


@contextlib.contextmanager
def judges_own(what: str) -> Iterator[None]:
    """Writing the task's own files (its tests, its cases) into a grading sandbox, before any of the candidate's:
    a full disk there is the task's failure (they do not fit its disk limit), reported as rollbox's, never as the
    candidate's tree that did not fit."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        raise RollboxError(
            f"the task's {what} does not fit the grading sandbox ({exc.strerror or exc}): raise its [limits] disk"
        ) from exc


_COMPILE = (
    "import importlib.util, marshal, sys\n"
    "code = compile(sys.stdin.read(), sys.argv[1], 'exec', dont_inherit=True)\n"
    "sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))\n"
)


def _pyc(package: str, name: str, python: str | None) -> bytes:
    """A sourceless .pyc of ``package/name``, compiled by the interpreter ``python`` (None: this one)."""
    return compiled(resources.files(package).joinpath(name).read_text(encoding="utf-8"), name, python)


def compiled(source: str, filename: str, python: str | None) -> bytes:
    """``source`` as a sourceless .pyc (magic, flags 0, no source mtime or size to check; the code object's file
    name ``filename``), compiled by the interpreter ``python`` (None: this one).

    Raises:
        SandboxError: that interpreter could not compile it.
    """
    if python is None:
        code = compile(source, filename, "exec", dont_inherit=True)
        return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)
    argv = [python, "-I", "-S", "-W", "ignore", "-c", _COMPILE, filename]
    done = subprocess.run(argv, input=source.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        raise SandboxError(f"{python} could not compile {filename}: {done.stderr.decode(errors='replace')[-2000:]}")
    return done.stdout


@functools.cache
def _files(driver: str, name: str, python: str | None) -> tuple[tuple[str, bytes], ...]:
    return (
        (name, _pyc("rollbox.judge.runners", driver, python)),
        ("_values.pyc", _pyc("rollbox.tasks", "_values.py", python)),
    )


async def install_driver(sb: Sandbox, directory: str, driver: str, *, name: str = "driver.pyc") -> str:
    """Write the judge's ``driver`` (a module file of ``rollbox.judge.runners``) as ``name``, and the value codec,
    into ``directory`` of ``sb``, read-only to the program, and return the driver's path there.

    Raises:
        OSError: the files could not be written (the disk limit is reached).
        SandboxError: the sandbox's Python could not compile them.
    """
    for file, data in _files(driver, name, sandbox_python(sb)):
        await sb.write_file(f"{directory}/{file}", data, read_only=True)
    return f"{directory}/{name}"


def sandbox_python(sb: Sandbox) -> str | None:
    """The interpreter that must compile bytecode for ``sb``: its runtime layer's, where that runs another Python
    version than this one; else None (this one)."""
    layer = sb.runtime.python if sb.runtime is not None else None
    other = layer is not None and layer.minor != f"{sys.version_info.major}.{sys.version_info.minor}"
    return str(layer.executable) if layer is not None and other else None


def driver_command(sb: Sandbox, driver: str, *args: str) -> tuple[list[str], bool]:
    """The command that runs an installed driver in ``sb``, and whether it is a ``warm_python`` one.

    A fork of the sandbox's zygote where one runs or is starting (a warm-Python sandbox); else one plain
    interpreter, which costs less than starting a zygote for a single command; and always one plain interpreter
    under a probe's variables (``_probe``) where the zygote did not start under them, which a fork would not take.
    """
    if (sb.warm_python_ready or sb.warm_python) and forks_apply(sb):
        return ["python3", driver, *args], True
    return ["python3", "-s", driver, *args], False
