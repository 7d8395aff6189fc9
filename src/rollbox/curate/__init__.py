"""rollbox.curate: only trustworthy tasks reach training, and new ones are made from real code.

:func:`validate` checks tasks by grading chosen candidates with the judge (the reference in seeded orders and
under CPU pressure, under other hash seeds and with the clock moved; trivial solutions, hacks, special-case
patches, mutants of the reference, generated cases) and decides, per task,
``admit``, ``weak`` or ``reject`` with reasons from a closed set. Imports :mod:`rollbox.judge`,
:mod:`rollbox.tasks` and :mod:`rollbox.sandbox`.
"""

from ._cache import ValidationCache, content_hash
from ._candidates import Candidate, CandidateKind
from ._clock import ClockUnavailable
from ._grader import Progress
from ._html import render_html
from ._mutate import Mutant, Operator, mutants
from ._options import ValidateOptions
from ._pool import candidate_pool
from ._pypi import SynthError
from ._reasons import Decision, Reason, ReasonCode
from ._report import CandidateResult, MutantResult, TaskReport
from ._synth import PackageYield, SynthOptions, SynthReport, synthesize
from ._validate import validate

__all__ = [
    "Candidate",
    "CandidateKind",
    "CandidateResult",
    "ClockUnavailable",
    "Decision",
    "Mutant",
    "MutantResult",
    "Operator",
    "PackageYield",
    "Progress",
    "Reason",
    "ReasonCode",
    "SynthError",
    "SynthOptions",
    "SynthReport",
    "TaskReport",
    "ValidateOptions",
    "ValidationCache",
    "candidate_pool",
    "content_hash",
    "mutants",
    "render_html",
    "synthesize",
    "validate",
]
