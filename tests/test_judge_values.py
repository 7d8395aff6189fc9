"""Strict values: only exact builtin types cross the sandbox boundary, and they come back identical."""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any

import pytest

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
    ],
)
def test_round_trip_through_json(value: Any) -> None:
    again = decode(json.loads(json.dumps(encode(value))))
    assert again == value and type(again) is type(value)


def test_nan_survives() -> None:
    assert math.isnan(decode(json.loads(json.dumps(encode(float("nan"))))))


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
    assert decode(encode([1, SneakyInt(2)])) == [1, 2]
    assert decode(encode(Counter("aab"))) == {"a": 2, "b": 1}
    assert type(decode(encode(Counter("aab")))) is dict
    assert decode(encode(SneakyInt(3))) != 4  # the value compared outside is the plain 3


def test_deep_nesting_and_unknown_tags_are_refused() -> None:
    deep: list[Any] = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(ValueError, match="too deeply"):
        encode(deep)
    with pytest.raises(ValueError, match="unknown or malformed value tag"):
        decode({"$object": "os.system"})
