"""What validation does, and how hard it looks: one frozen value, part of the cache's key."""

from __future__ import annotations

import dataclasses
import json
from typing import Literal

__all__ = ["ValidateOptions"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ValidateOptions:
    """What validation does, and how hard it looks."""

    #: Reference runs, each in another seeded test order (the first in the tests' own).
    runs: int = 3
    #: Extra runs of an order in which a test failed (and of the tests' own order then).
    reruns: int = 2
    #: Runs of the reference, all passing, before a task counts as steady: while every run so far passed, more run
    #: in the tests' own order. A test failing a share ``p`` of its runs is missed with probability
    #: ``(1 - p) ** steady_runs``: 29 miss one that fails 1 run in 10 with probability 0.9**29 = 4.7%.
    steady_runs: int = 29
    #: Runs of the reference under other hash seeds (``PYTHONHASHSEED`` 1, 2, ...) in the first batch; the steady
    #: runs after it take the seeds up to 8 (or to this, if more) in turn, each once before any twice.
    hash_seeds: int = 2
    #: Whether to run the reference with the clock moved ten years ahead and back (needs libfaketime).
    clock: bool = True
    #: The time limit must be at least this many times the reference's worst CPU time.
    time_headroom: float = 3.0
    #: Special-case patches (a table of the fail_to_pass tests' inputs) are tried when they need at most this many.
    shortcut_inputs: int = 3
    #: Below this kill ratio, a task is ``weak``.
    min_kill_ratio: float = 0.6
    #: Mutants graded per task at most (drawn evenly across operators).
    max_mutants: int = 40
    #: Whether to rerun the reference under CPU pressure, and how often.
    pressure: bool = True
    pressure_runs: int = 2
    #: Whether to generate cases for ``function`` and ``stdio`` tasks whose mutants survive, and how many inputs.
    generate: bool = True
    max_generated: int = 200
    #: Whether to write the stronger cases as a new file of the task (the old one kept).
    fix: bool = False
    #: Every trivial and hack candidate, or only one of each kind of trick (``essential``: for tasks whose every
    #: grading is expensive, such as a package's whole test suite).
    candidates: Literal["all", "essential"] = "all"

    def __post_init__(self) -> None:
        for name in ("runs", "pressure_runs", "steady_runs"):
            if getattr(self, name) < 1:
                raise ValueError(f"ValidateOptions.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("reruns", "max_mutants", "max_generated", "hash_seeds", "shortcut_inputs"):
            if getattr(self, name) < 0:
                raise ValueError(f"ValidateOptions.{name} must not be negative, got {getattr(self, name)}")
        if self.candidates not in ("all", "essential"):
            raise ValueError(f"ValidateOptions.candidates must be 'all' or 'essential', got {self.candidates!r}")
        if self.time_headroom < 1.0:
            raise ValueError(f"ValidateOptions.time_headroom must be at least 1, got {self.time_headroom}")
        if not 0.0 <= self.min_kill_ratio <= 1.0:
            raise ValueError(f"ValidateOptions.min_kill_ratio must be from 0 to 1, got {self.min_kill_ratio}")

    def fingerprint(self) -> str:
        """The options as one string, for the cache's key."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)
