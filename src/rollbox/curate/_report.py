"""What validation reports about each task: the decision, its reasons, and the measurements behind them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._reasons import Decision, Reason, ReasonCode

__all__ = ["CandidateResult", "MutantResult", "TaskReport"]


@dataclass(frozen=True, kw_only=True)
class CandidateResult:
    """How one candidate (the reference, a trivial solution, a hack) was graded, in the tests' own order."""

    name: str
    kind: str
    status: str
    reward: float | None

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {"name": self.name, "kind": self.kind, "status": self.status, "reward": self.reward}


@dataclass(frozen=True, kw_only=True)
class MutantResult:
    """One mutant of the reference and whether the tests killed it."""

    operator: str
    path: str
    location: str
    #: The function it changes (``Class.method``), or ``""`` at module level.
    function: str = ""
    description: str
    killed: bool
    #: Whether the generated cases kill it (``None``: none were generated, or it was already killed).
    killed_by_generated: bool | None = None

    def to_json(self) -> dict[str, Any]:
        """As a JSON object."""
        return {
            "operator": self.operator,
            "path": self.path,
            "function": self.function,
            "location": self.location,
            "description": self.description,
            "killed": self.killed,
            "killed_by_generated": self.killed_by_generated,
        }


@dataclass(frozen=True, kw_only=True)
class TaskReport:
    """Validation's conclusion for one task (one entry of ``rollbox validate --json``)."""

    task_id: str
    #: The task directory.
    path: str
    decision: Decision
    reasons: tuple[Reason, ...]
    #: The digest of the task's files that this report holds for (the cache's key, with the options).
    content_hash: str
    #: Killed mutants over all mutants of the reference (``None``: none were graded).
    kill_ratio: float | None = None
    #: The kill ratio with the generated cases added (``None``: none were generated).
    kill_ratio_generated: float | None = None
    mutants: tuple[MutantResult, ...] = ()
    #: Generated cases kept (every reference agreed on them, and they kill a mutant the task's cases missed).
    generated_cases: int = 0
    #: The stronger cases file ``--fix`` wrote, relative to the task directory.
    fixed_file: str | None = None
    flaky_tests: tuple[str, ...] = ()
    #: Gradings of the reference that looked for failing tests (every order's, the sequential rule's, the reruns).
    reference_runs: int = 0
    candidates: tuple[CandidateResult, ...] = ()
    #: The reference's worst CPU time over its runs (the time limit's headroom is measured against it).
    reference_cpu_s: float | None = None
    #: What ``--fix`` wrote into task.toml's [limits] (empty: nothing).
    widened_limits: str = ""
    #: Distinct inputs the fail_to_pass tests gave the functions a special-case patch would answer (``None``: not
    #: recorded): one or a few, and a table of them passes for a fix (``shortcut_passes``).
    f2p_inputs: int | None = None
    #: The task this one duplicates (its id and directory), for ``duplicate``.
    duplicate_of: str | None = None
    #: Gradings run for this report.
    gradings: int = 0
    duration_s: float = 0.0
    #: Whether the report came from the cache.
    cached: bool = False

    def codes(self) -> set[ReasonCode]:
        """The reasons' codes."""
        return {reason.code for reason in self.reasons}

    def survivors(self) -> dict[str, list[str]]:
        """The surviving mutants' descriptions per function (``path::Class.method``; ``path`` at module level)."""
        found: dict[str, list[str]] = {}
        for m in self.mutants:
            if not m.killed:
                name = f"{m.path}::{m.function}" if m.function else m.path
                found.setdefault(name, []).append(f"{m.location}: {m.description} ({m.operator})")
        return found

    def to_json(self) -> dict[str, Any]:
        """As a JSON object: ``task_id``, ``decision``, ``reasons`` (``code``, ``detail``) first."""
        return {
            "task_id": self.task_id,
            "decision": self.decision.value,
            "reasons": [reason.to_json() for reason in self.reasons],
            "path": self.path,
            "content_hash": self.content_hash,
            "kill_ratio": self.kill_ratio,
            "kill_ratio_generated": self.kill_ratio_generated,
            "generated_cases": self.generated_cases,
            "fixed_file": self.fixed_file,
            "flaky_tests": list(self.flaky_tests),
            "reference_runs": self.reference_runs,
            "reference_cpu_s": self.reference_cpu_s,
            "widened_limits": self.widened_limits,
            "f2p_inputs": self.f2p_inputs,
            "duplicate_of": self.duplicate_of,
            "survivors": self.survivors(),
            "mutants": [mutant.to_json() for mutant in self.mutants],
            "candidates": [candidate.to_json() for candidate in self.candidates],
            "gradings": self.gradings,
            "duration_s": round(self.duration_s, 3),
            "cached": self.cached,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskReport:
        """The report :meth:`to_json` wrote.

        Raises:
            KeyError, ValueError, TypeError: ``data`` is not such a report.
        """
        return cls(
            task_id=data["task_id"],
            path=data["path"],
            decision=Decision(data["decision"]),
            reasons=tuple(Reason(ReasonCode(r["code"]), r["detail"]) for r in data["reasons"]),
            content_hash=data["content_hash"],
            kill_ratio=data["kill_ratio"],
            kill_ratio_generated=data["kill_ratio_generated"],
            generated_cases=data["generated_cases"],
            fixed_file=data["fixed_file"],
            flaky_tests=tuple(data["flaky_tests"]),
            reference_runs=data["reference_runs"],
            mutants=tuple(MutantResult(**m) for m in data["mutants"]),
            candidates=tuple(CandidateResult(**c) for c in data["candidates"]),
            reference_cpu_s=data.get("reference_cpu_s"),
            widened_limits=data.get("widened_limits", ""),
            f2p_inputs=data.get("f2p_inputs"),
            duplicate_of=data.get("duplicate_of"),
            gradings=data["gradings"],
            duration_s=data["duration_s"],
            cached=data["cached"],
        )
