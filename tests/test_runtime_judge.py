"""A task's ``[environment]`` graded by the judge in its runtime layer, and ``rollbox env``.

The fast tests install from a local directory of wheels (see ``test_layers``); the slow one takes a real
package from the package index, as a task imported from elsewhere would.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollbox.judge import VerdictStatus, grade, runtime_spec
from rollbox.sandbox import WarmSandboxes
from rollbox.sandbox.runtime import LayerStore, PythonNotFound, RuntimeSpec, find_python
from rollbox.tasks import Task, load_task
from test_layers import make_wheel, wheels  # noqa: F401  (the fixture)

ROLLBOX = [sys.executable, "-m", "rollbox"]


def _function_task(root: Path, python: str | None) -> Task:
    """A function task whose solution needs the package rbx-greet (from the layer) to pass."""
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    (root / "workspace" / "solution.py").write_text("def greet():\n    return None\n")
    (root / "solution" / "solution.py").write_text(
        "import sys, rbx_greet\n\ndef greet():\n    return [rbx_greet.WORD, '%d.%d' % sys.version_info[:2]]\n"
    )
    version = python or f"{sys.version_info.major}.{sys.version_info.minor}"
    (root / "tests" / "cases.jsonl").write_text(json.dumps({"args": [], "expected": ["hello one", version]}) + "\n")
    environment = f'python = "{python}"\n' if python else ""
    (root / "task.toml").write_text(
        '[grading]\nrunner = "function"\nmodule = "solution.py"\nentry_point = "greet"\n'
        f'[environment]\n{environment}requirements = ["rbx-greet==1.0"]\nenv = {{ GREETING_STYLE = "plain" }}\n'
    )
    return load_task(root)


def _other_python() -> str | None:
    """A Python installed here other than the one rollbox runs on, if any."""
    for minor in ("3.12", "3.13", "3.10", "3.11"):
        if minor != f"{sys.version_info.major}.{sys.version_info.minor}":
            try:
                return find_python(minor).minor
            except PythonNotFound:
                continue
    return None


@pytest.mark.parametrize("other", [False, True], ids=["rollbox-python", "other-python"])
def test_a_task_is_graded_in_its_runtime_layer(wheels: Path, tmp_path: Path, other: bool) -> None:  # noqa: F811
    python = _other_python() if other else None
    if other and python is None:
        pytest.skip("no other Python is installed here")
    task = _function_task(tmp_path / "task", python)
    spec = runtime_spec(task)
    assert spec == RuntimeSpec(python=python, requirements=("rbx-greet==1.0",))  # no pytest: a function task

    async def main() -> list[VerdictStatus]:
        async with WarmSandboxes(size=1) as sandboxes:
            reference = await grade(task, {"solution.py": (task.path / "solution" / "solution.py").read_text()})
            untouched = await grade(task, task.workspace, sandboxes=sandboxes)
            warm = await grade(task, task.path / "solution", sandboxes=sandboxes)
        return [reference.status, untouched.status, warm.status]

    assert asyncio.run(main()) == [VerdictStatus.PASSED, VerdictStatus.FAILED, VerdictStatus.PASSED]
    assert [layer.spec for layer in LayerStore().layers()] == [spec]  # built once for all three


def test_a_task_whose_layer_cannot_be_built_is_an_infra_error_never_a_score(wheels: Path, tmp_path: Path) -> None:  # noqa: F811
    task = _function_task(tmp_path / "task", None)
    text = (task.path / "task.toml").read_text().replace("rbx-greet==1.0", "rbx-greet==9.9")
    (task.path / "task.toml").write_text(text)
    verdict = asyncio.run(grade(load_task(task.path), task.workspace))
    assert verdict.status is VerdictStatus.INFRA_ERROR and verdict.reward is None
    assert "rbx-greet" in (verdict.error or "")


def test_a_pytest_task_gets_the_judges_pytest_in_its_layer_unless_it_names_one(tmp_path: Path) -> None:
    root = tmp_path / "task"
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "tests" / "test_x.py").write_text("def test_x():\n    pass\n")
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[environment]\nrequirements = ["six"]\n')
    from importlib.metadata import version

    assert runtime_spec(load_task(root)) == RuntimeSpec(requirements=("six", f"pytest=={version('pytest')}"))
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[environment]\nrequirements = ["pytest<9"]\n')
    assert runtime_spec(load_task(root)) == RuntimeSpec(requirements=("pytest<9",))
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n')
    assert runtime_spec(load_task(root)) is None  # rollbox's own Python: no layer


def test_rollbox_env_builds_lists_and_collects_layers(wheels: Path, tmp_path: Path) -> None:  # noqa: F811
    task = _function_task(tmp_path / "task", None)
    env = dict(os.environ)

    def rollbox(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*ROLLBOX, "env", *args], capture_output=True, text=True, env=env, check=False)

    built = rollbox("build", str(task.path), "--json")
    assert built.returncode == 0, built.stderr
    answer = json.loads(built.stdout)
    assert answer["built"] and answer["packages"] == {"rbx-greet": "1.0"}
    again = rollbox("build", str(task.path))
    assert again.returncode == 0 and "already built" in again.stdout
    listed = rollbox("list")
    assert listed.returncode == 0 and answer["key"][:12] in listed.stdout and "rbx-greet==1.0" in listed.stdout
    assert json.loads(rollbox("list", "--json").stdout)["key"] == answer["key"]
    kept = rollbox("gc")
    assert kept.returncode == 0 and kept.stdout == "" and "0 layers removed" in kept.stderr
    removed = rollbox("gc", "--keep-days", "0")
    assert removed.returncode == 0 and removed.stdout == f"removed {answer['key']}\n"
    assert rollbox("list", "--json").stdout == ""
    # A build that fails says why and exits 1; a bad task exits 2.
    text = (task.path / "task.toml").read_text().replace("rbx-greet==1.0", "rbx-greet==9.9")
    (task.path / "task.toml").write_text(text)
    failed = rollbox("build", str(task.path))
    assert failed.returncode == 1 and "rbx-greet" in failed.stderr and "whole log" in failed.stderr
    assert rollbox("build", str(tmp_path / "nothing")).returncode == 2
    assert rollbox("gc", "--keep-days", "-1").returncode == 2


@pytest.mark.slow
def test_a_task_needing_a_package_from_the_index_is_graded_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pytest task whose tests import a real package from the package index (small, pure Python): its layer is
    # built from the index with the judge's pytest, and the reference passes while the untouched workspace fails.
    monkeypatch.setenv("ROLLBOX_HOME", str(tmp_path / "home"))
    root = tmp_path / "task"
    for part in ("workspace", "tests", "solution"):
        (root / part).mkdir(parents=True)
    (root / "workspace" / "wrap.py").write_text("def wrap(text, width):\n    return [text]\n")
    (root / "solution" / "wrap.py").write_text(
        "import more_itertools\n\ndef wrap(text, width):\n"
        "    return [''.join(c) for c in more_itertools.chunked(text, width)]\n"
    )
    (root / "tests" / "test_wrap.py").write_text(
        "import more_itertools\nfrom wrap import wrap\n\n"
        "def test_wrap():\n    assert wrap('abcdefg', 3) == ['abc', 'def', 'g']\n\n"
        "def test_package_is_the_layers():\n    assert more_itertools.__file__.startswith('/opt/rollbox/env/')\n"
    )
    (root / "task.toml").write_text(
        '[grading]\nrunner = "pytest"\n[environment]\nrequirements = ["more-itertools==10.5.0"]\n'
    )
    task = load_task(root)
    reference = asyncio.run(grade(task, root / "solution"))
    assert reference.status is VerdictStatus.PASSED, reference
    untouched = asyncio.run(grade(task, task.workspace))
    assert untouched.status is VerdictStatus.FAILED and untouched.passed == 1, untouched
    (layer,) = LayerStore().layers()
    assert dict(layer.packages)["more-itertools"] == "10.5.0" and "pytest" in dict(layer.packages)
