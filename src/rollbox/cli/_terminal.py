"""Text from elsewhere (a candidate's stderr, a job's key, an error's message) made safe to print to a terminal."""

from __future__ import annotations

import re

__all__ = ["printable"]

#: What a terminal may act on rather than show: the C0 controls but tab and newline (ESC starts the ANSI and OSC
#: sequences that recolour, clear, retitle or write the clipboard; CR rewrites the line), DEL, and the C1 controls
#: (U+009B alone is a CSI).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with each control character a terminal could act on shown instead as its escape (ESC as ``\\x1b``),
    so that what a candidate wrote is read by the operator, never run by the operator's terminal.

    >>> printable("\\x1b[2Jok\\tdone\\n")
    '\\\\x1b[2Jok\\tdone\\n'
    """
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", text)
