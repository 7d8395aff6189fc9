"""Strict values: only exact builtin types cross the sandbox boundary, and they come back identical."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollbox.tasks._cases import FunctionCase
from rollbox.tasks._values import decode, encode


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -7,
        2**70,
        1.5,
        "text",
        b"\x00\xff",
        1 + 2j,
        [1, [2, (3, 4)]],
        (1, "a"),
        {"a": 1},
        {1: "one", (2, 3): [4]},
        {"$tuple": 1},
        {1, 2, 3},
        frozenset({"x"}),
        float("inf"),
        -math.inf,
        complex(math.inf, -math.inf),
    ],
)
def test_round_trip_through_json(value: Any) -> None:
    again = decode(json.loads(json.dumps(encode(value))))
    assert again == value and type(again) is type(value)


def test_nan_survives() -> None:
    assert math.isnan(decode(json.loads(json.dumps(encode(float("nan"))))))
    again = decode(json.loads(json.dumps(encode(complex(math.nan, 2.0)))))
    assert type(again) is complex and math.isnan(again.real) and again.imag == 2.0


class AlwaysEqual:
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = object.__hash__


class SneakyInt(int):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


@pytest.mark.parametrize("value", [AlwaysEqual(), {"k": AlwaysEqual()}, [1, AlwaysEqual()], object()])
def test_objects_that_are_not_builtin_values_are_refused(value: Any) -> None:
    with pytest.raises(TypeError, match="not a plain builtin value"):
        encode(value)


def test_subclasses_become_their_base_type_leaving_their_overrides_behind() -> None:
    assert encode(SneakyInt(3)) == 3 and type(encode(SneakyInt(3))) is int
    assert [(type(v), v) for v in decode(encode([1, SneakyInt(2)]))] == [(int, 1), (int, 2)]
    assert decode(encode(Counter("aab"))) == {"a": 2, "b": 1}
    assert type(decode(encode(Counter("aab")))) is dict
    plain = decode(encode(SneakyInt(3)))
    assert type(plain) is int and plain == 3  # the value compared outside is the plain 3


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(ValueError, match="too deeply"):
        encode(nested(200, lambda v: [v]))


def nested(depth: int, wrap: Any) -> Any:
    data: Any = 0
    for _ in range(depth):
        data = wrap(data)
    return data


def test_the_deepest_value_encode_makes_decodes() -> None:
    for wrap in (lambda v: [v], lambda v: (v,), lambda v: {"k": v}, lambda v: {1: v}, lambda v: frozenset({(v,)})):
        value: Any = 0
        data = encode(value)
        while True:
            try:
                data = json.loads(json.dumps(encode(wrap(value))))
            except ValueError:
                break
            value = wrap(value)
        assert decode(data) == value


MALFORMED = [
    {"$complex": []},
    {"$complex": [1]},
    {"$complex": [1, 2, 3]},
    {"$complex": "12"},
    {"$complex": [True, 0]},
    {"$complex": ["1", 0]},
    {"$complex": [[1], 0]},
    {"$complex": [{"$float": "nan"}, None]},
    {"$complex": [10**400, 0]},
    {"$tuple": 1},
    {"$tuple": "ab"},
    {"$tuple": {"a": 1}},
    {"$set": None},
    {"$set": [[1]]},
    {"$set": [{"a": 1}]},
    {"$frozenset": [{"$set": []}]},
    {"$frozenset": [{"$tuple": [[1]]}]},
    {"$dict": 1},
    {"$dict": "ab"},
    {"$dict": {"ab": 1}},
    {"$dict": [1]},
    {"$dict": [[1]]},
    {"$dict": [[1, 2, 3]]},
    {"$dict": [[[1], 2]]},
    {"$dict": [[{"$dict": []}, 2]]},
    {"$bytes": 5},
    {"$bytes": ["AA=="]},
    {"$bytes": "not base64!"},
    {"$bytes": "AAA"},
    {"$bytes": "\u00e9"},
    {"$float": "1.5"},
    {"$float": 1.5},
    {"$float": ["nan"]},
    {"$object": "os.system"},
    {"$int": 5},
    {"$int": "xyz"},
    {"$int": "f" * 100_001},
    {"$decimal": 1},
    {"$decimal": "one"},
    {"$decimal": "1" * 100_001},
    {"$fraction": [1, 0]},
    {"$fraction": [1, -2]},
    {"$fraction": [1]},
    {"$fraction": [1.5, 2]},
    {"$fraction": [True, 2]},
    {"$fraction": "1/2"},
    {"k": {"$tuple": 1}},
    [1, {"$set": [[]]}],
    nested(101, lambda v: [v]),
    nested(101, lambda v: {"$tuple": [v]}),
    nested(101, lambda v: {"k": v}),
    nested(101, lambda v: {"$dict": [[0, v]]}),
    nested(500, lambda v: [v]),
]


@pytest.mark.parametrize("data", MALFORMED, ids=lambda d: json.dumps(d)[:40])
def test_malformed_data_raises_value_error_and_nothing_else(data: Any) -> None:
    # Decoded outside the candidate's process from what that process reported: any other exception would escape
    # the judge, which reports it as its own failure (infra_error).
    with pytest.raises(ValueError, match=r"malformed value tag|nested too deeply"):
        decode(json.loads(json.dumps(data)))


_TAGS = ["$tuple", "$set", "$frozenset", "$dict", "$float", "$bytes", "$complex", "$int", "$decimal", "$fraction", "$x"]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4), inner, max_size=2)
        | st.builds(lambda tag, v: {tag: v}, st.sampled_from(_TAGS), inner)
    ),
    max_leaves=12,
)


@settings(max_examples=500, deadline=None)
@given(_JSON)
def test_any_json_decodes_or_raises_value_error(data: Any) -> None:
    # The candidate's process writes what the judge decodes: whatever it wrote, only ValueError may come out, and
    # what does decode encodes again to the same value.
    try:
        value = decode(data)
    except ValueError:
        return
    again = decode(json.loads(json.dumps(encode(value))))
    assert type(again) is type(value)


_DECIMALS = st.sampled_from(["sNaN", "-sNaN", "NaN", "Infinity", "1e999999999", "-1e-999999999", "1.5", "0"])
_VALUES = st.recursive(
    _JSON | st.builds(lambda text: {"$decimal": text}, _DECIMALS),
    lambda inner: st.lists(inner, max_size=3) | st.builds(lambda v: {"$tuple": v}, st.lists(inner, max_size=2)),
    max_leaves=8,
)


@settings(max_examples=500, deadline=None)
@given(_VALUES, _VALUES, st.sampled_from([None, 0.5]))
def test_holding_any_reported_value_against_any_expectation_gives_a_verdict(
    reported: Any, expected: Any, tolerance: float | None
) -> None:
    # What the candidate's process reported is compared outside it: a comparison that raised there (a signaling
    # Decimal NaN compared at all, Decimal arithmetic past its range) escaped the judge as its own failure.
    try:
        value, wanted = decode(reported), decode(expected)
    except ValueError:
        return
    if tolerance is not None and type(wanted) not in (int, float, complex):
        return  # the cases file refuses "close" on anything but a number
    case = FunctionCase([], {}, wanted, compare="close" if tolerance else "==", tolerance=tolerance)
    assert case.matches(value) in (True, False)


def test_a_signaling_nan_matches_nothing_and_raises_nothing() -> None:
    snan = decode({"$decimal": "sNaN"})
    assert not FunctionCase([], {}, 3).matches(snan)
    assert not FunctionCase([], {}, [1, 2]).matches([snan, 2])
    assert not FunctionCase([], {}, 1.5, compare="close", tolerance=0.1).matches(snan)
