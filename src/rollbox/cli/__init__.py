"""The ``rollbox`` command line: ``exec``, ``grade``, ``eval``, ``doctor``, ``demo``."""

from ._main import main

__all__ = ["main"]
