"""Sealed expectations are exact: for any value a test computes and any constant it expects, the judge's verdict on
a sealed assertion equals what the assertion itself would have said on the same objects.

The chain is the one a grading run takes: the test module is sealed (:func:`seal_module`), the value the test
computed is encoded in the candidate's process as the judge's plugin encodes it (``encode(value, convert=plain)``),
travels as JSON, is decoded by the judge and held against the sealed expectation (:func:`holds`). The reference
is Python evaluating the assertion's own source on the original objects (``pytest.approx`` and unittest's methods
included); an assertion that raises counts as not holding. The end-to-end cases at the bottom grade real tasks.
"""

from __future__ import annotations

import asyncio
import json
import math
import textwrap
import unittest
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rollbox.judge import VerdictStatus, grade
from rollbox.judge.integrity._expectations import holds
from rollbox.judge.integrity._seal import SEAL_FUNCTION, seal_module
from rollbox.tasks import load_task
from rollbox.tasks._values import decode, encode, plain

_SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Integers around the limits that matter: a float's 53-bit mantissa, 64-bit machine words, JSON's decimal digits.
def _integers(bits: int) -> st.SearchStrategy[int]:
    edges = [2**52, 2**52 + 1, 2**53, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), 2**64, 10**20 + 7]
    return st.one_of(st.integers(-(2**70), 2**70), st.sampled_from(edges), st.integers(-(2**bits), 2**bits))


_INTEGERS = _integers(13_000)
# A signalling NaN cannot be hashed or compared at all (InvalidOperation): hashable members leave it out.
_DECIMALS = st.decimals().filter(lambda d: not d.is_snan())
_FLOATS = st.one_of(st.floats(), st.sampled_from([0.0, -0.0, 1.0, 2.0**53, 1e20, 1e-300]))
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _INTEGERS,
    _FLOATS,
    st.complex_numbers(),
    _DECIMALS,
    st.fractions(),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_HASHABLE = st.recursive(
    _SCALARS, lambda inner: st.tuples(inner, inner) | st.frozensets(inner, max_size=3), max_leaves=3
)
#: Any plain value, nested.
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_HASHABLE, inner, max_size=3),
        st.sets(_HASHABLE, max_size=3),
        st.frozensets(_HASHABLE, max_size=3),
    ),
    max_leaves=8,
)
# What a test can write as a constant expectation: literals (and arithmetic on them) of these types.
_CONSTANT_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _integers(4096),  # the folder's bound on a constant's size
    st.floats(allow_nan=False),
    st.complex_numbers(allow_nan=False),
    st.text(max_size=8),
    st.binary(max_size=8),
)
_CONSTANT_HASHABLE = st.recursive(_CONSTANT_SCALARS, lambda inner: st.tuples(inner, inner), max_leaves=2)
CONSTANTS = st.recursive(
    _CONSTANT_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_CONSTANT_HASHABLE, inner, max_size=3),
        st.sets(_CONSTANT_HASHABLE, max_size=3),
    ),
    max_leaves=6,
)
OPERATORS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in"]


def literal(value: Any) -> str:
    """Source text of a constant expression whose value is ``value``."""
    if type(value) is float:
        return repr(value) if math.isfinite(value) else ("-1e999" if value < 0 else "1e999")
    if type(value) is complex:
        sign = "-" if math.copysign(1.0, value.imag) < 0 else "+"
        return f"({literal(value.real)} {sign} {literal(abs(value.imag))}j)"
    if type(value) is list:
        return "[" + ", ".join(map(literal, value)) + "]"
    if type(value) is tuple:
        return "(" + "".join(literal(v) + ", " for v in value) + ")"
    if type(value) is set:
        return "{" + ", ".join(map(literal, value)) + "}" if value else "set()"
    if type(value) is dict:
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def sealed_verdict(test_source: str, value: Any) -> bool:
    """Whether the one sealed assertion of ``test_source`` holds for ``value``, as a grading run decides it."""
    sealed = seal_module(test_source)
    assume(len(sealed.seals) == 1 and SEAL_FUNCTION in sealed.source)
    (seal,) = sealed.seals.values()
    reported = json.loads(json.dumps(encode(value, convert=plain)))  # the plugin's record, then the judge's read
    return holds(seal, decode(reported), seal.expected)


