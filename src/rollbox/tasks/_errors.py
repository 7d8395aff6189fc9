"""The error a malformed task raises."""

from __future__ import annotations

from pathlib import Path

from rollbox.sandbox import RollboxError

__all__ = ["TaskFormatError"]


class TaskFormatError(RollboxError):
    """A task directory is malformed. The message names the file, the key, what was expected and what was found."""

    def __init__(self, file: Path, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file = file
