"""The one exception of images (a :class:`rollbox.sandbox.RollboxError`)::

RollboxError
└── ImageError      an image could not be imported, found, unpacked or removed: its one-line message says
                    what is wrong (the offending path, digest or reference) and what to do
"""

from __future__ import annotations

from rollbox.sandbox._errors import RollboxError

__all__ = ["ImageError"]


class ImageError(RollboxError):
    """An image could not be imported, verified, unpacked, found or removed; nothing half-made was left.

    Its message is one line whatever it quotes (a library's error, a tool's output): lines are joined with "; ".
    """

    def __init__(self, message: object = "") -> None:
        lines = [line.strip() for line in str(message).splitlines()]
        super().__init__("; ".join(line for line in lines if line))
