"""What the scheduler makes once per distinct value, instead of once per job, is exactly what it would make each
time: an exec payload's limits (refused alike, with the same words), and a sandbox configuration's pool key."""

from __future__ import annotations

import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from rollbox.sandbox import Limits, Network
from rollbox.scheduler import pool_key
from rollbox.scheduler._exec_kind import _limits
from rollbox.scheduler._pool_key import _key

_NAMES = [field.name for field in dataclasses.fields(Limits)]
_VALUES = st.one_of(
    st.booleans(),
    st.integers(min_value=-3, max_value=2**63),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1, 1.0, True, 2, 2.0, 64, 64.0, 8 * 2**20, 8.0 * 2**20, 0.5]),
    st.none(),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)
_FIELDS = st.dictionaries(st.one_of(st.sampled_from([*_NAMES, "nope"]), st.text(max_size=4)), _VALUES, max_size=4)


def _made(fields: Any) -> tuple[str, Any]:
    try:
        return "made", Limits(**fields)
    except Exception as exc:
        return type(exc).__name__, str(exc)


def _cached(fields: Any) -> tuple[str, Any]:
    try:
        return "made", _limits(fields)
    except Exception as exc:
        return type(exc).__name__, str(exc)


@settings(max_examples=400, deadline=None)
@given(first=_FIELDS, second=_FIELDS)
def test_limits_made_once_are_those_made_each_time(first: dict[str, Any], second: dict[str, Any]) -> None:
    """Whatever came before (a value equal to this one but of another type: 1 and 1.0 and True), the limits made
    from a payload's fields are those ``Limits(**fields)`` makes, with their types, or the same refusal."""
    for fields in (first, second, first):
        got, expected = _cached(fields), _made(fields)
        assert got == expected
        if got[0] == "made":
            assert [type(getattr(got[1], n)) for n in _NAMES] == [type(getattr(expected[1], n)) for n in _NAMES]


def test_refusals_of_what_is_not_fields_are_limits_own() -> None:
    for fields in ("x", None, [("pids", 4)], {1: 2}):
        assert _cached(fields) == _made(fields)


@settings(max_examples=200, deadline=None)
@given(
    timeout=st.sampled_from([1, 1.0, 2.5, 10]),
    memory=st.sampled_from([8 * 2**20, 8.0 * 2**20, 2**30]),
    network=st.sampled_from(["none", "loopback", Network.NONE]),
    workspace=st.sampled_from([None, "/w", "/x"]),
    env=st.sampled_from([None, {}, {"A": "1"}]),
)
def test_a_pool_key_made_once_is_the_one_made_each_time(
    timeout: float, memory: int, network: str, workspace: str | None, env: dict[str, str] | None
) -> None:
    limits = Limits(timeout_s=timeout, memory_bytes=memory)
    expected = _key(limits, Network(network), None, workspace, env)
    assert pool_key(limits, network, workspace=workspace, env=env) == expected
    assert pool_key(limits, network, workspace=workspace, env=env) == expected
