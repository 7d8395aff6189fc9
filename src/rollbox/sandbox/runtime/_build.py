"""Building one runtime layer with uv, into a directory that becomes the layer only once it is whole.

A build (in ``DIR``, a fresh directory beside the store's layers)::

    uv venv --python INTERPRETER DIR/env
    uv pip install --python DIR/env/bin/python --no-build --link-mode copy --compile-bytecode -r DIR/requirements.txt
    uv pip freeze --python DIR/env/bin/python > DIR/requirements.lock

then ``DIR/env`` is made what a sandbox needs at ``/opt/rollbox/env`` (its pyvenv.cfg and ``python`` links name
the interpreter's sandbox path, its scripts run ``/opt/rollbox/env/bin/python``, nothing in it names ``DIR``).

``--no-build`` (only wheels) unless the spec allows source distributions: building one runs the package's own
code (its build backend) here, on the host, as root, outside every sandbox. uv's own configuration applies (an
index mirror in ``UV_INDEX_URL`` or uv.toml, say); its cache is ``$ROLLBOX_HOME/cache/uv`` unless
``UV_CACHE_DIR`` names another, and it never downloads an interpreter. Files are copied, not linked, from the
cache: a layer depends on nothing outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path

from uv import find_uv_bin

from ._errors import LayerBuildError
from ._mounts import write_env
from ._python import Interpreter
from ._spec import RuntimeSpec

__all__ = ["build_into"]

#: The most of a failed build's log an error message quotes (the whole log is kept in a file).
_LOG_TAIL_LINES = 40


async def _uv(args: list[str], *, env: dict[str, str], log: list[str], timeout_s: float) -> str:
    """Run uv; its stdout. Everything it prints is added to ``log``.

    Raises:
        LayerBuildError: uv failed, or ran out of time (it is killed then).
    """
    log.append(f"$ uv {' '.join(args)}\n")
    process = await asyncio.create_subprocess_exec(
        find_uv_bin(),
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
    except BaseException as exc:  # out of time, or cancelled: uv goes too
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await asyncio.shield(process.wait())
        if not isinstance(exc, TimeoutError):
            raise
        log.append(f"uv did not finish within {timeout_s:.0f} s and was killed\n")
        raise LayerBuildError(
            f"building the layer took more than {timeout_s:.0f} s (uv {args[0]} {args[1]}); check that the "
            "package index can be reached, or give the build more time",
            log="".join(log),
            log_path=None,
        ) from None
    printed = err.decode(errors="replace")
    log.append(out.decode(errors="replace") + printed)
    if process.returncode != 0:
        tail = "\n".join(printed.strip().splitlines()[-_LOG_TAIL_LINES:])
        raise LayerBuildError(
            f"uv {args[0]} {args[1]} failed (exit {process.returncode}):\n{tail}", log="".join(log), log_path=None
        )
    return out.decode()


def _finish(env: Path, interpreter: Interpreter) -> None:
    """Make the environment uv made in ``env`` what a sandbox runs at ``/opt/rollbox/env``: its pyvenv.cfg and
    ``python`` links name the interpreter's sandbox path, its scripts run the sandbox's ``python``."""
    for name in ("CACHEDIR.TAG", ".gitignore", ".lock"):
        (env / name).unlink(missing_ok=True)
    write_env(env, interpreter, system_site_packages=False, scripts=(env / "bin", {env / "bin" / "python"}))


def _packages(freeze: str) -> tuple[tuple[str, str], ...]:
    """(name, version) of each ``name==version`` line of ``uv pip freeze``."""
    pairs = (line.split("==", 1) for line in freeze.splitlines() if "==" in line)
    return tuple(sorted((name.strip(), version.strip()) for name, version in pairs))


async def build_into(
    directory: Path, spec: RuntimeSpec, interpreter: Interpreter, *, cache: Path, timeout_s: float
) -> tuple[tuple[tuple[str, str], ...], str]:
    """Build the layer of ``spec`` into the empty ``directory``: ``env/`` (what sandboxes mount), the requirements
    asked for and the lock of what was installed. Returns (the installed packages, uv's log).

    Raises:
        LayerBuildError: uv failed (``log`` says why; ``log_path`` is not set yet).
    """
    env = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "NO_COLOR": "1"}
    env.setdefault("UV_CACHE_DIR", str(cache))
    env.pop("VIRTUAL_ENV", None)  # uv would take it for the environment to install into
    log: list[str] = []
    python = str(directory / "env" / "bin" / "python")
    await _uv(
        ["venv", "--quiet", "--python", str(interpreter.executable), str(directory / "env")],
        env=env,
        log=log,
        timeout_s=timeout_s,
    )
    for entry in (directory / "env" / "bin").iterdir():  # activation scripts, which name this directory
        if not entry.name.startswith("python"):
            entry.unlink()
    (directory / "requirements.txt").write_text("".join(f"{line}\n" for line in spec.requirements))
    if spec.requirements:
        install = ["pip", "install", "--python", python, "--link-mode", "copy", "--compile-bytecode"]
        install += [] if spec.allow_sdists else ["--no-build"]
        install += ["-r", str(directory / "requirements.txt")]
        await _uv(install, env=env, log=log, timeout_s=timeout_s)
    freeze = await _uv(["pip", "freeze", "--python", python], env=env, log=log, timeout_s=timeout_s)
    (directory / "requirements.lock").write_text(freeze)
    _finish(directory / "env", interpreter)
    for path in [directory, *directory.rglob("*")]:  # readable by every sandbox's uid
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    shutil.rmtree(directory / "env" / "bin" / "__pycache__", ignore_errors=True)
    return _packages(freeze), "".join(log)
