"""The candidates validation grades, as one list: what a scripted policy can choose from for a task.

The same candidates that prove a task trustworthy (the reference, trivial solutions, the hack corpus, mutants of the
reference) are the actions of rollbox's candidate-pool policy (``rollbox.train``): a task admitted by validation
rewards its reference, and none of its hacks.
"""

from __future__ import annotations

from rollbox.tasks import Task

from ._candidates import Candidate, CandidateKind, hack_candidates, trivial_candidates
from ._mutate import mutants, sample_mutants
from ._reference import Reference

__all__ = ["candidate_pool"]


def candidate_pool(task: Task, *, max_mutants: int = 3) -> list[Candidate]:
    """The reference (first), the trivial candidates, every hack that applies to the task's runner, and up to
    ``max_mutants`` mutants of the reference (drawn evenly across operators, seeded by the task's id), each as files
    laid over the task's workspace. A task without ``solution/`` gives only the untouched workspace."""
    reference = Reference.of(task)
    pool = [] if reference is None else [Candidate("reference", CandidateKind.REFERENCE, reference.files)]
    pool += trivial_candidates(task, reference) + hack_candidates(task, reference)
    if reference is not None and max_mutants > 0:
        found = [
            (target.path, m)
            for target in reference.targets
            for m in mutants(target.source, within=target.functions or None)
        ]
        paths = {id(m): path for path, m in found}
        for index, m in enumerate(sample_mutants([m for _, m in found], max_mutants, seed=task.id)):
            files = {**reference.files, paths[id(m)]: m.source.encode()}
            pool.append(Candidate(f"mutant_{index}_{m.operator.value}", CandidateKind.MUTANT, files))
    return pool
