"""The ``rollbox`` command line: ``exec``, ``doctor``, ``demo``."""

from ._main import main

__all__ = ["main"]
