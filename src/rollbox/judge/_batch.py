"""Grading many candidates in one call: shared warm sandboxes, ``workers`` gradings at a time, each verdict
streamed back as it is done.

    items = [(task, {"solution.py": completion}) for completion in group]
    async for index, verdict in grade_batch(items, workers=8):
        rewards[index] = verdict.reward
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import AsyncGenerator, Hashable, Iterable, Mapping

from rollbox.sandbox import SandboxSource, WarmSandboxes
from rollbox.sandbox.pool._batch import as_finished
from rollbox.tasks import Task

from ._grade import Solution, grade
from ._verdict import Verdict, VerdictStatus
from .runners._check_variants import MAX_VARIANTS

__all__ = ["grade_batch", "pool_size"]


def _identity(task: Task, solution: Solution) -> Hashable:
    """What makes two items the same grading: the same task object and the same files (a directory: never)."""
    if not isinstance(solution, Mapping):
        return object()
    files = (
        (path, data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data))
        for path, data in solution.items()
    )
    return id(task), tuple(sorted(files))


def pool_size(workers: int) -> int:
    """How many warm sandboxes ``workers`` gradings at once need: room for one check-based grading's variants (each
    in a sandbox of its own) beside the other workers, twice over (returned sandboxes are reset in the background,
    and a check borrows its sandboxes all at once)."""
    return 2 * (workers + MAX_VARIANTS - 1)


async def grade_batch(
    items: Iterable[tuple[Task, Solution]],
    *,
    workers: int | None = None,
    sandboxes: SandboxSource | None = None,
    retries: int = 1,
    dedupe: bool = True,
) -> AsyncGenerator[tuple[int, Verdict], None]:
    """Grade every ``(task, solution)`` as :func:`grade` does, ``workers`` at a time, and yield ``(index, verdict)``
    as each grading ends; every item gets exactly one verdict.

    Gradings start in the items' order. With ``dedupe`` (the default), items with the same task (object) and the
    same files are graded once and share that verdict, yielded for each of them: a policy's group of rollouts often
    repeats itself, and a verdict depends on nothing else (a candidate whose outcome depends on chance then gets
    one draw for all its copies; ``dedupe=False`` draws for each). A solution given as a directory is never shared
    (it is read when it is graded). A grading that ends in ``infra_error`` (rollbox's or the host's failure, never
    the candidate's) is graded again, up to ``retries`` times; an exception out of the judge (a bug of rollbox's)
    becomes that item's ``infra_error`` instead of ending the batch. Closing the iterator early (``async with
    contextlib.aclosing(grade_batch(...)) as verdicts:``, then ``break``) cancels the gradings left and closes the
    pool it made.

    Args:
        items: What to grade; the index of a verdict is the item's position here.
        workers: Gradings at once (default: the CPUs this process may run on).
        sandboxes: Where grading sandboxes come from (default: warm pools of :func:`pool_size` sandboxes, closed
            at the end).
        retries: How many times an ``infra_error`` is graded again.
        dedupe: Whether identical items are graded once.

    Raises:
        ValueError: ``workers`` is not positive, or ``retries`` is negative.
    """
    todo = list(items)
    workers = len(os.sched_getaffinity(0)) if workers is None else workers
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if retries < 0:
        raise ValueError(f"retries must not be negative, got {retries}")
    owned = None
    if sandboxes is None:
        sandboxes = owned = WarmSandboxes(size=pool_size(workers))
    source: SandboxSource = sandboxes

    async def one(task: Task, solution: Solution) -> Verdict:
        verdict = Verdict(task_id=task.id, status=VerdictStatus.INFRA_ERROR, reward=None)
        for _ in range(1 + retries):
            try:
                verdict = await grade(task, solution, sandboxes=source)
            except Exception as exc:  # a bug of rollbox's must not sink the other gradings: report it as one
                verdict = Verdict(
                    task_id=task.id, status=VerdictStatus.INFRA_ERROR, reward=None, error=f"{type(exc).__name__}: {exc}"
                )
            if verdict.status is not VerdictStatus.INFRA_ERROR:
                break
        return verdict

    copies: dict[Hashable, list[int]] = {}
    for index, (task, solution) in enumerate(todo):
        copies.setdefault(_identity(task, solution) if dedupe else index, []).append(index)
    groups = list(copies.values())
    jobs = [functools.partial(one, *todo[group[0]]) for group in groups]
    try:
        # Closed explicitly: the gradings left are cancelled before the pool they use is closed.
        async with contextlib.aclosing(as_finished(jobs, workers=workers)) as verdicts:
            async for position, verdict in verdicts:
                for index in groups[position]:
                    yield index, verdict
    finally:
        if owned is not None:
            await owned.close()
