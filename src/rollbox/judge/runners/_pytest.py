"""The ``pytest`` runner: the task's hidden tests, sealed, with canaries, run by a pytest the candidate cannot
configure.

In the grading sandbox, /workspace holds the pristine task plus the candidate's allowed changes. The hidden tests
go to one of two places::

    /tmp/.rollbox-judge/pytest.ini        (by default) rootdir and configuration: pythonpath = /workspace
    /tmp/.rollbox-judge/tests/...         the task's tests/; ids read ``tests/test_x.py::test_a``

    /workspace/...                        (tests_in_workspace) tests/ laid over the workspace at the same paths,
                                          run with /workspace as the root and its pristine configuration; ids
                                          read as the repository names them (SWE-bench's); the paths of
                                          ``removed_by_tests`` removed first

    /tmp/.rollbox-judge/plugin/...        the judge's plugin, loaded with -p; plugin autoload is off
    /tmp/.rollbox-judge/sealed/...        the test modules' code (below)

The oracle stays out of the candidate's process: every test module that runs is sealed
(``integrity._seal``: its plain expectations taken out, kept by the judge and compared after the run with the
values the tests report), must-fail canaries are added, and it is shipped as bytecode only, as every other Python
module of tests/ is (sealed too, but a conftest.py); the file at its path is empty, and the plugin gives that path
its module from the code, which it read before any of the candidate's code ran. So the tests' source is
nowhere in the sandbox, and neither are their plain expected values: not in a frame, a local, a constant, the
bytecode or a test id. Results come from the plugin's channel, are cross-checked against the tests the judge
expects (every expected id present and exactly ``passed``, its sealed expectations met), and any passing canary,
unknown or repeated report means ``tampered``. What the tests print, and pytest's exit code, decide nothing.

What it cannot guarantee: the tests run in the candidate's process, so what is not sealed can be read (an
expectation the test computes, an object built from the code under test, what a fixture or a helper holds), and
code written against the canaries can tell them apart and rewrite the reporting of tests that hold no sealed
expectation. The expected tests are also read from the modules themselves, so that dropping a test, or a case of
a literal ``parametrize`` list, from collection leaves it missing; a case of a computed list is known only from
collection.
"""

from __future__ import annotations

import ast
import errno
import json
import re
import warnings
from dataclasses import dataclass

from rollbox.judge._verdict import GradedTest, Outcome
from rollbox.judge.integrity._canary import add_canaries
from rollbox.judge.integrity._collection import collected_classes
from rollbox.judge.integrity._seal import SealedModule, seal_module
from rollbox.sandbox import ExecResult, FreshSandboxes, Sandbox, SandboxSource, Status
from rollbox.tasks import PytestGrading, Task

from ._drivers import compiled, install_driver, sandbox_python
from ._probe import grading_env
from ._pytest_results import PytestRun, Sealed
from ._report import RunnerReport
from ._tree import GradingTree, candidates_room

_FRESH = FreshSandboxes()

__all__ = ["run_pytest"]

_JUDGE = "/tmp/.rollbox-judge"
_INI = "[pytest]\npythonpath = /workspace\nxfail_strict = false\n"
_PLUGIN = "rollbox_judge_plugin"


@dataclass(frozen=True)
class _Layout:
    """Where the hidden tests go and how pytest runs them."""

    #: Where tests/ is laid (its files keep their paths below it), and pytest's root.
    root: str
    #: What a file of tests/ is named in test ids: ``tests/`` + its path, or its path alone.
    prefix: str
    options: tuple[str, ...]

    @staticmethod
    def of(grading: PytestGrading) -> _Layout:
        if grading.tests_in_workspace:
            return _Layout(root="/workspace", prefix="", options=("--rootdir=/workspace",))
        return _Layout(
            root=f"{_JUDGE}/tests", prefix="tests/", options=("-c", f"{_JUDGE}/pytest.ini", f"--rootdir={_JUDGE}")
        )

    def path(self, relative: str) -> str:
        """Where a file of tests/ (its path there) lies in the sandbox."""
        return f"{self.root}/{relative}"


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
    for owner, methods in collected_classes(tree):
        for method in methods:
            if method.name.startswith("test"):
                ids[f"{relative}::{owner.name}::{method.name}"] = _cases(method)
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


def _uncollected_cases(modules: list[_Module], static: dict[str, int], collected: set[str]) -> list[str]:
    """Each case of a sealed parametrize list of a test the modules define (``static``) whose opaque id is in no
    collected test's id (``collected``: those found there): a candidate that made one case stand for the others
    keeps their count, not their ids."""
    return [
        f"{module.relative}::{test}[{module.sealed.ids[case]}]"
        for module in modules
        for test, cases in module.sealed.case_ids.items()
        if f"{module.relative}::{test}" in static
        for case in cases
        if case not in collected
    ]


