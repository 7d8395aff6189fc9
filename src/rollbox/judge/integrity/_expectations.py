"""Sealed expectations held against the values a test reported, outside the candidate's process.

Both sides are plain values (``rollbox.tasks._values``: the reported one was encoded exactly in the test's
process, the expected one folded from the test's constants), so no comparison here runs any of the candidate's
code, and each is made by the very code the assertion would have run: Python's own ``==``, ``in``, ``<``...,
``pytest.approx`` itself, unittest's own ``assertAlmostEqual`` and ``assertCountEqual``. A comparison that raises
(``1 < "a"``) does not hold, as the assertion would not have.
"""

from __future__ import annotations

import operator
import unittest
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from ._seal import Seal

__all__ = ["holds"]

_Compare = Callable[[Any, Any, Mapping[str, Any]], bool]
#: unittest's comparisons are methods of a test case; any one serves.
_CASE = unittest.TestCase()


def _unittest(method: str) -> _Compare:
    def compare(value: Any, expected: Any, options: Mapping[str, Any]) -> bool:
        try:
            getattr(_CASE, method)(value, expected, **options)
        except _CASE.failureException:
            return False
        return True

    return compare


def _plain(op: Callable[[Any, Any], Any]) -> _Compare:
    return lambda value, expected, _options: bool(op(value, expected))


_COMPARE: dict[str, _Compare] = {
    "==": _plain(operator.eq),
    "!=": _plain(operator.ne),
    "<": _plain(operator.lt),
    "<=": _plain(operator.le),
    ">": _plain(operator.gt),
    ">=": _plain(operator.ge),
    "in": _plain(lambda value, expected: value in expected),
    "not in": _plain(lambda value, expected: value not in expected),
    "contains": _plain(lambda value, expected: expected in value),
    "not contains": _plain(lambda value, expected: expected not in value),
    "is": _plain(operator.is_),
    "is not": _plain(operator.is_not),
    "approx": lambda value, expected, options: bool(value == pytest.approx(expected, **options)),
    "almost": _unittest("assertAlmostEqual"),
    "not almost": _unittest("assertNotAlmostEqual"),
    "count": _unittest("assertCountEqual"),
}


def holds(seal: Seal, value: Any, expected: Any) -> bool:
    """Whether ``value`` (what the test computed) meets the seal's comparison with ``expected``.

    Raises:
        ValueError: the seal names a comparison there is none of.
    """
    compare = _COMPARE.get(seal.compare)
    if compare is None:
        raise ValueError(f"unknown comparison {seal.compare!r} in seal {seal.id}")
    try:
        return compare(value, expected, seal.options)
    except (TypeError, ValueError, ArithmeticError, RecursionError):
        return False
