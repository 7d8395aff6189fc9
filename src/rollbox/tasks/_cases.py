"""Cases files: the calls a ``function`` task makes of the candidate, and the inputs a ``stdio`` task feeds it, each
with what it must give. One case a line of JSON; part of the task format, read by the loader (so that a
malformed file is refused when the task loads) and by the judge.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, cast, get_args

from ._errors import TaskFormatError
from ._values import decode, encode

__all__ = [
    "APPLY",
    "COMPARE",
    "Apply",
    "Compare",
    "FunctionCase",
    "StdioCase",
    "load_function_cases",
    "load_stdio_cases",
]

C = TypeVar("C")

#: What the driver may do to a returned value, inside the candidate's process, before it is reported: what
#: ``assert f(x)`` and ``tuple(f(x)) == ...`` do to it there. Only these builtins, taken before the candidate's
#: code runs.
Apply = Literal["bool", "tuple"]
APPLY: tuple[Apply, ...] = get_args(Apply)
#: How a reported value is held against the expected one, outside the candidate's process.
Compare = Literal["==", "is", "close"]
COMPARE: tuple[Compare, ...] = get_args(Compare)


@dataclass(frozen=True)
class FunctionCase:
    """One call of the candidate's function and what its result must be.

    A cases file spells it ``{"args": [...], "kwargs": {...}, "expected": ...}``, optionally with ``"apply"``
    (one of :data:`APPLY`) and ``"compare"``: ``"=="`` (the default), ``"is"`` (``expected`` is ``null``,
    ``true`` or ``false``: the very object) or ``"close"`` with ``"tolerance"`` (``abs(value - expected) <
    tolerance``).
    """

    args: list[Any]
    kwargs: dict[str, Any]
    expected: Any
    apply: Apply | None = None
    compare: Compare = "=="
    tolerance: float | None = None

    def inputs(self) -> dict[str, Any]:
        """What the driver gets of this case: never the expected value."""
        sent = {"args": encode(self.args), "kwargs": encode(self.kwargs)}
        return sent if self.apply is None else {**sent, "apply": self.apply}

    def matches(self, value: Any) -> bool:
        """Whether ``value``, a decoded plain value (so no candidate code runs here), meets the expectation. A
        comparison that raises (a signaling ``Decimal`` NaN compared at all, ``Decimal`` arithmetic past its
        exponent range, ``1 - "a"``) does not hold, as the assertion would not have."""
        if self.compare == "is":
            return value is self.expected
        try:
            if self.compare == "close":
                assert self.tolerance is not None
                return bool(abs(value - self.expected) < self.tolerance)
            return bool(value == self.expected)
        except (TypeError, ValueError, ArithmeticError, RecursionError):
            return False


def _function_case(record: Any) -> FunctionCase:
    if not isinstance(record, dict):
        raise ValueError("expected an object with args (a list), kwargs (an object) and expected")
    unknown = set(record) - {"args", "kwargs", "expected", "apply", "compare", "tolerance"}
    if unknown:
        raise ValueError(
            f"unknown key(s) {', '.join(sorted(unknown))}: a case has args, kwargs, expected, "
            "and optionally apply, compare and tolerance"
        )
    args, kwargs = decode(record.get("args", [])), decode(record.get("kwargs", {}))
    if not isinstance(args, list) or not isinstance(kwargs, dict) or "expected" not in record:
        raise ValueError("expected an object with args (a list), kwargs (an object) and expected")
    apply, compare, tolerance = record.get("apply"), record.get("compare", "=="), record.get("tolerance")
    expected = decode(record["expected"])
    if apply is not None and apply not in APPLY:
        raise ValueError(f"apply must be one of {', '.join(APPLY)}, not {apply!r}")
    if compare not in COMPARE:
        raise ValueError(f"compare must be one of {', '.join(COMPARE)}, not {compare!r}")
    if compare == "is" and not (expected is None or type(expected) is bool):
        raise ValueError('compare "is" needs expected null, true or false')
    if (compare == "close") != (tolerance is not None):
        raise ValueError('tolerance goes with compare "close", and compare "close" needs one')
    if tolerance is not None and not (type(tolerance) in (int, float) and 0 < tolerance < math.inf):
        raise ValueError(f"tolerance must be a positive number, not {tolerance!r}")
    if compare == "close" and type(expected) not in (int, float, complex):
        raise ValueError(f'compare "close" needs a number expected, not {expected!r}')
    return FunctionCase(args, kwargs, expected, cast(Apply | None, apply), cast(Compare, compare), tolerance)


@dataclass(frozen=True)
class StdioCase:
    """One stdio case: what the command reads, and what it should print."""

    input: str
    output: str


def _stdio_case(record: Any) -> StdioCase:
    if not (
        isinstance(record, dict) and isinstance(record.get("input"), str) and isinstance(record.get("output"), str)
    ):
        raise ValueError("expected an object with input and output strings")
    return StdioCase(record["input"], record["output"])


def load_function_cases(path: Path) -> tuple[FunctionCase, ...]:
    """The cases of a function task's cases file (see :class:`FunctionCase`), read once per version of the file.

    Raises:
        TaskFormatError: the file cannot be read as UTF-8 text, holds no case, or a line is not a case.
    """
    return _load(path, _function_case, "function")


def load_stdio_cases(path: Path) -> tuple[StdioCase, ...]:
    """The cases of a stdio task's cases file (``{"input": "...", "output": "..."}`` a line), read once per
    version of the file.

    Raises:
        TaskFormatError: the file cannot be read as UTF-8 text, holds no case, or a line is not a case.
    """
    return _load(path, _stdio_case, "stdio")


def _load(path: Path, parse: Callable[[Any], C], kind: str) -> tuple[C, ...]:
    try:
        st = path.stat()
    except OSError as exc:
        raise TaskFormatError(path, f"cannot read the cases: {exc.strerror}") from None
    return _read(str(path), st.st_mtime_ns, st.st_size, parse, kind)


@functools.lru_cache(maxsize=1024)  # a task is loaded, then graded, many times
def _read(path: str, _mtime_ns: int, _size: int, parse: Callable[[Any], C], kind: str) -> tuple[C, ...]:
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(Path(path), f"cannot read the cases: {exc}") from None
    cases: list[C] = []
    # Only \n ends a line: a \r between a row's tokens is JSON whitespace, and U+2028 may stand in its strings.
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise TaskFormatError(Path(path), f"line {number}: not JSON ({exc})") from None
        try:
            cases.append(parse(record))
        except ValueError as exc:
            raise TaskFormatError(Path(path), f"line {number}: {exc}") from None
    if not cases:
        raise TaskFormatError(Path(path), f"no cases: a {kind} task needs at least one")
    return tuple(cases)