def _matches(static_id: str, reported: str) -> bool:
    """Whether ``reported`` is the test ``static_id`` names, a parametrized case of it, or a test within it."""
    return reported == static_id or reported.startswith((static_id + "[", static_id + "::"))


#: Imports pytest as the run does, but isolated (-I): nothing the candidate left in /workspace or /tmp, nor a
#: variable, can make it fail, so its failure is the task's (its image or runtime has no pytest), not the candidate's.
_PROBE = ["python3", "-I", "-c", "import pytest"]


async def _without_pytest(sb: Sandbox, result: ExecResult) -> ExecResult:
    """``result`` of a run that reported no test at all, or ``infra_error`` saying what to do when that is because
    the sandbox's python3 has no pytest (an image without it): a task that cannot be graded is never the
    candidate's failure."""
    probe = await sb.exec(_PROBE, cwd="/", env=grading_env())
    if probe.ok or probe.status is not Status.NONZERO_EXIT:
        return result
    said = probe.stderr_text.strip().splitlines()
    why = said[-1] if said else f"exit status {probe.exit_code}"
    return ExecResult.infra_error(
        f"the pytest runner cannot run here: 'python3 -c \"import pytest\"' fails ({why}): add pytest to the "
        'task\'s image (Debian: python3-pytest) or to its runtime (requirements = ["pytest"])'
    )


def _run_files(task: Task, grading: PytestGrading, layout: _Layout) -> list[str]:
    """The files pytest runs, as test ids name them: the task's test modules, or, for repository tests graded by
    id, the files the ids name (some of which may be the workspace's own)."""
    modules = [f"{layout.prefix}{p.relative_to(task.tests).as_posix()}" for p in task.test_modules]
    if grading.tests_in_workspace and grading.fail_to_pass is not None:
        named = [i.partition("::")[0] for i in (*grading.fail_to_pass, *grading.pass_to_pass)]
        return list(dict.fromkeys(named))
    return modules


@dataclass(frozen=True)
class _Module:
    """One hidden test module as this grading runs it: sealed, with canaries."""

    relative: str  # its path in test ids
    sealed: SealedModule
    source: str  # the sealed module with its canaries
    canaries: tuple[str, ...]


def _prepare(task: Task, layout: _Layout, files: list[str]) -> list[_Module]:
    """Every Python module of tests/, as the sandbox gets it: sealed (once per process; a test module that runs with
    canaries, drawn for each grading), but a conftest.py as it is (pytest loads it before any test; its fixtures
    are no expectations of a test). A module that does not parse is left out: it is shipped as it is, and pytest
    reports the error."""
    running = {relative.removeprefix(layout.prefix) for relative in files}
    sources = {p: p.read_text() for p in sorted(task.tests.rglob("*.py")) if p.is_file()}
    words = {p: frozenset(re.findall(r"\w+", text)) for p, text in sources.items()}
    modules: list[_Module] = []
    for path, source in sources.items():
        inside = path.relative_to(task.tests).as_posix()
        # A constant another module of tests/ may import stays where it is.
        keep = frozenset().union(*(w for p, w in words.items() if p != path))
        try:
            sealed = (
                seal_module(source, keep=keep) if path.name != "conftest.py" else SealedModule(source, {}, {}, {}, {})
            )
        except SyntaxError:
            continue
        if inside in running:
            with_canaries = add_canaries(sealed.source)
            modules.append(_Module(layout.prefix + inside, sealed, with_canaries.source, with_canaries.names))
        else:
            modules.append(_Module(layout.prefix + inside, sealed, sealed.source, ()))
    return modules


#: Why removing a path of ``removed_by_tests`` can fail that leaves nothing to remove: it is gone, a parent is no
#: longer a directory, or a parent is a link (the candidate's: the pristine file is not there either).
_ALREADY_GONE = (errno.ENOENT, errno.ENOTDIR, errno.ELOOP)


async def _remove_what_tests_delete(sb: Sandbox, grading: PytestGrading) -> None:
    """Remove from /workspace what the tests delete (``removed_by_tests``), whatever the candidate made of it.

    Raises:
        OSError: a removal failed for another reason than the path's being gone.
    """
    for path in grading.removed_by_tests:
        try:
            await sb.remove(path)
        except OSError as exc:
            if exc.errno not in _ALREADY_GONE:
                raise


