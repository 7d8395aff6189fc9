"""Numbers on the command line: argparse types that take a value only in its range, so that a negative count, a
port past 65535 or a NaN timeout is one line naming the option (never a traceback from deep inside, never a value
used as given)."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from rollbox.sandbox import parse_size
from rollbox.scheduler import RUN_ID_MAX, RUN_ID_PATTERN

__all__ = ["PORT", "byte_size", "non_negative_days", "positive_seconds", "run_name", "share", "whole"]


def whole(low: int, high: int) -> Callable[[str], int]:
    """A type for a whole number from ``low`` to ``high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be a whole number from {low:,} to {high:,}, got {text!r:.40}")
        return value

    return parse


def _finite(text: str, what: str, accept: Callable[[float], bool]) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not accept(value):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r:.40}")
    return value


def byte_size(text: str) -> int:
    """A type for a size: bytes, or with a unit (``256M``, ``16G``), as :func:`rollbox.sandbox.parse_size` reads it."""
    try:
        return parse_size(text)
    except ValueError as exc:  # argparse shows only ArgumentTypeError messages
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_seconds(text: str) -> float:
    """A type for a duration in seconds: a finite number above 0."""
    return _finite(text, "a number of seconds above 0", lambda v: v > 0)


def non_negative_days(text: str) -> float:
    """A type for a number of days: finite, 0 or more."""
    return _finite(text, "a number of days, 0 or more", lambda v: v >= 0)


def share(text: str) -> float:
    """A type for a share: a number from 0 to 1."""
    return _finite(text, "a number from 0 to 1", lambda v: 0 <= v <= 1)


def run_name(text: str) -> str:
    """A type for a run id: a plain name, as the service takes one (it names a directory under HOME/runs)."""
    if len(text) > RUN_ID_MAX or not re.fullmatch(RUN_ID_PATTERN, text) or not text.isprintable():
        raise argparse.ArgumentTypeError(
            f"must be a plain name of at most {RUN_ID_MAX} characters (no '/', no leading '.'), got {text!r:.40}"
        )
    return text


#: A TCP port (0: any free one).
PORT = whole(0, 65535)
