"""The task model: what a task is, as data. Nothing here runs anything.

A task directory, rollbox's native task format::

    my-task/
      task.toml         id, [grading], [limits], [environment], [workspace], [metadata]
      instruction.md    what the agent is asked to do (optional)
      workspace/        the files the agent starts with; they become /workspace
      tests/            hidden verifier files; never visible while solving
      solution/         optional reference: files laid over workspace/ that solve the task
      environment/      optional: requirements.txt for the task's runtime layer
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollbox.sandbox import Limits, Network

from ._environment import Environment

__all__ = [
    "Comparator",
    "Environment",
    "FunctionGrading",
    "Grading",
    "PytestGrading",
    "RewardKind",
    "RewardSpec",
    "ScriptGrading",
    "StdioGrading",
    "Task",
]


class RewardKind(str, enum.Enum):
    """How test outcomes become a reward."""

    #: 1.0 when every graded test passed, else 0.0.
    BINARY = "binary"
    #: The fraction of graded tests that passed.
    PASS_RATE = "pass_rate"
    #: ``f2p_weight`` x (fail_to_pass pass rate) + (1 - ``f2p_weight``) x (pass_to_pass pass rate).
    F2P_P2P = "f2p_p2p"


class Comparator(str, enum.Enum):
    """How a ``stdio`` case's output is compared with the expected output."""

    #: Byte-for-byte equal.
    EXACT = "exact"
    #: Equal after splitting on any whitespace.
    WHITESPACE = "whitespace"
    #: Tokens equal, numbers within ``float_tolerance`` (absolute or relative).
    FLOAT = "float"
    #: A checker program in tests/ decides, in a sandbox of its own.
    CHECKER = "checker"


@dataclass(frozen=True, kw_only=True)
class PytestGrading:
    """Run the pytest files in tests/ against the candidate's workspace."""

    #: Test ids that must go from failing to passing; ``None`` means every collected test must pass.
    fail_to_pass: tuple[str, ...] | None = None
    #: Test ids that must keep passing.
    pass_to_pass: tuple[str, ...] = ()
    #: Repository tests (``[grading] tests_in_workspace = true``): the files of tests/ are laid over /workspace at
    #: the same relative paths and pytest runs with /workspace as its root, with the workspace's pristine
    #: configuration (its conftest.py, pytest.ini, pyproject.toml: the candidate's edits to them are still
    #: dropped). Test ids are then pytest node ids relative to the workspace root, as SWE-bench writes them.
    #: ``False``: tests/ stays apart, in the judge's own root, with /workspace on the path.
    tests_in_workspace: bool = False
    #: Workspace paths the tests delete (``[grading] removed_by_tests``; with ``tests_in_workspace`` only): the
    #: judge removes them from /workspace before it lays tests/ over it, as SWE-bench's harness has the files its
    #: test patch deletes gone when the tests run. The agent's workspace keeps them, as the repository has them,
    #: so that nothing of the hidden tests shows while solving. Sorted workspace-relative POSIX paths.
    removed_by_tests: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class FunctionGrading:
    """Call a function of the candidate's with each case's inputs; compare outputs outside its process."""

    #: The workspace file that defines the function, e.g. ``solution.py``.
    module: str
    #: The function's name.
    entry_point: str
    #: A JSONL file in tests/, one ``{"args": [...], "kwargs": {...}, "expected": ...}`` a line, optionally with
    #: ``"apply": "bool"`` or ``"tuple"`` (taken of the result in the candidate's process, as ``assert f(x)`` and
    #: ``tuple(f(x)) == ...`` do) and ``"compare"``: ``"=="`` (the default), ``"is"`` (expected ``null``,
    #: ``true`` or ``false``) or ``"close"`` with ``"tolerance"``. ``None``: no cases, only ``check``.
    cases: str | None = "cases.jsonl"
    #: A Python file in tests/ defining ``check(candidate)``, for assertions that cannot be written as cases. It
    #: runs in a process of its own that the candidate's process cannot read, calling the candidate across a pipe
    #: with plain values (arguments and results), so its expectations never enter the candidate's process.
    check: str | None = None


@dataclass(frozen=True, kw_only=True)
class StdioGrading:
    """Run a command with each case's input on stdin; compare its stdout with the expected output."""

    #: The command, e.g. ``("python3", "solution.py")``.
    command: tuple[str, ...]
    #: A JSONL file in tests/, one ``{"input": "...", "output": "..."}`` a line.
    cases: str = "cases.jsonl"
    comparator: Comparator = Comparator.WHITESPACE
    #: For ``float``: the absolute or relative difference allowed between numbers.
    float_tolerance: float = 1e-6
    #: For ``checker``: a program in tests/, run as ``checker INPUT_FILE EXPECTED_FILE OUTPUT_FILE``.
    checker: str | None = None


@dataclass(frozen=True, kw_only=True)
class ScriptGrading:
    """Harbor-style: run tests/``script`` in a fresh sandbox; its reward is read where the candidate cannot write."""

    script: str = "test.sh"


#: How a task is graded: one of the four runners' settings, as ``[grading] runner`` names it.
Grading = PytestGrading | FunctionGrading | StdioGrading | ScriptGrading


@dataclass(frozen=True, kw_only=True)
class RewardSpec:
    """How a verdict's reward is computed."""

    kind: RewardKind = RewardKind.BINARY
    #: The reward when the grading machinery was subverted (status ``tampered``).
    tamper_penalty: float = -1.0
    #: For ``f2p_p2p``: the weight of the fail_to_pass tests.
    f2p_weight: float = 0.5
    #: Efficiency terms (0 = off): the share of the reward that scales with CPU time, and with peak memory,
    #: relative to the reference solution's (``min(1, reference / candidate)``). They need ``solution/``.
    cpu_weight: float = 0.0
    memory_weight: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Task:
    """One task, loaded and validated. Paths are absolute."""

    id: str
    #: The task directory.
    path: Path
    instruction: str
    grading: Grading
    reward: RewardSpec
    #: Limits for grading runs and for the agent's commands while solving.
    limits: Limits
    network: Network = Network.NONE
    #: The runtime the task's commands run in: Python version, pip requirements, environment variables.
    environment: Environment = field(default_factory=Environment)
    #: The sha256 of workspace/ recorded in task.toml (``[workspace] sha256``), which :func:`load_task` checked
    #: the directory against; ``None`` when the task records none.
    workspace_sha256: str | None = None
    #: ``[metadata]``: free-form facts about the task (its source, difficulty, ...); nothing grades by them.
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def workspace(self) -> Path:
        """The files the agent starts with."""
        return self.path / "workspace"

    @property
    def tests(self) -> Path:
        """The hidden verifier files."""
        return self.path / "tests"

    @property
    def test_modules(self) -> list[Path]:
        """The pytest modules in tests/, at any depth: ``test_*.py`` and ``*_test.py``, sorted."""
        return sorted(p for p in self.tests.rglob("*.py") if p.name.startswith("test_") or p.name.endswith("_test.py"))

    @property
    def solution(self) -> Path | None:
        """The reference solution laid over the workspace, when the task has one."""
        path = self.path / "solution"
        return path if path.is_dir() else None

    @property
    def requirements(self) -> Path | None:
        """environment/requirements.txt, when the task has one (its lines are already in
        ``environment.requirements``)."""
        path = self.path / "environment" / "requirements.txt"
        return path if path.is_file() else None
