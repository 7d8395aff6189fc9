"""Numbers on the command line: argparse types that take a value only in its range, so that a negative count, a
port past 65535 or a NaN timeout is one line naming the option (never a traceback from deep inside, never a value
used as given)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["PORT", "non_negative_days", "positive_seconds", "share", "whole"]


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


def positive_seconds(text: str) -> float:
    """A type for a duration in seconds: a finite number above 0."""
    return _finite(text, "a number of seconds above 0", lambda v: v > 0)


def non_negative_days(text: str) -> float:
    """A type for a number of days: finite, 0 or more."""
    return _finite(text, "a number of days, 0 or more", lambda v: v >= 0)


def share(text: str) -> float:
    """A type for a share: a number from 0 to 1."""
    return _finite(text, "a number from 0 to 1", lambda v: 0 <= v <= 1)


#: A TCP port (0: any free one).
PORT = whole(0, 65535)
