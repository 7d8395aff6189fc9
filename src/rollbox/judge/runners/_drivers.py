"""The judge's programs that run inside grading sandboxes, shipped as bytecode compiled once per process.

A grading sandbox runs the same interpreter as rollbox (``python3`` there is rollbox's), so the host compiles
each driver and the value codec it loads once, and every grading pays for unmarshalling instead of compiling:
about a millisecond a sample on the function runner's hot path.
"""

from __future__ import annotations

import functools
import importlib.util
import marshal
from importlib import resources

from rollbox.sandbox import Sandbox

__all__ = ["driver_command", "install_driver"]


def _pyc(package: str, name: str) -> bytes:
    """A sourceless .pyc of ``package/name``: magic, flags 0, no source mtime or size to check."""
    source = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    code = compile(source, name, "exec", dont_inherit=True)
    return importlib.util.MAGIC_NUMBER + bytes(12) + marshal.dumps(code)


@functools.cache
def _files(driver: str) -> tuple[tuple[str, bytes], ...]:
    return (("driver.pyc", _pyc("rollbox.judge.runners", driver)), ("_values.pyc", _pyc("rollbox.tasks", "_values.py")))


async def install_driver(sb: Sandbox, directory: str, driver: str) -> str:
    """Write the judge's ``driver`` (a module file of ``rollbox.judge.runners``) and the value codec into ``directory``
    of ``sb``, read-only to the program, and return the driver's path there.

    Raises:
        OSError: the files could not be written (the disk limit is reached).
    """
    for name, data in _files(driver):
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
