"""Where a sandbox's Python lives: under /opt/rollbox, whatever the host's paths are (a checkout or a virtual
environment under /tmp included), so that /tmp and /workspace start empty and resets stay in place."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import TIME_SCALE
from rollbox.sandbox import Limits, Sandbox
from rollbox.sandbox.runtime import LayerStore, RuntimeSpec
from rollbox.sandbox.runtime._elf import RELOCATABLE_RUNPATH, read_runpath, with_runpath
from rollbox.sandbox.runtime._python import host_interpreter
from test_layers import wheels  # noqa: F401  (the fixture)

LIMITS = Limits(timeout_s=30 * TIME_SCALE, cpu_time_s=15 * TIME_SCALE)


def test_the_sandboxs_python_and_its_packages_are_mounted_under_opt_rollbox_only() -> None:
    async def main() -> tuple[str, str, str]:
        async with Sandbox(limits=LIMITS) as sb:
            python = await sb.exec(["python3", "-c", "import sys, pytest; print(sys.executable, sys.prefix)"])
            script = await sb.exec(["pytest", "--version"])  # a console script of the host's environment
            mounts = await sb.exec(["cat", "/proc/self/mountinfo"])
        assert python.ok and script.ok and mounts.ok, (python, script, mounts)
        return python.stdout_text, script.stdout_text, mounts.stdout_text

    python, script, mounts = asyncio.run(main())
    assert python == "/opt/rollbox/env/bin/python3 /opt/rollbox/env\n"
    assert script.startswith("pytest ")
    points = [line.split()[4] for line in mounts.splitlines()]
    runtime = [p for p in points if p.startswith("/opt/rollbox/") and p not in ("/opt/rollbox/agent",)]
    assert runtime and all(
        p.startswith(("/opt/rollbox/env", "/opt/rollbox/python", "/opt/rollbox/zygote")) for p in runtime
    )
    assert not [p for p in points if p.startswith(("/tmp/", "/workspace/", "/dev/shm/"))]


_UNDER_TMP = """
import asyncio, json, sys
import rollbox

async def main():
    limits = rollbox.Limits(timeout_s=float(sys.argv[1]), cpu_time_s=float(sys.argv[1]) / 2)
    async with rollbox.SandboxPool(size=1, limits=limits) as pool:
        async with pool.sandbox() as sb:
            script = "ls -A /tmp /workspace; echo x > /tmp/left; python3 -c 'import sys; print(sys.prefix)'"
            first = await sb.exec(["sh", "-c", script])
            agent = sb._impl.agent.pid
        async with pool.sandbox() as sb:
            second = await sb.exec(["ls", "-A", "/tmp"])
            again = sb._impl.agent.pid
    return {"first": first.stdout_text, "second": second.stdout_text, "same_agent": agent == again,
            "prefix": sys.prefix}

print(json.dumps(asyncio.run(main())))
"""


def test_a_rollbox_installed_under_tmp_leaves_tmp_empty_and_resets_in_place(tmp_path: Path) -> None:
    # A virtual environment in /tmp (a fresh clone there, a CI runner's), running rollbox: its sandboxes' /tmp is
    # empty at the start and after a reset, and that reset is in place (the same agent), not a restart.
    venv = Path(tempfile.mkdtemp(prefix="rollbox-test-venv-", dir="/tmp"))
    try:
        subprocess.run([sys.base_prefix + "/bin/python3", "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next((venv / "lib").glob("python3*/site-packages"))
        ours = sysconfig.get_path("purelib")  # where rollbox and its dependencies are installed for this test run
        (site / "rollbox-test.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-c", _UNDER_TMP, str(30 * TIME_SCALE)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    finally:
        shutil.rmtree(venv)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["prefix"] == str(venv)  # really running from /tmp
    assert seen["first"] == "/tmp:\n\n/workspace:\n/opt/rollbox/env\n"
    assert seen["second"] == "" and seen["same_agent"]


def test_an_interpreter_with_an_absolute_run_path_starts_from_a_relocated_copy(tmp_path: Path) -> None:
    interpreter = host_interpreter()
    runpath = read_runpath(interpreter.executable)
    if runpath is None or not runpath.startswith("/"):
        pytest.skip(f"{interpreter.executable} has no absolute run path (it is relocatable as it is)")
    # Its installation at another prefix: the original binary cannot find libpython there, the copy can.
    prefix = tmp_path / "moved"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib").symlink_to(interpreter.prefix / "lib")
    moved = prefix / "bin" / interpreter.executable.name
    moved.write_bytes(with_runpath(interpreter.executable, RELOCATABLE_RUNPATH))
    moved.chmod(0o755)
    assert read_runpath(moved) == RELOCATABLE_RUNPATH
    env = {"PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(moved), "-c", "import sys, json; print(sys.prefix)"], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == str(prefix), done.stderr
    with pytest.raises(ValueError, match="no run path"):
        with_runpath(interpreter.executable, "x" * (len(runpath) + 1))
    with pytest.raises(ValueError, match="ELF"):
        read_runpath(Path(__file__))


def test_a_layer_on_the_systems_own_python_needs_no_interpreter_mount(
    wheels: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    system = sorted(Path("/usr/bin").glob("python3.[0-9]*"))
    system = [p for p in system if p.name.replace("python", "").replace(".", "").isdigit()]
    if not system:
        pytest.skip("no Python of the system's in /usr/bin")
    monkeypatch.setenv("ROLLBOX_PYTHONS", str(system[-1]))
    version = system[-1].name.removeprefix("python")
    layer = asyncio.run(LayerStore().ensure(RuntimeSpec(python=version, requirements=("rbx-greet==1.0",))))
    assert str(layer.python.executable).startswith("/usr/")

    async def main() -> tuple[str, str]:
        async with Sandbox(runtime=layer, limits=LIMITS) as sb:
            code = textwrap.dedent("""
                import os, sys, rbx_greet
                print(rbx_greet.WORD, os.path.realpath(sys.executable), sys.base_prefix)
            """)
            result = await sb.exec(["python3", "-c", code])
            mounts = await sb.exec(["cat", "/proc/self/mountinfo"])
        assert result.ok, result
        return result.stdout_text, mounts.stdout_text

    out, mounts = asyncio.run(main())
    assert out.split() == ["hello", "one", str(layer.python.executable), "/usr"]
    assert "/opt/rollbox/python" not in mounts


def test_the_runtime_packages_public_names() -> None:
    from rollbox.sandbox import runtime

    assert sorted(runtime.__all__) == [
        "Interpreter",
        "Layer",
        "LayerBuildError",
        "LayerStore",
        "PythonNotFound",
        "RuntimeSpec",
        "find_python",
        "rollbox_home",
    ]
    assert all(hasattr(runtime, name) for name in runtime.__all__)
