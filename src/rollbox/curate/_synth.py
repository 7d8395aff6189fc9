"""Synthesis: bug-fix tasks from real Python packages.

For each package: fetch its sdist (which ships its tests) on the host, build its runtime layer (its requirements
and pytest, then every package of it pinned as the tasks' ``[environment]``: see
:func:`~rollbox.curate._package.package_environment`), and run its tests in sandboxes, twice, through the judge:
the tests that pass both times are the package's steady tests. Then inject bugs with the mutation operators
(``_mutate``) and grade each mutant the same way: a bug is kept when at least one steady test fails (its
fail_to_pass tests) while the others pass (its pass_to_pass tests), no more than ``max_failing_share`` of them
fail, the run ended by itself with every test reported (pytest's own exit on failures: no limit, no signal, no exit
in the code under test, no crash at import), and a second grading, which must end the same way, gives the same
failures. Only tests a run saw fail are fail_to_pass: one that never reported is no evidence that it catches the bug.
Bugs whose failures span several distinct tests or inputs are preferred (``_evidence``): one whose failing tests
are fewer than ``min_evidence`` and give fewer distinct inputs (one parametrised case,
``test_pluralize_singular[cow-kine]``) is set aside, since a patch that special-cases those inputs passes it; the
others are written broadest first.

Each bug not set aside becomes a native ``pytest`` task: the package without its tests, with the bug, as the
workspace; the tests hidden in tests/; the original module as the reference; and an instruction that names the
failing tests and what they report (pytest's own summary of each failure, run in a sandbox), never the change.
Every task is then validated (``validate``), and only those admitted are kept.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rollbox.judge import Outcome, Verdict, VerdictStatus, task_sandboxes
from rollbox.sandbox import SandboxConfig, Status, temporary_directory
from rollbox.tasks import Environment, PytestGrading, Task, load_task

from ._evidence import Evidence, measure_evidence, prefer_broad
from ._grader import Grader, Progress
from ._mutate import Mutant, Operator, mutants, sample_mutants
from ._options import ValidateOptions
from ._package import Layout, package_environment, read_layout, split_tree
from ._pypi import SynthError, fetch_sdist, unpack_sdist
from ._reasons import Decision, ReasonCode
from ._reference import is_test_file
from ._report import TaskReport
from ._toml import toml_list
from ._validate import validate

__all__ = ["PackageYield", "SynthOptions", "SynthReport", "synthesize"]

_STEPS = (10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
_RUN_DIR = "/tmp/.rollbox-synth"


def _default_validation() -> ValidateOptions:
    # fix: a task a special-case patch passes gets differential tests when some tell the fix from the bug.
    return ValidateOptions(
        runs=2, reruns=2, max_mutants=6, pressure_runs=1, generate=False, candidates="essential", fix=True
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class SynthOptions:
    """How synthesis looks for bugs, and how it checks the tasks it makes."""

    #: Mutants graded per package at most (drawn evenly across operators).
    max_mutants: int = 200
    #: A bug that fails more than this share of the steady tests breaks too much to describe: left out.
    max_failing_share: float = 0.5
    #: A bug whose failing tests (each parametrised case one) are fewer than this, and give its module fewer
    #: distinct inputs, is set aside: a special-case patch answering those inputs would pass it. Three: inflection's
    #: ``test_pluralize_singular[cow-kine]`` alone gives two (``pluralize('cow')``, ``pluralize('kine')``).
    min_evidence: int = 3
    #: Whether to validate the tasks (only admitted ones are kept), and how.
    validate: bool = True
    validation: ValidateOptions = dataclasses.field(default_factory=_default_validation)


@dataclasses.dataclass
class PackageYield:
    """What synthesis made of one package."""

    name: str
    version: str = ""
    steady_tests: int = 0
    #: Per operator: mutants graded, bugs kept (fail_to_pass, repeatable), tasks admitted by validation.
    graded: Counter[str] = dataclasses.field(default_factory=Counter)
    kept: Counter[str] = dataclasses.field(default_factory=Counter)
    admitted: Counter[str] = dataclasses.field(default_factory=Counter)
    #: Per operator: repeatable bugs set aside, their evidence narrower than ``min_evidence`` (or never recorded:
    #: the recording run died or a limit cut it short).
    narrow: Counter[str] = dataclasses.field(default_factory=Counter)
    #: Each task written: name -> its bug's evidence (distinct failing tests, and the inputs they give).
    evidence: dict[str, Evidence] = dataclasses.field(default_factory=dict)
    #: Why validation turned tasks away (reason code -> tasks).
    rejected: Counter[str] = dataclasses.field(default_factory=Counter)
    #: The tasks validation turned away (their directories are removed): name -> each reason's code and detail.
    rejected_tasks: dict[str, list[dict[str, str]]] = dataclasses.field(default_factory=dict)
    #: Tasks removed as duplicates of another (the same bug written another way, or the same task again).
    duplicates: int = 0
    #: Tasks a special-case patch passed: removed, or (``strengthened``) admitted with differential tests.
    shortcut_passable: int = 0
    strengthened: int = 0
    #: Tasks removed only because a special-case patch passed them (what the check alone takes away).
    shortcut_only: int = 0
    #: Seconds to fetch, build and screen the package (wall), and its tasks' validation (summed over tasks, which
    #: are validated side by side).
    screen_s: float = 0.0
    validation_task_s: float = 0.0
    #: Why the package gave nothing (it could not be fetched, built or tested).
    error: str | None = None

    def tally(self, report: TaskReport) -> None:
        """Count one task's validation."""
        self.validation_task_s += report.duration_s
        shortcut = any(c.kind == "shortcut" and c.status == "passed" for c in report.candidates)
        self.shortcut_passable += shortcut
        codes = report.codes()
        if report.decision is Decision.ADMIT:
            self.strengthened += shortcut and report.fixed_file is not None
            return
        self.rejected.update({c.value for c in codes})
        self.duplicates += ReasonCode.DUPLICATE in codes
        self.shortcut_only += codes == {ReasonCode.SHORTCUT_PASSES}

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "name": self.name,
            "version": self.version,
            "steady_tests": self.steady_tests,
            "graded": dict(self.graded),
            "kept": dict(self.kept),
            "admitted": dict(self.admitted),
            "narrow": dict(self.narrow),
            "evidence": {name: e.to_json() for name, e in self.evidence.items()},
            "rejected": dict(self.rejected),
            "rejected_tasks": self.rejected_tasks,
            "duplicates": self.duplicates,
            "shortcut_passable": self.shortcut_passable,
            "strengthened": self.strengthened,
            "shortcut_only": self.shortcut_only,
            "screen_s": round(self.screen_s, 1),
            "validation_task_s": round(self.validation_task_s, 1),
            "error": self.error,
        }


