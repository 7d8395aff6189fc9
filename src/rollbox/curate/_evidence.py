"""How widely a synthesized bug's failures spread: the distinct tests it fails, and the distinct inputs those tests
give the functions of its module (recorded with the original module in place, ``_recorder``).

A bug whose one failing test gives one input (``test_pluralize[cow-kine]``) is passed by a patch that special-cases
that input and leaves the bug in place; one that fails several tests, or one test that tries many inputs, is not.
Synthesis measures each bug it keeps and prefers the broad ones (:func:`prefer_broad`). A bug whose recording run
left no record (it died, or a limit cut it short) has no evidence: it is set aside, never taken for broad.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol, TypeVar

from rollbox.sandbox import SandboxSource
from rollbox.tasks import PytestGrading, Task

from ._recorder import RecordStatus, record_calls
from ._reference import Reference, Target
from ._shortcut import distinct_inputs

__all__ = ["Evidence", "measure_evidence", "prefer_broad"]


@dataclasses.dataclass(frozen=True)
class Evidence:
    """A bug's fail_to_pass evidence."""

    #: Distinct failing tests (each parametrised case one).
    tests: int
    #: Distinct inputs the failing tests give the functions of the bug's module directly; ``None``: more calls than
    #: the recorder keeps (many inputs).
    inputs: int | None
    #: Whether the recording run left a record. ``False``: it died or a limit cut it short, so the inputs are unknown
    #: (``inputs`` is ``None``) and the bug may be one a special-case patch passes: it has no breadth at all.
    recorded: bool = True

    @property
    def breadth(self) -> float:
        """The larger of the two counts (infinite when the calls were too many to record; zero with no record)."""
        if not self.recorded:
            return 0.0
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
    recording = await record_calls(task, reference, sandboxes)
    tests = len(set(failing))
    if recording.status is RecordStatus.NO_RECORD:
        return Evidence(tests=tests, inputs=None, recorded=False)
    if recording.status is RecordStatus.OVERFLOW:
        return Evidence(tests=tests, inputs=None)
    return Evidence(tests=tests, inputs=distinct_inputs(recording.calls))


_B = TypeVar("_B", bound=_Measured)


def prefer_broad(bugs: Sequence[_B], minimum: int) -> list[_B]:
    """The bugs whose evidence was recorded and spans at least ``minimum`` distinct tests or inputs, broadest first
    (ties keep their order)."""
    recorded = (b for b in bugs if b.evidence.recorded and b.evidence.breadth >= minimum)
    return sorted(recorded, key=lambda b: -b.evidence.breadth)
