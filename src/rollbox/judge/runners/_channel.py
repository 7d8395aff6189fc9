"""What the judge shares with the drivers it runs inside grading sandboxes: their environment and their channel.

Each driver (function, check, pytest plugin) writes one JSON object a line to a duplicate of the original stdout
taken before the candidate's code is imported. Anything on that channel that is not such an object is a forgery.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["GRADING_ENV", "ForgedChannel", "read_records"]

#: Deterministic runs: the same candidate gets the same outputs every time.
GRADING_ENV = {"PYTHONHASHSEED": "0", "TZ": "UTC", "PYTHONDONTWRITEBYTECODE": "1"}


class ForgedChannel(Exception):
    """The channel carried something no driver writes; the message says what."""


def read_records(stdout: str, *, truncated: bool) -> list[dict[str, Any]]:
    """The records a driver wrote.

    Raises:
        ForgedChannel: a line is not a JSON object, or cannot be parsed at all (nested too deeply, say).
    """
    lines = stdout.splitlines()
    if truncated and lines:
        lines.pop()  # cut at the output limit: the last record may be partial, and is not a forgery
    records: list[dict[str, Any]] = []
    for line in lines:
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            record = None
        if not isinstance(record, dict):
            raise ForgedChannel(f"the result channel carried something that is not a report: {line[:200]!r}")
        records.append(record)
    return records