@dataclasses.dataclass
class SynthReport:
    """Every package's yield, and the task directories made."""

    packages: list[PackageYield]
    tasks: list[Path]
    #: Wall seconds of the whole run.
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "packages": [p.to_json() for p in self.packages],
            "tasks": [str(t) for t in self.tasks],
            "duration_s": round(self.duration_s, 1),
        }

    def markdown(self) -> str:
        """The yield per package and per operator, as two Markdown tables, and the reasons tasks were turned away."""
        lines = [
            "| package | steady tests | candidates | bugs kept | narrow set aside | duplicates removed "
            "| shortcut-passable removed | strengthened | tasks admitted | screening s | validation task-s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for p in self.packages:
            name = f"{p.name} {p.version}".strip()
            if p.error:
                lines.append(f"| {name} | - | - | - | - | - | - | - | - | - | {p.error} |")
                continue
            removed = p.shortcut_passable - p.strengthened
            lines.append(
                f"| {name} | {p.steady_tests} | {sum(p.graded.values())} | {sum(p.kept.values())} "
                f"| {sum(p.narrow.values())} | {p.duplicates} "
                f"| {removed} | {p.strengthened} | {sum(p.admitted.values())} | {p.screen_s:.0f} "
                f"| {p.validation_task_s:.0f} |"
            )
        total = Counter[str]()
        kept = Counter[str]()
        narrow = Counter[str]()
        admitted = Counter[str]()
        for p in self.packages:
            total.update(p.graded)
            kept.update(p.kept)
            narrow.update(p.narrow)
            admitted.update(p.admitted)
        lines += [
            f"| **all** | | {sum(total.values())} | {sum(kept.values())} "
            f"| {sum(narrow.values())} "
            f"| {sum(p.duplicates for p in self.packages)} "
            f"| {sum(p.shortcut_passable - p.strengthened for p in self.packages)} "
            f"| {sum(p.strengthened for p in self.packages)} | {sum(admitted.values())} | | |",
            "",
            "| operator | mutants graded | bugs kept | narrow set aside | tasks admitted | admitted per graded |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for operator in Operator:
            g, k, n, a = (c[operator.value] for c in (total, kept, narrow, admitted))
            share = f"{a / g:.0%}" if g else "-"
            lines.append(f"| {operator.value} | {g} | {k} | {n} | {a} | {share} |")
        rejected = Counter[str]()
        for p in self.packages:
            rejected.update(p.rejected)
        if rejected:
            lines += ["", "Turned away by validation: " + ", ".join(f"`{c}` {n}" for c, n in rejected.most_common())]
        return "\n".join(lines) + "\n"


@dataclasses.dataclass(frozen=True)
class _Bug:
    module: str
    mutant: Mutant
    failing: tuple[str, ...]
    evidence: Evidence


def _snap(seconds: float) -> float:
    return next((step for step in _STEPS if step >= seconds), _STEPS[-1])


def _failing(verdict: Verdict) -> tuple[str, ...]:
    """The tests a mutant's grading run saw fail, sorted; none unless the run ended by itself with failures.

    That is pytest exiting on its own with failing tests: the verdict ``failed``, the run ``nonzero_exit`` (pytest
    exits 1), no test started and never reported (an ``os._exit`` in the code under test also exits non-zero, in
    a test), and every test reported. A run a signal killed, a limit (time, memory, output, processes, disk) cut
    short, or an exit ended early is no finding about the tests it never reached: the bug is not kept, so no
    fail_to_pass test is one that never ran.
    """
    if (
        verdict.status is not VerdictStatus.FAILED
        or verdict.run_status is not Status.NONZERO_EXIT
        or verdict.running is not None
        or any(t.outcome is Outcome.MISSING for t in verdict.tests)
    ):
        return ()
    return tuple(sorted(t.id for t in verdict.tests if t.outcome is not Outcome.PASSED))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-").lower()


def _environment_toml(environment: Environment) -> str:
    """``[environment]`` for task.toml: the package's runtime layer, every requirement pinned."""
    return (
        f"[environment]\npython = {json.dumps(environment.python)}\n"
        f"requirements = {toml_list(environment.requirements)}\n"
    )


class _Package:
    """One package's synthesis: probe, screen, describe, write."""

    def __init__(self, spec: str, dest: Path, scratch: Path, grader: Grader, options: SynthOptions) -> None:
        self.spec, self.dest, self.scratch, self.grader, self.options = spec, dest, scratch, grader, options
        self.result = PackageYield(name=spec.partition("==")[0])
        self.tasks: list[tuple[Path, str]] = []  # (task directory, operator)

    async def run(self) -> None:
        started = time.monotonic()
        try:
            await self._run()
        finally:
            self.result.screen_s = time.monotonic() - started

    async def _run(self) -> None:
        try:
            sdist = await asyncio.to_thread(fetch_sdist, self.spec)
            self.result.name, self.result.version = sdist.name, sdist.version
            root = await asyncio.to_thread(unpack_sdist, sdist, self.scratch / "sdist")
            layout = read_layout(root)
            environment = await package_environment(layout)
            probe = await self._baseline(layout, environment)
            bugs = await self._screen(layout, probe)
            for index, bug in enumerate(bugs):
                await self._write(probe, bug, index)
        except SynthError as exc:
            self.result.error = str(exc)

    async def _baseline(self, layout: Layout, environment: Environment) -> Task:
        """The probe task (the package and its tests, no bug), and the steady tests, graded twice."""
        path = self.scratch / "probe"
        split_tree(layout, path / "workspace", path / "tests")
        (path / "task.toml").write_text(
            '[grading]\nrunner = "pytest"\n\n[limits]\ntimeout = "300s"\ncpu_time = "300s"\nmemory = "1G"\n'
            f"pids = 256\n\n{_environment_toml(environment)}"
        )
        probe = load_task(path)
        # Every module broken at import: if the tests still pass, they test another copy of the package (one
        # pytest itself imported first, say), and no bug in the workspace could ever fail them.
        broken = {m: b"raise ImportError('rollbox synth: is this copy under test?')\n" for m in layout.modules}
        first, second, third = await self.grader.grade_all([(probe, {}), (probe, {}), (probe, broken)])
        if VerdictStatus.INFRA_ERROR in (first.status, second.status):
            raise SynthError(f"its tests could not be run: {first.error or second.error}")
        passed = [{t.id for t in v.tests if t.outcome is Outcome.PASSED} for v in (first, second)]
        steady = sorted(passed[0] & passed[1])
        if not steady:
            raise SynthError(f"none of its tests passes before any change ({first.status.value})")
        if {t.id for t in third.tests if t.outcome is Outcome.PASSED} >= set(steady):
            raise SynthError(
                "its tests pass with every module of the workspace broken: they import another copy of the package "
                "(one the test runner itself uses?)"
            )
        modules = {t.split("::")[0] for t in steady}
        for module in probe.test_modules:  # modules with no steady test would only slow every grading down
            relative = f"tests/{module.relative_to(probe.tests).as_posix()}"
            if relative not in modules and is_test_file(module.name) and module.name != "conftest.py":
                module.unlink()
        self.result.steady_tests = len(steady)
        wall = max(first.duration_s, second.duration_s)
        limits = dataclasses.replace(probe.limits, timeout_s=_snap(10 + 5 * wall), cpu_time_s=_snap(10 + 5 * wall))
        grading = PytestGrading(fail_to_pass=(), pass_to_pass=tuple(steady))
        return dataclasses.replace(probe, grading=grading, limits=limits)

    async def _screen(self, layout: Layout, probe: Task) -> list[_Bug]:
        found: list[tuple[str, Mutant]] = []
        for module in layout.modules:
            source = (probe.workspace / module).read_text(encoding="utf-8", errors="replace")
            found += [(module, m) for m in mutants(source)]
        where = {id(m): module for module, m in found}
        chosen = sample_mutants([m for _, m in found], self.options.max_mutants, seed=self.spec)
        for mutant in chosen:
            self.result.graded[mutant.operator.value] += 1
        items = [(probe, {where[id(m)]: m.source.encode()}) for m in chosen]
        steady = len(probe.grading.pass_to_pass)  # type: ignore[union-attr]
        candidates: list[tuple[str, Mutant, tuple[str, ...]]] = []  # (module, mutant, failing tests)
        for mutant, verdict in zip(chosen, await self.grader.grade_all(items), strict=True):
            failing = _failing(verdict)
            if 0 < len(failing) <= self.options.max_failing_share * steady:
                candidates.append((where[id(mutant)], mutant, failing))
        again = await self.grader.grade_all([(probe, {c[0]: c[1].source.encode()}) for c in candidates])
        kept = [c for c, v in zip(candidates, again, strict=True) if _failing(v) == c[2]]
        evidence = await asyncio.gather(*(self._evidence(probe, c[0], c[2]) for c in kept))
        bugs = [_Bug(*c, e) for c, e in zip(kept, evidence, strict=True)]
        broad = prefer_broad(bugs, self.options.min_evidence)
        self.result.kept.update(b.mutant.operator.value for b in bugs)
        self.result.narrow = Counter(b.mutant.operator.value for b in bugs) - Counter(
            b.mutant.operator.value for b in broad
        )
        return broad

    async def _evidence(self, probe: Task, module: str, failing: tuple[str, ...]) -> Evidence:
        async with self.grader.slot():
            try:
                return await measure_evidence(probe, module, failing, self.grader.sandboxes)
            except RuntimeError:  # the host failed the recording: the failing tests alone are the evidence
                return Evidence(tests=len(failing), inputs=0)

    async def _messages(self, probe: Task, bug: _Bug) -> dict[str, str]:
        """pytest's one-line summary of each failing test (at most five), from a run in a sandbox."""
        shown = list(bug.failing[:5])
        sandboxes = await task_sandboxes(probe, self.grader.sandboxes)  # on the package's runtime layer
        async with sandboxes.sandbox(SandboxConfig(limits=probe.limits, network=probe.network)) as sb:
            await sb.write_tree(probe.workspace)
            await sb.write_file(bug.module, bug.mutant.source)
            await sb.write_tree(probe.tests, f"{_RUN_DIR}/tests")
            await sb.write_file(f"{_RUN_DIR}/pytest.ini", "[pytest]\npythonpath = /workspace\n")
            result = await sb.exec(
                [
                    "python3",
                    "-s",
                    "-m",
                    "pytest",
                    "-c",
                    f"{_RUN_DIR}/pytest.ini",
                    f"--rootdir={_RUN_DIR}",
                    "-p",
                    "no:cacheprovider",
                    "-q",
                    "-rfE",
                    "--tb=no",
                    "-W",
                    "ignore",
                    *shown,
                ],
                cwd=_RUN_DIR,
                # COLUMNS: pytest cuts each summary line to the terminal's width, 80 when there is none.
                env={"PYTHONHASHSEED": "0", "TZ": "UTC", "PYTHONDONTWRITEBYTECODE": "1", "COLUMNS": "400"},
            )
        messages: dict[str, str] = {}
        if result.status is Status.INFRA_ERROR:
            return messages
        for line in result.stdout_text.splitlines():
            kind, _, rest = line.partition(" ")
            if kind in ("FAILED", "ERROR"):
                test, _, message = rest.partition(" - ")
                messages[test.strip()] = message.strip()[:300]
        return messages

    async def _write(self, probe: Task, bug: _Bug, index: int) -> None:
        name = _slug(f"{self.result.name}-{self.result.version}-{index:03d}-{bug.mutant.operator.value}")
        path = self.dest / name
        if path.exists():
            shutil.rmtree(path)
        shutil.copytree(probe.workspace, path / "workspace", symlinks=False)
        shutil.copytree(probe.tests, path / "tests", symlinks=False)
        (path / "solution" / bug.module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(probe.workspace / bug.module, path / "solution" / bug.module)
        (path / "workspace" / bug.module).write_text(bug.mutant.source, encoding="utf-8")
        messages = await self._messages(probe, bug)
        steady = probe.grading.pass_to_pass  # type: ignore[union-attr]
        p2p = [t for t in steady if t not in bug.failing]
        lines = [
            f"# Fix a bug in {self.result.name} {self.result.version}",
            "",
            f"This directory holds the source of `{self.result.name}`. A bug has crept into the library, and "
            f"{len(bug.failing)} of its tests fail now:",
            "",
        ]
        for test in bug.failing[:10]:
            message = messages.get(test)
            lines.append(f"- `{test}`" + (f": {message}" if message else ""))
        if len(bug.failing) > 10:
            lines.append(f"- and {len(bug.failing) - 10} more")
        lines += [
            "",
            "The tests are right; they are not in this directory. Find the bug in the library's code and fix it, so "
            f"that these tests pass and the {len(p2p)} others that pass now still do.",
            "",
        ]
        (path / "instruction.md").write_text("\n".join(lines), encoding="utf-8")
        limits = probe.limits
        metadata = {
            "source": "rollbox tasks synth",
            "package": self.result.name,
            "version": self.result.version,
            "operator": bug.mutant.operator.value,
            "module": bug.module,
            "line": bug.mutant.line,
            "change": bug.mutant.description,
            "failing_tests": bug.evidence.tests,
        }
        if bug.evidence.inputs is not None:
            metadata["inputs"] = bug.evidence.inputs
        (path / "task.toml").write_text(
            f'id = {json.dumps(name)}\n\n[grading]\nrunner = "pytest"\nfail_to_pass = {toml_list(bug.failing)}\n'
            f'pass_to_pass = {toml_list(p2p)}\n\n[limits]\ntimeout = "{limits.timeout_s:g}s"\n'
            f'cpu_time = "{limits.cpu_time_s:g}s"\nmemory = "1G"\npids = 256\n\n'
            f"{_environment_toml(probe.environment)}\n[metadata]\n"
            + "".join(f"{k} = {json.dumps(v)}\n" for k, v in metadata.items()),
            encoding="utf-8",
        )
        self.tasks.append((path, bug.mutant.operator.value))
        self.result.evidence[name] = bug.evidence


async def synthesize(
    packages: Sequence[str],
    dest: str | Path,
    *,
    options: SynthOptions | None = None,
    workers: int | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> SynthReport:
    """Make bug-fix tasks from each package (``name`` or ``name==version``) into ``dest``; one directory a task.

    A package that cannot be used (not on the index, no sdist, missing requirements, no test passing) is reported
    in its :class:`PackageYield`'s ``error`` and gives no task; the others go on.
    """
    started = time.monotonic()
    options = options or SynthOptions()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    grader = Grader(workers=workers, on_progress=on_progress)
    grader.progress.tasks = len(packages)
    runs: list[_Package] = []
    try:
        with temporary_directory("rollbox-synth-") as scratch:
            for index, spec in enumerate(packages):
                runs.append(_Package(spec, dest, Path(scratch) / str(index), grader, options))

            async def one(run: _Package) -> None:
                await run.run()
                grader.progress.tasks_done += 1
                grader.report()

            await asyncio.gather(*(one(run) for run in runs))
    finally:
        await grader.close()
    made = [(run, path, operator) for run in runs for path, operator in run.tasks]
    if options.validate and made:
        reports = await validate(
            [load_task(path) for _, path, _ in made],
            options=options.validation,
            workers=workers,
            on_progress=on_progress,
        )
        for (run, path, operator), report in zip(made, reports, strict=True):
            run.result.tally(report)
            if report.decision is Decision.ADMIT:
                run.result.admitted[operator] += 1
            else:
                reasons = [{"code": r.code.value, "detail": r.detail} for r in report.reasons]
                run.result.rejected_tasks[path.name] = reasons
                shutil.rmtree(path)
    else:
        for run, _, operator in made:
            run.result.admitted[operator] += 1
    kept = [path for _, path, _ in made if path.exists()]
    result = SynthReport([run.result for run in runs], kept, duration_s=time.monotonic() - started)
    (dest / "synth-report.json").write_text(json.dumps(result.to_json(), indent=1) + "\n", encoding="utf-8")
    return result