def python_verdict(expression: str, **names: Any) -> bool:
    """Whether Python's own evaluation of ``expression`` holds (an assertion that raises does not)."""
    try:
        return bool(eval(expression, {"pytest": pytest, **names}))
    except Exception:
        return False


def _unittest_holds(call: str, **names: Any) -> bool:
    try:
        eval(call, {"case": unittest.TestCase(), **names})
    except Exception:
        return False
    return True


@_SETTINGS
@given(value=VALUES, expected=CONSTANTS, op=st.sampled_from(OPERATORS), swapped=st.booleans())
def test_a_sealed_comparison_holds_exactly_when_python_says_it_does(
    value: Any, expected: Any, op: str, swapped: bool
) -> None:
    comparison = f"{literal(expected)} {op} computed()" if swapped else f"computed() {op} {literal(expected)}"
    source = f"def test_it():\n    assert {comparison}\n"
    assert sealed_verdict(source, value) == python_verdict(comparison, computed=lambda: value)


@_SETTINGS
@given(value=VALUES, expected=st.sampled_from([None, True, False]), negated=st.booleans())
def test_is_and_is_not_hold_exactly(value: Any, expected: Any, negated: bool) -> None:
    comparison = f"computed() {'is not' if negated else 'is'} {expected!r}"
    source = f"def test_it():\n    assert {comparison}\n"
    assert sealed_verdict(source, value) == python_verdict(comparison, computed=lambda: value)


UNITTEST_METHODS = [
    "assertEqual", "assertNotEqual", "assertAlmostEqual", "assertNotAlmostEqual", "assertCountEqual",
    "assertGreater", "assertLessEqual", "assertIn", "assertNotIn",
]  # fmt: skip
_NUMBERS = st.one_of(_integers(4096), st.floats(allow_nan=False))
_TOLERANCES = st.one_of(st.integers(0, 10), st.floats(0, 1, allow_nan=False), st.sampled_from([1e-6, 1e-12, 0.0]))


@_SETTINGS
@given(
    value=st.one_of(VALUES, st.lists(_NUMBERS | st.fractions() | st.decimals(), max_size=3)),
    expected=st.one_of(_NUMBERS, st.complex_numbers(allow_nan=False), st.lists(_NUMBERS, max_size=3)),
    options=st.dictionaries(st.sampled_from(["rel", "abs"]), _TOLERANCES, max_size=2),
)
def test_approx_holds_exactly_as_pytest_approx(value: Any, expected: Any, options: dict[str, Any]) -> None:
    keywords = "".join(f", {k}={literal(v)}" for k, v in options.items())
    comparison = f"computed() == pytest.approx({literal(expected)}{keywords})"
    source = f"import pytest\n\n\ndef test_it():\n    assert {comparison}\n"
    assert sealed_verdict(source, value) == python_verdict(comparison, computed=lambda: value)


@_SETTINGS
@given(
    value=st.one_of(VALUES, _NUMBERS, st.fractions(), st.decimals()),
    expected=st.one_of(CONSTANTS, _NUMBERS),
    method=st.sampled_from(UNITTEST_METHODS),
    places=st.one_of(st.none(), st.integers(0, 9)),
    delta=st.one_of(st.none(), st.integers(0, 3), st.floats(0, 2, allow_nan=False)),
)
def test_unittest_assertions_hold_exactly_as_unittest(
    value: Any, expected: Any, method: str, places: int | None, delta: float | None
) -> None:
    extra = ""
    if "Almost" in method:
        extra += f", places={places}" if places is not None else ""
        extra += f", delta={literal(delta)}" if delta is not None else ""
    source = textwrap.dedent(f"""
        import unittest

        class TestIt(unittest.TestCase):
            def test_it(self):
                self.{method}(computed(), {literal(expected)}{extra})
    """)
    call = f"case.{method}(computed(), {literal(expected)}{extra})"
    assert sealed_verdict(source, value) == _unittest_holds(call, computed=lambda: value)


def test_the_folded_constants_are_what_python_evaluates() -> None:
    # The expected side of every property above is folded from source; these are the spellings with a trap.
    for source in ["-0.0", "(-0.0 - 0.0j)", "10**20 + 7", "2**53 + 1", "1e999", "-1e999", "(1, )", "0.1 + 0.2"]:
        sealed = seal_module(f"def test_it():\n    assert computed() == {source}\n")
        (seal,) = sealed.seals.values()
        expected = eval(source)
        assert type(seal.expected) is type(expected) and repr(seal.expected) == repr(expected), source


