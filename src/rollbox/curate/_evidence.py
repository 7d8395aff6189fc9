"""How widely a synthesized bug's failures spread: the distinct tests it fails, and the distinct inputs those tests
give the functions of its module (recorded with the original module in place, ``_recorder``).

A bug whose one failing test gives one input (``test_pluralize[cow-kine]``) is passed by a patch that special-cases
that input and leaves the bug in place; one that fails several tests, or one test that tries many inputs, is not.
Synthesis measures each bug it keeps and prefers the broad ones (:func:`prefer_broad`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

from rollbox.sandbox import SandboxSource
from rollbox.tasks import PytestGrading, Task

from ._recorder import record_calls
from ._reference import Reference, Target
from ._shortcut import distinct_inputs

__all__ = ["Evidence", "measure_evidence", "prefer_broad"]


@dataclasses.dataclass(frozen=True)
class Evidence:
    """A bug's fail_to_pass evidence."""

    #: Distinct failing tests (each parametrised case one).
    tests: int
    #: Distinct inputs the failing tests give the functions of the bug's module directly; ``None``: more calls than
    #: the recorder keeps (many inputs), or the run left no record.
    inputs: int | None

    @property
    def breadth(self) -> float:
        """The larger of the two counts (infinite when the calls were too many to record)."""
        return math.inf if self.inputs is None else max(self.tests, self.inputs)

    def to_json(self) -> dict[str, int | None]:
        """As a JSON object."""
        return {"tests": self.tests, "inputs": self.inputs}


class _Measured(Protocol):
    @property
    def evidence(self) -> Evidence: ...


async def measure_evidence(probe: Task, module: str, failing: Sequence[str], sandboxes: SandboxSource) -> Evidence:
    """The evidence of a bug in ``module`` (workspace-relative) that fails ``failing``, ``probe``'s tests, run with
    ``probe``'s workspace (the package as released) in place.

    Raises:
        RuntimeError: rollbox or the host failed the run.
    """
    source = (probe.workspace / module).read_bytes()
    reference = Reference(
        files={module: source}, targets=(Target(module, source.decode("utf-8", errors="replace"), ()),)
    )
    task = dataclasses.replace(probe, grading=PytestGrading(fail_to_pass=tuple(failing), pass_to_pass=()))
    calls = await record_calls(task, reference, sandboxes)
    return Evidence(tests=len(set(failing)), inputs=None if calls is None else distinct_inputs(calls))


_B = TypeVar("_B", bound=_Measured)


def prefer_broad(bugs: Sequence[_B], minimum: int) -> list[_B]:
    """The bugs whose evidence spans at least ``minimum`` distinct tests or inputs, broadest first (ties keep their
    order)."""
    return sorted((b for b in bugs if b.evidence.breadth >= minimum), key=lambda b: -b.evidence.breadth)
