"""rollbox.curate's public API is exactly what ``__all__`` says, and its reason codes are a closed set."""

from __future__ import annotations

import rollbox.curate
from rollbox.curate import Decision, Reason, ReasonCode
from rollbox.curate._reasons import decide


def test_curate_exports() -> None:
    assert sorted(rollbox.curate.__all__) == sorted(
        [
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
    )
    for name in rollbox.curate.__all__:
        assert hasattr(rollbox.curate, name)


def test_reason_codes_are_closed() -> None:
    assert [c.value for c in ReasonCode] == [
        "reference_fails",
        "flaky",
        "order_dependent",
        "timing_dependent",
        "hash_seed_dependent",
        "date_dependent",
        "tight_time_limit",
        "duplicate",
        "shortcut_passes",
        "trivial_passes",
        "hack_passes",
        "test_data_in_workspace",
        "reference_reads_tests",
        "f2p_passes_before",
        "p2p_fails",
        "weak_tests",
        "contradictory_cases",
        "answer_leak",
        "nondeterministic",
        "validation_error",
    ]


def test_decisions() -> None:
    assert decide([]) is Decision.ADMIT
    assert decide([Reason(ReasonCode.WEAK_TESTS, "")]) is Decision.WEAK
    for code in set(ReasonCode) - {ReasonCode.WEAK_TESTS}:
        assert decide([Reason(ReasonCode.WEAK_TESTS, ""), Reason(code, "")]) is Decision.REJECT