@pytest.mark.parametrize(
    "value",
    [
        True,
        False,
        1,
        0,
        2**53 + 1,
        10**20 + 7,
        10**5000,
        -0.0,
        Decimal("1.10"),
        Decimal("NaN"),
        Decimal("sNaN"),
        Fraction(1, 3),
    ],
    ids=lambda value: type(value).__name__,
)
def test_plain_values_keep_their_type_and_value_through_the_channel(value: Any) -> None:
    again = decode(json.loads(json.dumps(encode(value, convert=plain))))
    assert type(again) is type(value)
    if type(value) is Decimal:  # the total order tells 1.10 from 1.1, and NaN from anything else
        assert again.compare_total(value) == 0
    elif type(value) is float:
        assert repr(again) == repr(value)
    else:
        assert again == value


class _Rational:
    """A rational number of another library (as sympy's Rational): it stands for the exact fraction."""

    numerator, denominator = 1, 3

    def __eq__(self, other: object) -> bool:  # what it would answer is never asked outside
        return True

    __hash__ = object.__hash__


def test_other_libraries_rationals_become_exact_fractions() -> None:
    import numbers

    numbers.Rational.register(_Rational)
    assert decode(encode(_Rational(), convert=plain)) == Fraction(1, 3)
    assert type(decode(encode([_Rational()], convert=plain))[0]) is Fraction


# End to end: the cases that graded wrong, through a real grading run.
HIDDEN = textwrap.dedent("""
    import unittest

    from calc import add, is_pos, ratio


    def test_true():
        assert is_pos(3) is True


    def test_false():
        assert is_pos(-3) is False


    def test_beyond_a_float():
        assert add(10**20, 7) == 100000000000000000007


    def test_beyond_2_53():
        assert add(2**53, 1) == 9007199254740993


    def test_fraction():
        assert ratio(1, 3) == ratio(2, 6)
        assert ratio(1, 3) != 0.3333333333333333


    class TestUnittest(unittest.TestCase):
        def test_is(self):
            self.assertIs(is_pos(1), True)

        def test_equal(self):
            self.assertEqual(add(2**60, 1), 1152921504606846977)
""")
CORRECT = textwrap.dedent("""
    from fractions import Fraction

    def add(a, b):
        return a + b

    def is_pos(x):
        return x > 0

    def ratio(a, b):
        return Fraction(a, b)
""")


@pytest.fixture(scope="module")
def calc_task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("exact")
    (root / "workspace").mkdir()
    (root / "workspace" / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(HIDDEN)
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\nreward = "pass_rate"\n[limits]\ntimeout = "60s"\n')
    return root


@pytest.mark.slow
def test_correct_code_passes_every_exact_assertion(calc_task: Path) -> None:
    verdict = asyncio.run(grade(load_task(calc_task), {"calc.py": CORRECT}))
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict


@pytest.mark.slow
@pytest.mark.parametrize(
    ("wrong", "failing"),
    [
        ("return a + b + (1 if a + b > 2**52 else 0)", {"test_beyond_a_float", "test_beyond_2_53", "test_equal"}),
        ("return float(a + b)", {"test_beyond_a_float", "test_beyond_2_53", "test_equal"}),
    ],
)
def test_integers_off_by_one_beyond_a_float_fail(calc_task: Path, wrong: str, failing: set[str]) -> None:
    code = CORRECT.replace("return a + b", wrong)
    verdict = asyncio.run(grade(load_task(calc_task), {"calc.py": code}))
    failed = {t.id.rpartition("::")[2] for t in verdict.tests if t.outcome.value != "passed"}
    assert failed == failing, verdict


@pytest.mark.slow
def test_truthy_values_are_not_true(calc_task: Path) -> None:
    code = CORRECT.replace("return x > 0", "return 1 if x > 0 else 0")
    verdict = asyncio.run(grade(load_task(calc_task), {"calc.py": code}))
    failed = {t.id.rpartition("::")[2] for t in verdict.tests if t.outcome.value != "passed"}
    assert failed == {"test_true", "test_false", "test_is"}, verdict
