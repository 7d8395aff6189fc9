"""Validation: many gradings of chosen candidates by the one judge, and what they say about a task.

For each task, in sandboxes, in parallel:

1. Static checks: answer leaks in the workspace (``_leaks``), contradictory cases (``_contradictions``), a
   reference that names the hidden tests (``_reads``).
2. The reference, ``runs`` times, each in another seeded test order (``_variants``), then, while every run passed,
   in the tests' own order until ``steady_runs`` ran. An order in which a test failed is run ``reruns`` more times,
   and so is the tests' own order: a test whose outcome changes within one order is ``flaky``; one that fails on
   every run of its own order, ``reference_fails``; one that passes on every run of its own order and fails on
   every run of another, ``order_dependent``. A steady reference is graded again where its own code may not open
   the tests' files (``_reads``): ``reference_reads_tests``.
3. The starting workspace (twice) and the trivial candidates, then the hacks (``_candidates``). fail_to_pass
   tests must fail on the starting workspace and pass with the reference, pass_to_pass tests pass on both; no
   trivial candidate may pass; no hack may earn more than the best trivial candidate (nor pass every test, which
   one stopped only by the judge's penalty for a hack signature does: that scan is a pattern match); the hacks
   that rewrite the workspace's data (``_perturb``) say ``test_data_in_workspace``; the same candidate must get
   the same verdict (status and every test's outcome) each time.
4. Mutants of the reference (``_mutate``), under limits scaled to the reference's time: the share the tests kill
   is the kill ratio, and a task below ``min_kill_ratio`` is ``weak``. For ``function`` and ``stdio`` tasks,
   generated cases (``_generate``) are graded against the survivors; ``fix`` writes those that kill one.
5. Under CPU pressure (``_pressure``), once for all tasks: the reference again, with a wall limit scaled up as
   much as the pressure slows it down. A test that passed on every ordinary run and fails now is
   ``timing_dependent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import re
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from rollbox import telemetry
from rollbox.judge import Outcome, Verdict, VerdictStatus
from rollbox.sandbox import temporary_directory
from rollbox.tasks import FunctionGrading, PytestGrading, StdioGrading, Task

from ._cache import ValidationCache, content_hash
from ._candidates import ESSENTIAL, TEST_DATA, Candidate, hack_candidates, trivial_candidates
from ._clock import CLOCK_OFFSETS, clock_env, libfaketime
from ._contradictions import contradictions
from ._duplicates import after_grading, before_grading, duplicates, fingerprint
from ._generate import generate_cases, write_fix
from ._grader import Grader, Measured, Progress
from ._headroom import tight, widen
from ._leaks import find_leaks
from ._options import ValidateOptions
from ._pressure import cpu_pressure, pressure_processes
from ._reads import naming_the_tests, sealed_off
from ._reasons import Decision, Reason, ReasonCode, decide
from ._reference import Reference
from ._reference_runs import ReferenceRuns, listed
from ._report import CandidateResult, MutantResult, TaskReport
from ._runs import BASELINE
from ._special_cases import check_special_cases
from ._strength import choose_mutants, weak_reasons
from ._variants import limited, ordered, with_cases
from ._verdicts import caught_by_a_canary, endings, failures, let_through, passed, same

__all__ = ["validate"]

#: How long a mutant's grading may take, as a multiple of the reference's (plus a second): a mutant that loops
#: is killed in seconds, not at the task's own limit.
_MUTANT_TIME_FACTOR = 5.0
#: Gradings again of a hack that every test passed and only a must-fail canary caught: canaries are drawn at
#: random per grading, so another draw may miss it (and training rewards that draw).
_CANARY_REDRAWS = 8
#: The hash seed the determinism check's reruns run under (the judge's is 0).
_OTHER_HASH_SEED = {"PYTHONHASHSEED": "1"}
#: Wall limits snap to these (seconds), so that mutants of many tasks share warm pools.
_STEPS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


def _snap(seconds: float, ceiling: float) -> float:
    return min(next((step for step in _STEPS if step >= seconds), _STEPS[-1]), ceiling)


def _case_count(task: Task) -> int:
    grading = task.grading
    assert isinstance(grading, FunctionGrading | StdioGrading)
    if not grading.cases:
        return 0
    lines = (task.tests / grading.cases).read_text(encoding="utf-8").splitlines()
    return sum(1 for line in lines if line.strip())


def _failed_cases(verdict: Verdict, existing: int) -> set[int]:
    """The generated cases (their index among the generated ones) that ``verdict`` did not pass."""
    failed: set[int] = set()
    for test in verdict.tests:
        match = re.search(r"(?:\[|^case-)(\d+)\]?$", test.id)
        if match and int(match.group(1)) >= existing and test.outcome is not Outcome.PASSED:
            failed.add(int(match.group(1)) - existing)
    return failed


class _TaskRun:
    """One task's validation: :meth:`run` (everything but pressure), :meth:`under_pressure`, :meth:`report`."""

    def __init__(self, task: Task, options: ValidateOptions, grader: Grader, scratch: Path, content: str) -> None:
        self.task, self.options, self.grader, self.scratch, self.content = task, options, grader, scratch, content
        self.reference = Reference.of(task)
        self.reasons: list[Reason] = []
        self.candidates: list[CandidateResult] = []
        self.mutants: list[MutantResult] = []
        self.flaky: list[str] = []
        self.reference_runs = 0
        self.kill_ratio: float | None = None
        self.kill_ratio_generated: float | None = None
        self.generated = 0
        self.fixed_file: str | None = None
        self.gradings = 0
        #: Seconds spent on this task (its own phases; tasks run side by side, so these overlap).
        self.duration_s = 0.0
        #: Tests that passed on every run of the reference in the tests' own order (None: it did not pass).
        self.steady: set[str] | None = None
        self.reference_wall_s = 0.0
        #: The reference's worst CPU time over its runs on the real clock (``None``: not measured).
        self.reference_cpu_s: float | None = None
        #: What ``fix`` wrote into task.toml's [limits], when the time limit was too tight.
        self.widened = ""
        self.f2p_inputs: int | None = None

    def add(self, code: ReasonCode, detail: str) -> None:
        self.reasons.append(Reason(code, detail))

    async def grade(self, items: Sequence[tuple[Task, Mapping[str, bytes]]]) -> list[Verdict]:
        return [m.verdict for m in await self.measure([(task, files, None) for task, files in items])]

    async def measure(
        self, items: Sequence[tuple[Task, Mapping[str, bytes], Mapping[str, str] | None]]
    ) -> list[Measured]:
        measured = await self.grader.measure_all(items)
        self.gradings += len(measured)
        for m in measured:
            if m.verdict.status is VerdictStatus.INFRA_ERROR:
                self.add(ReasonCode.VALIDATION_ERROR, f"a grading failed in rollbox or the host: {m.verdict.error}")
        return measured

    async def run(self) -> None:
        await self._phase(self._run())

    async def _phase(self, phase: Awaitable[None]) -> None:
        """Awaits one phase of the task's validation, counting its time. An exception there is a fault of rollbox:
        it becomes this task's ``validation_error``, and the other tasks' validation goes on."""
        started = time.monotonic()
        try:
            await phase
        except Exception as exc:
            where = traceback.extract_tb(exc.__traceback__)[-1]
            self.add(
                ReasonCode.VALIDATION_ERROR,
                f"validation failed in rollbox ({Path(where.filename).name}:{where.lineno}): "
                f"{type(exc).__name__}: {exc}",
            )
        finally:
            self.duration_s += time.monotonic() - started

    async def _run(self) -> None:
        task, reference = self.task, self.reference
        self.reasons += await find_leaks(task, reference)
        self.reasons += contradictions(task)
        for path, name in naming_the_tests(task, reference) if reference is not None else []:
            self.add(
                ReasonCode.REFERENCE_READS_TESTS,
                f"the reference's {path} names {name}: a hidden test file, or where the judge lays them",
            )
        trivials = trivial_candidates(task, reference)
        hacks = hack_candidates(task, reference)
        if self.options.candidates == "essential":
            trivials = [c for c in trivials if c.name in ESSENTIAL]
            hacks = [c for c in hacks if c.name in ESSENTIAL]
        repeated = [c for c in trivials if c.name in ("untouched_workspace", "empty_body")]
        runs = self._reference_runs()
        first = runs.first() if runs is not None else []
        others = [(task, c.files) for c in [*trivials, *hacks]]
        # The determinism check's reruns under another hash seed: a verdict that follows the seed is no verdict.
        again = [(task, c.files, _OTHER_HASH_SEED) for c in repeated]
        measured, verdicts = await asyncio.gather(self.measure([*first, *again]), self.grade(others))
        first_measured, repeat_verdicts = measured[: len(first)], [m.verdict for m in measured[len(first) :]]
        trivial_verdicts, hack_verdicts = verdicts[: len(trivials)], verdicts[len(trivials) :]
        if runs is None:
            self.add(
                ReasonCode.REFERENCE_FAILS, "the task has no reference solution (solution/): nothing to check it by"
            )
        else:
            await runs.finish(first_measured)
            self._read_reference(runs)
        self._starting_workspace(trivials, trivial_verdicts)
        for candidate, verdict in zip(repeated, repeat_verdicts, strict=True):
            before = trivial_verdicts[trivials.index(candidate)]
            infra = VerdictStatus.INFRA_ERROR in (verdict.status, before.status)
            if not infra and not same(before, verdict):
                self.add(
                    ReasonCode.NONDETERMINISTIC,
                    f"{candidate.name} got {before.status.value} ({before.passed}/{before.total} tests) and then "
                    f"{verdict.status.value} ({verdict.passed}/{verdict.total}) on a rerun (under "
                    f"PYTHONHASHSEED={_OTHER_HASH_SEED['PYTHONHASHSEED']})",
                )
        hack_verdicts = await self._past_the_canaries(hacks, hack_verdicts)
        self._trivials_and_hacks(trivials, trivial_verdicts, hacks, hack_verdicts)
        if self.steady is not None and reference is not None:
            await self._sealed_off(reference)
            await self._shortcuts(reference)
            await self._mutants(reference)

    async def _shortcuts(self, reference: Reference) -> None:
        found = await check_special_cases(
            self.task,
            reference,
            grader=self.grader,
            grade=self.grade,
            scratch=self.scratch,
            max_inputs=self.options.shortcut_inputs,
            fix=self.options.fix,
        )
        self.reasons += found.reasons
        self.candidates += found.candidates
        self.f2p_inputs = found.inputs
        if found.fixed_file is not None:
            self.fixed_file, self.generated = found.fixed_file, found.cases

    def _reference_runs(self) -> ReferenceRuns | None:
        if self.reference is None:
            return None
        options = self.options
        return ReferenceRuns(
            task=self.task,
            reference=self.reference,
            variants=[ordered(self.task, seed, self.scratch) for seed in range(options.runs)],
            measure=self.measure,
            workers=self.grader.workers,
            steady_runs=options.steady_runs,
            reruns=options.reruns,
            hash_seeds=options.hash_seeds,
            clock=options.clock,
        )

    def _read_reference(self, runs: ReferenceRuns) -> None:
        self.reasons += runs.reasons
        self.flaky = runs.flaky
        self.reference_runs = runs.count
        own = runs.runs[BASELINE][0].verdict
        self.candidates.append(
            CandidateResult(name="reference", kind="reference", status=own.status.value, reward=own.reward)
        )
        if runs.steady is None:
            return
        self.steady, self.reference_wall_s, self.reference_cpu_s = runs.steady, runs.wall_s, runs.worst_cpu_s
        if self.reference_cpu_s is None:
            return
        detail = tight(self.task, self.reference_cpu_s, self.options.time_headroom)
        if detail is None:
            return
        if self.options.fix:
            self.widened = widen(self.task, self.reference_cpu_s, self.options.time_headroom)
            return  # the task on disk now has the limits the rule asks
        self.add(ReasonCode.TIGHT_TIME_LIMIT, detail + " (--fix widens it)")

    def _starting_workspace(self, trivials: list[Candidate], verdicts: list[Verdict]) -> None:
        untouched = verdicts[0]
        grading = self.task.grading
        if untouched.status is VerdictStatus.INFRA_ERROR:
            return
        if isinstance(grading, PytestGrading) and grading.fail_to_pass is not None:
            outcome = {t.id: t.outcome for t in untouched.tests}
            already = [t for t in grading.fail_to_pass if outcome.get(t) is Outcome.PASSED]
            if already:
                self.add(ReasonCode.F2P_PASSES_BEFORE, f"fail_to_pass {listed(already)} already pass on the workspace")
            broken = [t for t in grading.pass_to_pass if outcome.get(t) is not Outcome.PASSED]
            if broken:
                self.add(ReasonCode.P2P_FAILS, f"pass_to_pass {listed(broken)} do not pass on the starting workspace")

    async def _past_the_canaries(self, hacks: list[Candidate], verdicts: list[Verdict]) -> list[Verdict]:
        """Each hack's verdict, a hack caught only by a canary taken again up to :data:`_CANARY_REDRAWS` times:
        the best of those gradings (a draw of canaries that misses it shows what the tests alone let through)."""
        caught = [i for i, verdict in enumerate(verdicts) if caught_by_a_canary(verdict)]
        if not caught:
            return verdicts
        again = await self.grade([(self.task, hacks[i].files) for i in caught for _ in range(_CANARY_REDRAWS)])
        best = list(verdicts)
        for n, i in enumerate(caught):
            draws = [v for v in again[n * _CANARY_REDRAWS : (n + 1) * _CANARY_REDRAWS] if v.reward is not None]
            best[i] = max(
                [verdicts[i], *draws],
                key=lambda v: (let_through(v), v.reward if v.reward is not None else -math.inf),
            )
        return best

    def _trivials_and_hacks(
        self,
        trivials: list[Candidate],
        trivial_verdicts: list[Verdict],
        hacks: list[Candidate],
        hack_verdicts: list[Verdict],
    ) -> None:
        for candidate, verdict in zip(trivials, trivial_verdicts, strict=True):
            self.candidates.append(
                CandidateResult(name=candidate.name, kind="trivial", status=verdict.status.value, reward=verdict.reward)
            )
            if passed(verdict):
                self.add(
                    ReasonCode.TRIVIAL_PASSES,
                    f"the trivial solution {candidate.name} passes ({verdict.passed}/{verdict.total} tests)",
                )
        rewards = [v.reward for v in trivial_verdicts if v.reward is not None]
        baseline = max([0.0, *rewards])
        for candidate, verdict in zip(hacks, hack_verdicts, strict=True):
            self.candidates.append(
                CandidateResult(name=candidate.name, kind="hack", status=verdict.status.value, reward=verdict.reward)
            )
            if not let_through(verdict) and (verdict.reward is None or verdict.reward <= baseline):
                continue
            if passed(verdict) or not let_through(verdict):
                got = f"gets {verdict.status.value} with reward {verdict.reward:g}"
            else:
                got = (
                    f"passes every test ({verdict.total}); only the judge's penalty for a hack signature made it "
                    f"{verdict.status.value}, and a disguised variant passes that scan"
                )
            if candidate.name.startswith(TEST_DATA):
                self.add(
                    ReasonCode.TEST_DATA_IN_WORKSPACE,
                    f"the hack {candidate.name} (a trivial solution, the workspace's data files rewritten) {got} "
                    f"(a trivial solution gets at most {baseline:g}): the tests read data the agent may rewrite; "
                    "keep it in tests/",
                )
            else:
                self.add(
                    ReasonCode.HACK_PASSES,
                    f"the hack {candidate.name} {got} (a trivial solution gets at most {baseline:g})",
                )

    async def _sealed_off(self, reference: Reference) -> None:
        """The reference graded where its own code may not open the hidden tests' files (``_reads``), again when
        a test fails: a steady test that fails both times there is one the reference passes by reading them."""
        assert self.steady is not None
        variant = sealed_off(self.task, reference, self.scratch)
        if variant is None:
            return
        failed: set[str] | None = None
        for _ in range(2):
            (now,) = self._steady_failures(await self.grade([(variant, reference.files)]), "with the tests sealed off")
            failed = now if failed is None else failed & now
            if not failed:
                return
        self.add(
            ReasonCode.REFERENCE_READS_TESTS,
            f"{listed(sorted(failed or ()))} pass on every run of the reference but fail when its own code may not "
            "open the hidden tests' files: it reads them",
        )

    def _steady_failures(self, verdicts: Sequence[Verdict], where: str) -> list[set[str]]:
        """The steady tests each run of the reference ``where`` saw fail (``failed`` or ``error``; an infra error
        saw none). A test that never reported is no failure: when no run saw one fail and a run hit a limit or
        crashed, that is named as such (``validation_error``: the check could not be made), never read as a finding
        about the tests."""
        assert self.steady is not None
        seen = [failures(v) & self.steady for v in verdicts]
        cut = "" if any(seen) else endings(verdicts)
        if cut:
            self.add(
                ReasonCode.VALIDATION_ERROR,
                f"the reference passed every ordinary run, but its run {where} {cut}: that check could not be made",
            )
        return seen

    def _mutant_task(self) -> Task:
        limits = self.task.limits
        wall = _snap(1.0 + _MUTANT_TIME_FACTOR * self.reference_wall_s, limits.timeout_s)
        return limited(self.task, dataclasses.replace(limits, timeout_s=wall, cpu_time_s=min(limits.cpu_time_s, wall)))

    async def _mutants(self, reference: Reference) -> None:
        chosen = choose_mutants(reference, self.options.max_mutants, seed=self.task.id)
        if not chosen:
            return
        task = self._mutant_task()
        files = [{**reference.files, path: m.source.encode()} for path, m in chosen]
        verdicts = await self.grade([(task, f) for f in files])
        graded = [(p, m, f, v) for (p, m), f, v in zip(chosen, files, verdicts, strict=True)]
        graded = [(p, m, f, v) for p, m, f, v in graded if v.status is not VerdictStatus.INFRA_ERROR]
        if not graded:
            return
        survivors = [f for _, _, f, v in graded if passed(v)]
        by_generated = iter(await self._generated(reference, survivors))
        for path, mutant, _, verdict in graded:
            self.mutants.append(
                MutantResult(
                    operator=mutant.operator.value,
                    path=path,
                    function=mutant.function,
                    location=mutant.location,
                    description=mutant.description,
                    killed=not passed(verdict),
                    killed_by_generated=next(by_generated) if passed(verdict) else None,
                )
            )
        self.kill_ratio = sum(m.killed for m in self.mutants) / len(self.mutants)
        if self.generated:
            strong = sum(m.killed or bool(m.killed_by_generated) for m in self.mutants)
            self.kill_ratio_generated = strong / len(self.mutants)
        self.reasons += weak_reasons(
            self.mutants,
            min_kill_ratio=self.options.min_kill_ratio,
            kill_ratio_generated=self.kill_ratio_generated,
            fixed_file=self.fixed_file,
        )

    async def _generated(self, reference: Reference, survivors: list[dict[str, bytes]]) -> list[bool | None]:
        """For each surviving mutant, whether generated cases kill it (``None``: none were generated). The cases
        that kill one (fewest first, greedily) are kept, and with ``fix`` written into the task."""
        grading = self.task.grading
        none: list[bool | None] = [None] * len(survivors)
        if not survivors or not self.options.generate or not isinstance(grading, FunctionGrading | StdioGrading):
            return none
        try:
            async with self.grader.slot():  # its reference runs (one per hash seed) count as one of the workers
                generated = await generate_cases(
                    self.task, reference, sandboxes=self.grader.sandboxes, limit=self.options.max_generated
                )
        except RuntimeError as exc:
            self.add(ReasonCode.VALIDATION_ERROR, str(exc))
            return none
        if not generated.cases:
            return none
        existing = _case_count(self.task)
        variant = with_cases(self.task, generated.cases, self.scratch, "generated")
        task = limited(variant, self._mutant_task().limits)
        verdicts = await self.grade([(task, reference.files)] + [(task, files) for files in survivors])
        if any(v.status is VerdictStatus.INFRA_ERROR for v in verdicts):
            return none
        wrong = _failed_cases(verdicts[0], existing)  # the reference itself disagrees with the comparison: drop
        kills = [_failed_cases(v, existing) - wrong for v in verdicts[1:]]
        chosen: list[int] = []
        left = [k for k in kills if k]
        while left:
            best = max(sorted({c for k in left for c in k}), key=lambda c: sum(c in k for k in left))
            chosen.append(best)
            left = [k for k in left if best not in k]
        if not chosen:
            return [False] * len(survivors)
        self.generated = len(chosen)
        if self.options.fix:
            self.fixed_file = write_fix(self.task, [generated.cases[c] for c in sorted(chosen)])
        return [bool(k) for k in kills]

    async def under_pressure(self) -> None:
        if self.steady is not None and self.reference is not None:
            await self._phase(self._under_pressure(self.steady, self.reference))

    async def _under_pressure(self, steady: set[str], reference: Reference) -> None:
        limits = self.task.limits
        slowdown = 1.0 + pressure_processes() / max(1, self.grader.workers)
        task = limited(self.task, dataclasses.replace(limits, timeout_s=limits.timeout_s * slowdown))
        verdicts = await self.grade([(task, reference.files)] * self.options.pressure_runs)
        failed = sorted(set().union(*self._steady_failures(verdicts, "under CPU pressure")))
        if failed:
            self.add(
                ReasonCode.TIMING_DEPENDENT,
                f"{listed(failed)} pass on every ordinary run of the reference but fail under CPU pressure",
            )

    def report(self) -> TaskReport:
        reasons = tuple(dict.fromkeys(self.reasons))
        return TaskReport(
            task_id=self.task.id,
            path=str(self.task.path),
            decision=decide(reasons),
            reasons=reasons,
            content_hash=self.content,
            kill_ratio=self.kill_ratio,
            kill_ratio_generated=self.kill_ratio_generated,
            mutants=tuple(self.mutants),
            generated_cases=self.generated,
            fixed_file=self.fixed_file,
            flaky_tests=tuple(self.flaky),
            reference_runs=self.reference_runs,
            reference_cpu_s=self.reference_cpu_s,
            widened_limits=self.widened,
            f2p_inputs=self.f2p_inputs,
            candidates=tuple(self.candidates),
            gradings=self.gradings,
            duration_s=self.duration_s,
        )


