"""The judge's programs that run inside grading sandboxes, shipped as bytecode compiled once per process.

The host compiles each driver and the value codec it loads once, and every grading pays for unmarshalling
instead of compiling: about a millisecond a sample on the function runner's hot path. A sandbox whose runtime
layer runs another Python version (bytecode differs between them) gets bytecode compiled by that interpreter,
once per process.
"""

from __future__ import annotations

import functools
import importlib.util
import marshal
import subprocess
import sys
from importlib import resources

from rollbox.sandbox import Sandbox, SandboxError

__all__ = ["driver_command", "install_driver"]


_COMPILE = (
    "import importlib.util, marshal, sys\n"
    "code = compile(sys.stdin.read(), sys.argv[1], 'exec', dont_inherit=True)\n"
    "sys.stdout.buffer.write(importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code))\n"
)


def _pyc(package: str, name: str, python: str | None) -> bytes:
    """A sourceless .pyc of ``package/name`` (magic, flags 0, no source mtime or size to check), compiled by the
    interpreter ``python`` (None: this one).

    Raises:
        SandboxError: that interpreter could not compile it.
    """
    source = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    if python is None:
        code = compile(source, name, "exec", dont_inherit=True)
        return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)
    argv = [python, "-I", "-S", "-c", _COMPILE, name]
    done = subprocess.run(argv, input=source.encode(), capture_output=True, check=False)
    if done.returncode != 0:
        raise SandboxError(f"{python} could not compile the judge's {name}: {done.stderr.decode(errors='replace')}")
    return done.stdout


@functools.cache
def _files(driver: str, python: str | None) -> tuple[tuple[str, bytes], ...]:
    return (
        ("driver.pyc", _pyc("rollbox.judge.runners", driver, python)),
        ("_values.pyc", _pyc("rollbox.tasks", "_values.py", python)),
    )


async def install_driver(sb: Sandbox, directory: str, driver: str) -> str:
    """Write the judge's ``driver`` (a module file of ``rollbox.judge.runners``) and the value codec into ``directory``
    of ``sb``, read-only to the program, and return the driver's path there.

    Raises:
        OSError: the files could not be written (the disk limit is reached).
        SandboxError: the sandbox's Python could not compile them.
    """
    layer = sb.runtime.python if sb.runtime is not None else None
    other = layer is not None and layer.minor != f"{sys.version_info.major}.{sys.version_info.minor}"
    for name, data in _files(driver, str(layer.executable) if layer is not None and other else None):
        await sb.write_file(f"{directory}/{name}", data, read_only=True)
    return f"{directory}/driver.pyc"


def driver_command(sb: Sandbox, driver: str, *args: str) -> tuple[list[str], bool]:
    """The command that runs an installed driver in ``sb``, and whether it is a ``warm_python`` one.

    A fork of the sandbox's zygote where one runs or is starting (a warm-Python sandbox); else one plain
    interpreter, which costs less than starting a zygote for a single command.
    """
    if sb.warm_python_ready or sb.warm_python:
        return ["python3", driver, *args], True
    return ["python3", "-s", driver, *args], False
