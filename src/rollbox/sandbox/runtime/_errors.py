"""Exceptions of runtime layers (each a :class:`rollbox.sandbox.RollboxError`)::

RollboxError
├── PythonNotFound      no interpreter of the version asked for is installed on this machine
└── LayerBuildError     a layer's build failed (a requirement that does not exist, a package with no wheel
                        for this Python, no index to reach; ``log`` holds uv's own output), or the store
                        could not write or read it (its disk full: ``log`` is empty)
"""

from __future__ import annotations

from pathlib import Path

from rollbox.sandbox._errors import RollboxError

__all__ = ["LayerBuildError", "PythonNotFound"]


class PythonNotFound(RollboxError):
    """No Python of the version asked for is installed on this machine (the message lists those that are)."""


class LayerBuildError(RollboxError):
    """A runtime layer could not be built (or its store could not be written: a full disk); nothing of it was left
    where a sandbox could use it.

    Attributes:
        log: What uv printed (its resolver's explanation, as a rule).
        log_path: Where that log was kept, for ``rollbox env`` and for a later look.
    """

    def __init__(self, message: str, *, log: str, log_path: Path | None) -> None:
        super().__init__(message)
        self.log = log
        self.log_path = log_path
