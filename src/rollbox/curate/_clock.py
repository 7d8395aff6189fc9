"""A moved clock for the graded process: libfaketime (Debian's ``libfaketime``), preloaded inside the sandbox.

A test that compares ``date.today()`` with a fixed date passes today and fails some day after: a time bomb, which
gives a correct solution a wrong reward once it goes off. Validation grades the reference with the clock moved
:data:`CLOCK_OFFSETS` (ten years and a quarter ahead, and as far back: a new year, month, day of the month and day
of the week). The offsets are fixed, so the same task gets the same decision on every machine and every day but
those where a bomb's own date falls between now and now plus the offset.

The library is loaded by the dynamic linker of every process the sandbox starts (``LD_PRELOAD``), from the host's
``/usr/lib``, which the sandbox's root shows read-only. Only wall-clock time moves: monotonic clocks (timeouts,
durations) and files' times stay as they are.
"""

from __future__ import annotations

import glob

from rollbox.sandbox import RollboxError

__all__ = ["CLOCK_OFFSETS", "ClockUnavailable", "clock_env", "libfaketime"]

#: The clock's offsets, as libfaketime reads them: 3750 days (about ten years and three months) each way.
CLOCK_OFFSETS = ("+3750d", "-3750d")

#: Where Debian and Ubuntu install it (one directory per architecture), and where a build from source does.
_PLACES = (
    "/usr/lib/*/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
    "/usr/local/lib/faketime/libfaketime.so.1",
)


class ClockUnavailable(RollboxError):
    """Validation was asked to move the clock, and libfaketime is not installed here."""


def libfaketime() -> str | None:
    """The path of libfaketime's library here, or ``None``."""
    for pattern in _PLACES:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    return None


def clock_env(offset: str) -> dict[str, str]:
    """The variables that move a process's wall clock by ``offset``.

    Raises:
        ClockUnavailable: libfaketime is not installed.
    """
    library = libfaketime()
    if library is None:
        raise ClockUnavailable(
            "moving the clock needs libfaketime (apt-get install libfaketime); "
            "or turn that check off (rollbox validate --no-clock, ValidateOptions(clock=False))"
        )
    return {
        "LD_PRELOAD": library,
        "FAKETIME": offset,
        # Timeouts and durations keep counting real time; files' times stay true (a faked stat would make every
        # compiled module look stale, and an interpreter compile them all again).
        "DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "NO_FAKE_STAT": "1",
    }
