"""The ``pytest`` runner: the task's hidden tests, with canaries, run by a pytest the candidate cannot configure.

In the grading sandbox, /workspace holds the pristine task plus the candidate's allowed changes; the judge
writes its own directory beside it::

    /tmp/.rollbox-judge/pytest.ini          rootdir and configuration: pythonpath = /workspace, nothing else
    /tmp/.rollbox-judge/tests/...           the task's tests/ (hidden until now), canaries appended to modules
    /tmp/.rollbox-judge/plugin/...          the judge's plugin, loaded with -p; plugin autoload is off

Results come from the plugin's channel, are cross-checked against the tests the judge expects (every expected
id present and exactly ``passed``), and any passing canary, unknown or repeated report means ``tampered``.
What the tests print, and pytest's exit code, decide nothing.

What it cannot guarantee: the tests run in the candidate's process, so its code can read them, and can tell the
canaries from the real tests (see ``integrity._canary``). The expected tests are also read from the modules themselves,
so that dropping a test, or a case of a literal ``parametrize`` list, from collection leaves it missing; a case
of a computed list is known only from collection.
"""

from __future__ import annotations

import ast
import json
from importlib import resources
from pathlib import Path
from typing import Any

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.judge.integrity._canary import add_canaries
from rollbox.sandbox import FreshSandboxes, SandboxSource, Status
from rollbox.tasks import PytestGrading, Task

from ._channel import GRADING_ENV, ForgedChannel, read_records
from ._report import RunnerReport

_FRESH = FreshSandboxes()

__all__ = ["run_pytest"]

_JUDGE = "/tmp/.rollbox-judge"
_INI = "[pytest]\npythonpath = /workspace\nxfail_strict = false\n"
_PLUGIN = "rollbox_judge_plugin"
READ_ONLY = True


def _static_ids(relative: str, source: str) -> dict[str, int]:
    """Test ids the module defines, read without running it, each with the number of cases its literal
    ``parametrize`` lists make (parametrized ids are matched by prefix; computed lists count as one)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {relative: 1}  # pytest will report a collection error; the module's tests count as missing
    ids: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            ids[f"{relative}::{node.name}"] = _cases(node)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test"):
                    ids[f"{relative}::{node.name}::{item.name}"] = _cases(item)
    return ids


def _cases(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """How many cases the function's ``parametrize`` decorators make, as far as their value lists are literal."""
    count = 1
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func).endswith("parametrize"):
            values = decorator.args[1] if len(decorator.args) > 1 else None
            values = next((k.value for k in decorator.keywords if k.arg == "argvalues"), values)
            if isinstance(values, ast.List | ast.Tuple) and not any(isinstance(v, ast.Starred) for v in values.elts):
                count *= max(len(values.elts), 1)
    return count


def _expected(collected: list[str], static: dict[str, int]) -> list[str]:
    """Every test the run must report: those collected, and what the modules define that collection did not
    yield, a case of a literal parametrize list included (``id[k of n]``: it cannot be named before it runs). The
    candidate's code runs during collection, so collection alone cannot say what there is to run."""
    expected = list(collected)
    for static_id, cases in static.items():
        found = sum(_matches(static_id, i) for i in collected)
        if found == 0 and cases == 1:
            expected.append(static_id)
        else:
            expected += [f"{static_id}[{k} of {cases}]" for k in range(found + 1, cases + 1)]
    return expected


def _matches(static_id: str, reported: str) -> bool:
    """Whether ``reported`` is the test ``static_id`` names, a parametrized case of it, or a test within it."""
    return reported == static_id or reported.startswith((static_id + "[", static_id + "::"))


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
    static: dict[str, int] = {}
    canaries: list[str] = []  # each canary test, whose pass means tampering
    judges: list[str] = []  # what holds them (a canary class may hold inherited tests too): none is a real test
    package = resources.files("rollbox.judge.runners")
    async with sandboxes.sandbox(limits=task.limits, network=task.network) as sb:
        await sb.write_tree(tree)
        # Read-only: the candidate's code runs during collection and must not rewrite the tests still to come.
        await sb.write_tree(task.tests, f"{_JUDGE}/tests", read_only=True)
        for module in task.test_modules:
            relative = f"tests/{module.relative_to(task.tests).as_posix()}"
            source = module.read_text()
            static.update(_static_ids(relative, source))
            with_canaries = add_canaries(source)
            canaries += [f"{relative}::{name}" for name in with_canaries.names]
            judges += [f"{relative}::{name.split('::')[0]}" for name in with_canaries.names]
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
    real = {i: o for i, o in channel.outcomes.items() if not any(_matches(j, i) for j in judges)}
    if grading.fail_to_pass is not None:
        expected = [*grading.fail_to_pass, *grading.pass_to_pass]
    else:
        expected = _expected([i for i in channel.collected or [] if not any(_matches(j, i) for j in judges)], static)
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