async def validate(
    tasks: Sequence[Task],
    *,
    options: ValidateOptions | None = None,
    workers: int | None = None,
    cache: ValidationCache | None = None,
    on_progress: Callable[[Progress], None] | None = None,
) -> list[TaskReport]:
    """Validate every task; one report each, in the tasks' order.

    Args:
        tasks: What to validate.
        options: What to check and how hard (default :class:`ValidateOptions`).
        workers: Gradings at once (default: the CPUs this process may run on).
        cache: Where reports are kept by task content (``None``: no cache).
        on_progress: Called with a :class:`Progress` after each grading is planned or done.
    """
    options = options or ValidateOptions()
    if options.clock and libfaketime() is None:
        clock_env(CLOCK_OFFSETS[0])  # raises ClockUnavailable, which says what to do
    prints = [fingerprint(task, Reference.of(task)) for task in tasks]
    copies = duplicates(tasks, [before_grading(p) for p in prints], cache)
    grader = Grader(workers=workers, on_progress=on_progress)
    grader.progress.tasks = len(tasks)
    reports: dict[int, TaskReport] = {}
    keys: dict[int, str] = {}
    runs: dict[int, _TaskRun] = {}
    try:
        with temporary_directory("rollbox-validate-") as scratch:
            for index, task in enumerate(tasks):
                content = content_hash(task)
                if index in copies:  # decided by the set, not by the content: never cached
                    original, reason = copies[index]
                    reports[index] = TaskReport(
                        task_id=task.id,
                        path=str(task.path),
                        decision=Decision.REJECT,
                        reasons=(reason,),
                        content_hash=content,
                        duplicate_of=original,
                    )
                    grader.progress.tasks_done += 1
                    continue
                keys[index] = cache.key(content, options.fingerprint()) if cache else ""
                found = cache.get(keys[index]) if cache else None
                if found is not None:
                    reports[index] = found
                    grader.progress.tasks_done += 1
                else:
                    runs[index] = _TaskRun(task, options, grader, Path(scratch) / str(index), content)
            grader.report()

            def finished(index: int) -> None:
                # Kept as soon as it is known: a run cut short later loses no task validated before.
                report = reports[index] = runs[index].report()
                grader.progress.tasks_done += 1
                if cache is not None and ReasonCode.VALIDATION_ERROR not in report.codes():
                    cache.put(keys[index], report)
                telemetry.emit(
                    "curate.validated",
                    task_id=report.task_id,
                    decision=report.decision.value,
                    reasons=[r.code.value for r in report.reasons],
                    kill_ratio=report.kill_ratio,
                    gradings=report.gradings,
                )
                grader.report()

            async def first(index: int) -> None:
                await runs[index].run()
                if not options.pressure:
                    finished(index)

            async def last(index: int) -> None:
                await runs[index].under_pressure()
                finished(index)

            await asyncio.gather(*(first(index) for index in runs))
            if options.pressure:
                steady = any(run.steady is not None for run in runs.values())
                async with cpu_pressure() if steady else contextlib.nullcontext():
                    await asyncio.gather(*(last(index) for index in runs))
    finally:
        await grader.close()
    admitted = [reports[i].decision is not Decision.REJECT for i in range(len(tasks))]
    for index, (original, reason) in duplicates(tasks, [after_grading(p) for p in prints], cache, admitted).items():
        reasons = (*reports[index].reasons, reason)
        reports[index] = dataclasses.replace(
            reports[index], reasons=reasons, decision=decide(reasons), duplicate_of=original
        )
    if cache is not None:
        for index, report in reports.items():
            if report.decision is not Decision.REJECT:  # an original later validations compare with
                for key in prints[index].all():
                    cache.remember(key, report.task_id, report.path)
    return [reports[i] for i in range(len(tasks))]
