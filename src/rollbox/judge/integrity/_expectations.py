"""Sealed expectations held against the values a test reported, outside the candidate's process.

Both sides are plain values (``rollbox.tasks._values``: the reported one was encoded strictly in the test's
process, the expected one folded from the test's constants), so no comparison here runs any of the candidate's
code, and each has the meaning the assertion had: Python's ``==``, ``in``, ``<``...; ``pytest.approx``'s
tolerances; unittest's ``assertAlmostEqual`` and ``assertCountEqual``. A comparison Python refuses (``1 < "a"``)
does not hold.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from ._seal import Seal

__all__ = ["holds"]

_APPROX_REL, _APPROX_ABS = 1e-6, 1e-12
_PLAIN: dict[str, Callable[[Any, Any], Any]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "in": lambda value, expected: value in expected,
    "not in": lambda value, expected: value not in expected,
    "contains": lambda value, expected: expected in value,
    "not contains": lambda value, expected: expected not in value,
    "is": operator.is_,
    "is not": operator.is_not,
}


def holds(seal: Seal, value: Any, expected: Any) -> bool:
    """Whether ``value`` (what the test computed) meets the seal's comparison with ``expected``."""
    try:
        if seal.compare in _PLAIN:
            return bool(_PLAIN[seal.compare](value, expected))
        if seal.compare == "approx":
            return _approx(value, expected, seal.options)
        if seal.compare in ("almost", "not almost"):
            return _almost(value, expected, seal.options) == (seal.compare == "almost")
        if seal.compare == "count":
            return _same_elements(value, expected)
    except (TypeError, ValueError, ArithmeticError, RecursionError):
        return False
    raise ValueError(f"unknown comparison {seal.compare!r} in seal {seal.id}")


def _approx(value: Any, expected: Any, options: Mapping[str, float]) -> bool:
    """``value == pytest.approx(expected, **options)``: within tolerance for numbers, element by element for
    lists, tuples and dicts, exactly for anything else."""
    if isinstance(expected, dict):
        return (
            isinstance(value, dict)
            and value.keys() == expected.keys()
            and all(_approx(value[k], expected[k], options) for k in expected)
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(expected)
            and all(_approx(v, e, options) for v, e in zip(value, expected, strict=True))
        )
    numbers = (int, float, complex)
    if type(expected) not in numbers or type(value) not in numbers:
        return bool(value == expected)
    if value == expected:
        return True
    if isinstance(expected, complex) or isinstance(value, complex):
        finite = math.isfinite(abs(expected))
    else:
        finite = math.isfinite(expected)
    if not finite:
        return False
    absolute = options.get("abs", _APPROX_ABS)
    if "rel" not in options and "abs" in options:
        tolerance = absolute
    else:
        tolerance = max(options.get("rel", _APPROX_REL) * abs(expected), absolute)
    return bool(abs(expected - value) <= tolerance)


def _almost(value: Any, expected: Any, options: Mapping[str, float]) -> bool:
    """unittest's ``assertAlmostEqual(value, expected, places=7)`` or ``(..., delta=D)``."""
    if value == expected:
        return True
    difference = abs(value - expected)
    if "delta" in options:
        return bool(difference <= options["delta"])
    return bool(round(difference, int(options.get("places", 7))) == 0)


def _same_elements(value: Any, expected: Any) -> bool:
    """unittest's ``assertCountEqual``: the same elements, each as many times, in any order."""
    first, second = list(value), list(expected)
    try:
        return Counter(first) == Counter(second)
    except TypeError:  # unhashable elements: match them one by one
        for item in first:
            for index, other in enumerate(second):
                if other == item:
                    del second[index]
                    break
            else:
                return False
        return not second
