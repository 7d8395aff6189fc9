"""The reference's runs: in seeded orders, under other hash seeds, with the clock moved, until steady.

First, at once: ``runs`` orders (``_variants``), the clock moved each way (``_clock``; not for ``script`` tasks,
whose test.sh runs under the judge's own preloaded library) and ``hash_seeds`` other hash seeds. Then, while every
run so far passed, more in the tests' own order, under the hash seeds 1 to :data:`STEADY_SEEDS` in turn (each
once before any twice), until ``steady_runs`` ran: a test failing a share ``p`` of its runs is missed with
probability ``(1 - p) ** steady_runs`` (a run under a seed taken before is another independent run), and one that
holds only under some hash seeds is caught unless all of those seeds keep it. A condition in which a test failed
is run ``reruns`` more times, and so is the judge's own (``_runs`` reads them). The findings become reasons; the runs'
CPU time, the worst over those on the real clock, is what the time limit's headroom is measured against.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from rollbox.judge import Verdict, VerdictStatus
from rollbox.tasks import PytestGrading, ScriptGrading, Task

from ._clock import CLOCK_OFFSETS, clock_env
from ._grader import Measured
from ._reasons import Reason, ReasonCode
from ._reference import Reference
from ._runs import BASELINE, Condition, read_runs
from ._variants import Variant
from ._verdicts import cut_by_a_limit, endings, passed

__all__ = ["STEADY_SEEDS", "ReferenceRuns", "listed"]

#: The hash seeds the runs take: 1 to this (or to ``hash_seeds``, if more). Each seed's graded Python is started
#: once for every task validated together (``_grader``): a seed more costs a sandbox and a zygote, while a test
#: that depends on the order of two strings in a set keeps it under all of them with probability about ``2 ** -8``.
STEADY_SEEDS = 8

#: ``(task, files, env)``: one grading, as ``Grader.measure_all`` takes it.
Item = tuple[Task, Mapping[str, bytes], Mapping[str, str] | None]


def listed(names: Sequence[str], limit: int = 4) -> str:
    """``a, b, c, d and 3 more``."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


