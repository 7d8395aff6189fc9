"""The one exception of images (a :class:`rollbox.sandbox.RollboxError`)::

RollboxError
└── ImageError      an image could not be imported, found, unpacked or removed: its one-line message says
                    what is wrong (the offending path, digest or reference) and what to do
"""

from __future__ import annotations

from rollbox.sandbox._errors import RollboxError

__all__ = ["ImageError"]


class ImageError(RollboxError):
    """An image could not be imported, verified, unpacked, found or removed; nothing half-made was left."""
