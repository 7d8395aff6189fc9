"""Strict values: only exact builtin types cross the sandbox boundary, and they come back identical."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from rollbox.judge._values import decode, encode


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


@pytest.mark.parametrize("value", [AlwaysEqual(), SneakyInt(3), [1, SneakyInt(2)], {"k": AlwaysEqual()}, object()])
def test_anything_but_exact_builtins_is_refused(value: Any) -> None:
    with pytest.raises(TypeError, match="not a plain builtin value"):
        encode(value)


def test_deep_nesting_and_unknown_tags_are_refused() -> None:
    deep: list[Any] = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(ValueError, match="too deeply"):
        encode(deep)
    with pytest.raises(ValueError, match="unknown or malformed value tag"):
        decode({"$object": "os.system"})
