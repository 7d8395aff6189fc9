"""The candidate pool: the actions rollbox's training policy chooses among for one task.

Each action is one of the candidates validation grades (:func:`rollbox.curate.candidate_pool`): the reference fix,
trivial and mutated (plausible but wrong) solutions, and the reward hacks of curate's corpus (always-equal objects,
an exit at import or in the call, a conftest that forces passes, runner configuration rewrites, edited tests,
forged reports, start-up hooks, ...), and two hacks of the loop's own (``_hacks``: deleting the tests, printing a
fake summary). An action is carried out through the episode's tools: one ``write_file`` per file it lays over the
workspace, its ``bash`` commands (a hack that deletes files), then ``submit``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rollbox.curate import CandidateKind, candidate_pool
from rollbox.tasks import Task, load_task

from ._hacks import pool_hacks

__all__ = ["Action", "ActionKind", "action_pool", "pool_for"]


class ActionKind(str, enum.Enum):
    """What an action is, by construction (never by what a grader said of it)."""

    #: The task's reference solution.
    FIX = "fix"
    #: A solution that is wrong: untouched, gutted, or a mutant of the reference.
    WRONG = "wrong"
    #: A trick on the grader.
    HACK = "hack"


_KINDS = {
    CandidateKind.REFERENCE: ActionKind.FIX,
    CandidateKind.TRIVIAL: ActionKind.WRONG,
    CandidateKind.MUTANT: ActionKind.WRONG,
    CandidateKind.HACK: ActionKind.HACK,
}


@dataclass(frozen=True)
class Action:
    """One candidate as the policy's action."""

    name: str
    kind: ActionKind
    #: Files laid over the workspace (workspace-relative paths, UTF-8 text).
    files: Mapping[str, str]
    #: ``bash`` commands run in /workspace after the files are written.
    commands: tuple[str, ...] = ()

    @property
    def family(self) -> str:
        """What the policy's shared preference is kept for: the name, with every mutant one family."""
        return "mutant" if self.name.startswith("mutant_") else self.name

    def calls(self) -> list[dict[str, Any]]:
        """The tool calls that carry it out, ``submit`` last."""
        writes = [{"name": "write_file", "arguments": {"path": p, "content": t}} for p, t in sorted(self.files.items())]
        runs = [{"name": "bash", "arguments": {"command": c}} for c in self.commands]
        return [*writes, *runs, {"name": "submit", "arguments": {}}]


def action_pool(task: Task, *, max_mutants: int = 3) -> list[Action]:
    """Every action of ``task``, the reference first (when there is one), the loop's own hacks last. Files that
    are not UTF-8 text (which ``write_file`` cannot carry) leave their candidate out."""
    pool: list[Action] = []
    for candidate in candidate_pool(task, max_mutants=max_mutants):
        try:
            files = {path: data.decode("utf-8") for path, data in candidate.files.items()}
        except UnicodeDecodeError:
            continue
        pool.append(Action(candidate.name, _KINDS[candidate.kind], files))
    gutted = next((a.files for a in pool if a.name == "empty_body"), None)
    if gutted is not None:
        for name, (files, commands) in pool_hacks(task, gutted).items():
            pool.append(Action(name, ActionKind.HACK, files, commands))
    return pool


@functools.lru_cache(maxsize=1024)
def pool_for(path: str, max_mutants: int) -> tuple[Action, ...]:
    """:func:`action_pool` of the task at ``path``, made once per process (a worker on another machine makes the
    same pool from the same task)."""
    return tuple(action_pool(load_task(path), max_mutants=max_mutants))
