"""The ``pytest`` runner: the task's hidden tests, with canaries, run by a pytest the candidate cannot configure.

In the grading sandbox, /workspace holds the pristine task plus the candidate's allowed changes; the judge
writes its own directory beside it::

    /tmp/.rollbox-judge/pytest.ini          rootdir and configuration: pythonpath = /workspace, nothing else
    /tmp/.rollbox-judge/tests/...           the task's tests/ (hidden until now), canaries appended to modules
    /tmp/.rollbox-judge/plugin/...          the judge's plugin, loaded with -p; plugin autoload is off

Results come from the plugin's channel, are cross-checked against the tests the judge expects (every expected
id present and exactly ``passed``), and any passing canary, unknown or repeated report means ``tampered``.
What the tests print, and pytest's exit code, decide nothing.
"""

from __future__ import annotations

import ast
import json
from importlib import resources
from pathlib import Path
from typing import Any

from rollbox.sandbox import FreshSandboxes, SandboxSource, Status
from rollbox.tasks import PytestGrading, Task

from ._canary import add_canaries
from ._channel import GRADING_ENV, ForgedChannel, read_records
from ._report import RunnerReport
from ._verdict import GradedTest, Outcome

_FRESH = FreshSandboxes()

__all__ = ["run_pytest"]

_JUDGE = "/tmp/.rollbox-judge"
_INI = "[pytest]\npythonpath = /workspace\nxfail_strict = false\n"
_PLUGIN = "rollbox_judge_plugin"
READ_ONLY = True


def _test_modules(tests: Path) -> list[Path]:
    return sorted(p for p in tests.rglob("*.py") if p.name.startswith("test_") or p.name.endswith("_test.py"))


def _static_ids(relative: str, source: str) -> list[str]:
    """Test ids the module defines, read without running it (parametrized ids are matched by prefix)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [relative]  # pytest will report a collection error; the module's tests count as missing
    ids: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            ids.append(f"{relative}::{node.name}")
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            ids += [
                f"{relative}::{node.name}::{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test")
            ]
    return ids


def _matches(static_id: str, reported: str) -> bool:
    return reported == static_id or reported.startswith(static_id + "[")


class _Channel:
    """The plugin's records, checked as they are read: anything malformed or repeated is a forgery."""

    def __init__(self, stdout: str, *, truncated: bool) -> None:
        self.collected: list[str] | None = None
        self.outcomes: dict[str, Outcome] = {}
        self.forged: str | None = None
        try:
            records = read_records(stdout, truncated=truncated)
        except ForgedChannel as exc:
            self.forged = str(exc)
            return
        for record in records:
            self._read(record)
            if self.forged:
                return

    def _read(self, record: dict[str, Any]) -> None:
        if "collected" in record and self.collected is None and isinstance(record["collected"], list):
            self.collected = [str(i) for i in record["collected"]]
        elif "collect_error" in record:
            pass
        elif isinstance(record.get("id"), str) and record["id"] not in self.outcomes:
            try:
                self.outcomes[record["id"]] = Outcome(record.get("outcome"))
            except ValueError:
                self.forged = f"the result channel carried an unknown outcome for {record['id']!r}"
        else:
            self.forged = f"the result channel carried a forged or repeated report: {json.dumps(record)[:200]}"


async def run_pytest(task: Task, grading: PytestGrading, tree: Path, sandboxes: SandboxSource = _FRESH) -> RunnerReport:
    """Grade the candidate's tree against the task's hidden pytest tests in a fresh sandbox."""
    static: list[str] = []
    canaries: list[str] = []
    package = resources.files("rollbox.judge")
    async with sandboxes.sandbox(limits=task.limits, network=task.network) as sb:
        await sb.write_tree(tree)
        # Read-only: the candidate's code runs during collection and must not rewrite the tests still to come.
        await sb.write_tree(task.tests, f"{_JUDGE}/tests", read_only=True)
        for module in _test_modules(task.tests):
            relative = f"tests/{module.relative_to(task.tests).as_posix()}"
            source = module.read_text()
            static += _static_ids(relative, source)
            with_canaries = add_canaries(source)
            canaries += [f"{relative}::{name}" for name in with_canaries.names]
            await sb.write_file(f"{_JUDGE}/{relative}", with_canaries.source, read_only=True)
        await sb.write_file(f"{_JUDGE}/pytest.ini", _INI, read_only=True)
        plugin = package.joinpath("_pytest_plugin.py").read_bytes()
        await sb.write_file(f"{_JUDGE}/plugin/{_PLUGIN}.py", plugin, read_only=True)
        result = await sb.exec(
            [
                "python3",
                "-s",
                "-m",
                "pytest",
                "-c",
                f"{_JUDGE}/pytest.ini",
                f"--rootdir={_JUDGE}",
                "-p",
                _PLUGIN,
                "-p",
                "no:cacheprovider",
                "-q",
                f"{_JUDGE}/tests",
            ],
            env={**GRADING_ENV, "PYTHONPATH": f"{_JUDGE}/plugin", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
            cwd=_JUDGE,
        )
    if result.status is Status.INFRA_ERROR:
        expected = list(grading.fail_to_pass or static) + list(grading.pass_to_pass)
        return RunnerReport(
            tests=tuple(GradedTest(i, Outcome.MISSING) for i in expected), run_status=result.status, detail=result.error
        )
    channel = _Channel(result.stdout_text, truncated=result.stdout_truncated)
    tampered = channel.forged
    for canary in canaries:
        if any(_matches(canary, i) and o in (Outcome.PASSED, Outcome.XPASSED) for i, o in channel.outcomes.items()):
            tampered = tampered or f"the must-fail canary {canary} passed"
    real = {i: o for i, o in channel.outcomes.items() if not any(_matches(c, i) for c in canaries)}
    if grading.fail_to_pass is not None:
        expected = [*grading.fail_to_pass, *grading.pass_to_pass]
    else:
        # Every collected test, and every test the modules define even if collection never reached it.
        expected = [i for i in (channel.collected or []) if not any(_matches(c, i) for c in canaries)]
        expected += [s for s in static if not any(_matches(s, i) for i in expected)]
    tests = tuple(GradedTest(i, real.get(i, Outcome.MISSING)) for i in dict.fromkeys(expected))
    return RunnerReport(
        tests=tests,
        run_status=result.status,
        crashed=not real,
        tampered=tampered is not None,
        detail=tampered,
        fail_to_pass=tuple(grading.fail_to_pass or ()),
        cpu_s=result.cpu_s,
        peak_memory_bytes=result.peak_memory_bytes or 0,
    )