@dataclass
class ReferenceRuns:
    """One task's reference runs: :meth:`first` (the items to grade at once), then :meth:`finish` with them."""

    task: Task
    reference: Reference
    variants: list[Variant]
    #: Measures items (counting them as the task's gradings).
    measure: Callable[[Sequence[Item]], Awaitable[list[Measured]]]
    workers: int
    steady_runs: int
    reruns: int
    hash_seeds: int
    clock: bool
    runs: dict[Condition, list[Measured]] = field(default_factory=dict)
    #: The conditions of :meth:`first`'s items, in their order.
    planned: list[Condition] = field(default_factory=list)
    reasons: list[Reason] = field(default_factory=list)
    flaky: list[str] = field(default_factory=list)
    #: Tests that passed on every run of the judge's own condition (``None``: the reference is not steady).
    steady: set[str] | None = None
    #: The longest wall time and the worst CPU time of the passing runs on the real clock.
    wall_s: float = 0.0
    worst_cpu_s: float | None = None
    #: The hash seeds in the order the runs take them (:meth:`first`).
    _seeds: Iterator[int] = field(default_factory=lambda: iter(()))

    def _env(self, condition: Condition) -> dict[str, str] | None:
        env: dict[str, str] = {}
        if condition.hash_seed:
            env["PYTHONHASHSEED"] = str(condition.hash_seed)
        if condition.clock:
            env.update(clock_env(condition.clock))
        return env or None

    def _items(self, conditions: Sequence[Condition]) -> list[Item]:
        return [(self.variants[c.order].task, self.reference.files, self._env(c)) for c in conditions]

    def _hash_seeds(self, count: int) -> list[Condition]:
        return [Condition(hash_seed=seed) for seed in itertools.islice(self._seeds, count)]

    def _seed_order(self) -> Iterator[int]:
        """Seeds 1 to ``hash_seeds`` first; then the rest of the seeds, then all of them again and again, each
        round in an order of the task's own: every task takes the same seeds (each seed's graded Python is started
        once for all: ``_grader``), and tasks validated together take them at different times, rather than all
        queueing for one seed's sandbox."""
        last = max(self.hash_seeds, STEADY_SEEDS)
        draw = random.Random(self.task.id)
        yield from range(1, self.hash_seeds + 1)
        seeds = list(range(self.hash_seeds + 1, last + 1))
        while True:
            draw.shuffle(seeds)
            yield from seeds
            seeds = list(range(1, last + 1))

    def first(self) -> list[Item]:
        """The first runs' items: every order, the clock each way, the first hash seeds."""
        self.planned = [Condition(order=k) for k in range(len(self.variants))]
        if self.clock and not isinstance(self.task.grading, ScriptGrading):
            self.planned += [Condition(clock=offset) for offset in CLOCK_OFFSETS]
        self._seeds = self._seed_order()
        self.planned += self._hash_seeds(self.hash_seeds)
        return self._items(self.planned)

    async def finish(self, first: Sequence[Measured]) -> None:
        """Steady runs and reruns after ``first`` (the measured items of :meth:`first`), then the findings."""
        for condition, measured in zip(self.planned, first, strict=True):
            self.runs.setdefault(condition, []).append(measured)
        await self._until_steady()
        failing = [c for c, seen in self.runs.items() if not all(passed(m.verdict) for m in seen)]
        if failing and self.reruns:
            again = [c for c in sorted({*failing, BASELINE}) for _ in range(self.reruns)]
            for condition, measured in zip(again, await self.measure(self._items(again)), strict=True):
                self.runs[condition].append(measured)
        self._read()

    @property
    def count(self) -> int:
        """Runs graded."""
        return sum(len(seen) for seen in self.runs.values())

    def _all_passed(self) -> bool:
        return all(passed(m.verdict) for seen in self.runs.values() for m in seen)

    async def _until_steady(self) -> None:
        """While every run passed and fewer than ``steady_runs`` ran, more in the tests' own order under the next
        hash seeds, as many at once as there are workers (a failure ends it: the evidence is no longer ambiguous)."""
        while self.count < self.steady_runs and self._all_passed():
            batch = self._hash_seeds(min(self.workers, self.steady_runs - self.count))
            for condition, measured in zip(batch, await self.measure(self._items(batch)), strict=True):
                self.runs.setdefault(condition, []).append(measured)

    def verdicts(self, condition: Condition = BASELINE) -> list[Verdict]:
        """The condition's verdicts but infra errors."""
        return [m.verdict for m in self.runs.get(condition, []) if m.verdict.status is not VerdictStatus.INFRA_ERROR]

    def _add(self, code: ReasonCode, detail: str) -> None:
        self.reasons.append(Reason(code, detail))

    def _read(self) -> None:
        every = [m.verdict for seen in self.runs.values() for m in seen]
        cut = endings(every)
        ended = f"; the reference's run {cut}" if cut else ""
        found = read_runs({c: [m.verdict for m in seen] for c, seen in self.runs.items()}, self.variants)
        self.flaky = found.flaky
        if found.flaky:
            self._add(
                ReasonCode.FLAKY,
                f"{listed(found.flaky)} passed and failed or never reported on reruns of the reference in one order, "
                f"hash seed and clock{ended}",
            )
        own = self.verdicts()
        if found.failing or (own and not any(passed(v) for v in own) and not found.flaky):
            self._failing(own, found.failing, found.missing)
        for test, condition in found.dependent.items():
            self._dependent(test, condition)
        if own and all(passed(v) for v in own) and not found.flaky:
            if not self.reasons:
                self._unblamed()
            self.steady = {t.id for t in own[0].tests}
            timed = [m for c, seen in self.runs.items() if not c.clock for m in seen if passed(m.verdict)]
            self.wall_s = max(m.verdict.duration_s for m in timed)
            cpu = [m.cpu_s for m in timed if m.cpu_s is not None]
            self.worst_cpu_s = max(cpu) if cpu else None
        elif own and not self.reasons:
            # Some runs of its own condition passed and others did not, and no test is to blame (a run that reported
            # none, a canary): a reference that is not steady is never admitted for want of a culprit.
            statuses = ", ".join(sorted({v.status.value for v in own if not passed(v)}))
            self._add(
                ReasonCode.FLAKY,
                f"the reference passed {sum(passed(v) for v in own)} of {len(own)} runs in the tests' own order and "
                f"got {statuses} on the others{ended}",
            )

    def _unblamed(self) -> None:
        """Runs of another condition than the judge's own that died (a signal, an exit: no limit) with no test to
        blame (between tests, or a runner that cannot tell which test it was in): the reference is not steady there
        either, and a run that died is never read as no finding."""
        for condition, seen in sorted(self.runs.items()):
            verdicts = [m.verdict for m in seen if m.verdict.status is not VerdictStatus.INFRA_ERROR]
            died = [v for v in verdicts if not passed(v) and not cut_by_a_limit(v) and endings([v])]
            if not died:
                continue
            how = endings(died).rpartition(" on ")[0]
            where = condition.describe()
            if len(died) < len(verdicts):
                self._add(
                    ReasonCode.FLAKY,
                    f"the reference passed {len(verdicts) - len(died)} of {len(verdicts)} runs with {where}; its run "
                    f"{how} on the others, in no test to blame",
                )
            else:
                self._dependent(None, condition, died=f"{how}, in no test to blame,")
            return

    def _failing(self, own: list[Verdict], failing: list[str], missing: list[str]) -> None:
        status = own[0].status.value if own else "infra_error"
        shown = f"fails {listed(failing)}" if failing else f"gets {status}"
        detail = (
            (own[0].error or next((f["detail"] for f in own[0].flags if f["code"] == "tampered"), "")) if own else ""
        )
        never = f"; {listed(missing)} never ran (the run ended first)" if missing else ""
        self._add(
            ReasonCode.REFERENCE_FAILS,
            f"the reference {shown} on every run in the tests' own order ({status}){never}"
            + (f": {detail}" if detail else ""),
        )
        grading = self.task.grading
        if isinstance(grading, PytestGrading) and grading.fail_to_pass is not None:
            p2p = [t for t in failing if t in grading.pass_to_pass]
            if p2p:
                self._add(ReasonCode.P2P_FAILS, f"pass_to_pass {listed(p2p)} fail with the reference")

    def _dependent(self, test: str | None, condition: Condition, died: str = "") -> None:
        """``test`` passes on every run of the judge's own condition and fails on every run of ``condition``; or, with
        no test to blame, every run of ``condition`` ``died`` (how, in words)."""
        where = condition.describe()
        if condition.clock:
            code, holds, why = ReasonCode.DATE_DEPENDENT, "today", f"with {where}: a time bomb (it depends on the date)"
        elif condition.hash_seed:
            code, holds = ReasonCode.HASH_SEED_DEPENDENT, "under the judge's hash seed"
            why = (
                f"under {where}: it depends on the iteration order of a set or dict of strings, which a correct "
                "solution need not keep"
            )
        else:
            code, holds, why = ReasonCode.ORDER_DEPENDENT, "in the tests' own order", f"in {where}"
        what = f"{test} passes {holds} but fails" if test else f"the reference passes {holds} but its run {died}"
        self._add(code, f"{what} on every run {why}")