async def _install(sb: Sandbox, task: Task, layout: _Layout, modules: list[_Module]) -> None:
    """The hidden tests (each Python module an empty file, its code apart: the plugin holds it all before any of
    the candidate's code runs, so a directory the candidate renames and replaces changes no module), the plugin and
    the configuration."""
    # Read-only: the candidate's code runs during collection and must not rewrite the tests still to come.
    await sb.write_tree(task.tests, layout.root if layout.prefix else ".", read_only=True)
    manifest: dict[str, str] = {}
    python = sandbox_python(sb)
    for index, module in enumerate(modules):
        stub = layout.path(module.relative.removeprefix(layout.prefix))
        with warnings.catch_warnings():  # what the tests' source warns about when compiled is theirs to show
            warnings.simplefilter("ignore")
            code = compiled(module.source, stub, python)
        await sb.write_file(stub, b"", read_only=True)
        await sb.write_file(f"{_JUDGE}/sealed/{index}.pyc", code, read_only=True)
        manifest[stub] = f"{index}.pyc"
    await sb.write_file(f"{_JUDGE}/sealed/sealed.json", json.dumps(manifest), read_only=True)
    await install_driver(sb, f"{_JUDGE}/plugin", "_pytest_plugin.py", name=f"{_PLUGIN}.pyc")
    if layout.prefix:
        await sb.write_file(f"{_JUDGE}/pytest.ini", _INI, read_only=True)


async def run_pytest(
    task: Task, grading: PytestGrading, tree: GradingTree, sandboxes: SandboxSource = _FRESH
) -> RunnerReport:
    """Grade the candidate's tree against the task's hidden pytest tests in a fresh sandbox."""
    layout = _Layout.of(grading)
    files = _run_files(task, grading, layout)
    static: dict[str, int] = {}
    with warnings.catch_warnings():  # what the tests' source warns about when compiled is theirs to show, not ours
        warnings.simplefilter("ignore")
        modules = _prepare(task, layout, files)
        for relative in files:
            path = task.tests / relative.removeprefix(layout.prefix)
            if path.is_file() and path.suffix == ".py":
                static.update(_static_ids(relative, path.read_text()))
    sealed = Sealed({m.relative: m.sealed for m in modules})
    canaries = [f"{m.relative}::{name}" for m in modules for name in m.canaries]
    # What holds a canary (a canary class may hold inherited tests too): none of it is a real test.
    judges = [f"{m.relative}::{name.split('::')[0]}" for m in modules for name in m.canaries]
    async with tree.sandbox(sandboxes, limits=task.limits, network=task.network) as sb:
        await tree.lay(sb)
        await _remove_what_tests_delete(sb, grading)
        with candidates_room(sb):  # the tests go over the tree (to replace what it has at their paths), in its room
            await _install(sb, task, layout, modules)
        result = await sb.exec(
            [
                "python3",
                "-s",
                "-m",
                "pytest",
                *layout.options,
                "-p",
                _PLUGIN,
                "-p",
                "no:cacheprovider",
                "-q",
                *(layout.path(f.removeprefix(layout.prefix)) for f in files),
            ],
            # The seals' receipts, read by the plugin before any of the candidate's code runs: in no file.
            stdin=json.dumps({seal: r for m in modules for seal, r in m.sealed.receipts.items()}),
            env=grading_env(
                {
                    "PYTHONPATH": f"{_JUDGE}/plugin",
                    "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
                    "ROLLBOX_SEALED": f"{_JUDGE}/sealed",
                }
            ),
            cwd=_JUDGE if layout.prefix else "/workspace",
        )
        run = PytestRun.read(result.stdout_text, truncated=result.stdout_truncated, sealed=sealed)
        if result.status is not Status.INFRA_ERROR and not run.outcomes:
            result = await _without_pytest(sb, result)
    if result.status is Status.INFRA_ERROR:
        expected = list(grading.fail_to_pass or static) + list(grading.pass_to_pass)
        return RunnerReport(
            tests=tuple(GradedTest(i, Outcome.MISSING) for i in expected), run_status=result.status, detail=result.error
        )
    tampered = run.forged
    for canary in canaries:
        if any(_matches(canary, i) and o in (Outcome.PASSED, Outcome.XPASSED) for i, o in run.outcomes.items()):
            tampered = tampered or f"the must-fail canary {canary} passed"
    real = [i for i in run.outcomes if not any(_matches(j, i) for j in judges)]
    if grading.fail_to_pass is not None:
        expected = [*grading.fail_to_pass, *grading.pass_to_pass]
    else:
        expected = _expected([i for i in run.collected or [] if not any(_matches(j, i) for j in judges)], static)
        expected += _uncollected_cases(modules, static, run.cases_collected)
    tests = tuple(
        GradedTest(i, run.outcome(i, sealed) if i in real else Outcome.MISSING) for i in dict.fromkeys(expected)
    )
    # The test the run was in when it ended: it started, and its outcome never came.
    running = sealed.real_id(run.running) if run.running is not None else None
    return RunnerReport(
        tests=tests,
        run_status=result.status,
        crashed=not real,
        running=running if running in expected else None,
        tampered=tampered is not None,
        detail=tampered,
        fail_to_pass=tuple(grading.fail_to_pass or ()),
        cpu_s=result.cpu_s,
        peak_memory_bytes=result.peak_memory_bytes or 0,
        flags=run.flags(),
    )
