"""What a runtime layer holds, as data, and the content key it is stored under."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ._python import Interpreter

__all__ = ["RuntimeSpec"]

#: Bumped whenever a layer's layout or build changes, so that no layer built the old way is taken for a new one.
_FORMAT = 1


def _normalized(line: str) -> str:
    """A requirement as packaging spells it, its project name canonical (``Requests`` is ``requests``).

    Raises:
        ValueError: the line is a pip option or no requirement at all.
    """
    if not isinstance(line, str) or not line.strip():
        raise ValueError(f"requirements: expected a requirement line such as 'attrs==23.2.0', got {line!r}")
    if line.lstrip().startswith("-"):
        raise ValueError(
            f"requirements: {line!r} is a pip option; list the packages themselves (no -r, -e, --index-url: the "
            "index is the machine's uv configuration, UV_INDEX_URL and the like)"
        )
    try:
        requirement = Requirement(line)
    except InvalidRequirement as exc:
        raise ValueError(f"requirements: {line!r} is not a valid requirement ({exc})") from None
    requirement.name = canonicalize_name(requirement.name)
    return str(requirement)


@dataclass(frozen=True, kw_only=True)
class RuntimeSpec:
    """The Python and packages a runtime layer holds.

    Requirements are resolved together, so their order and spelling do not matter: they are kept normalized
    (canonical project names), without duplicates, sorted. Two specs that normalize alike share a layer.

    Attributes:
        python: The Python version (``"3.12"``, or exactly ``"3.12.1"``), among those installed on this machine
            (see :func:`find_python`); ``None``: the one rollbox runs on.
        requirements: pip requirement lines (``"attrs==23.2.0"``, ``"numpy>=1.26"``).
        allow_sdists: Let the build install packages published only as source distributions. Off by default:
            building one runs the package's own build code on the host, as root, outside every sandbox; only
            wheels (archives that installing merely unpacks) are taken unless this is on.

    Raises:
        ValueError: on construction, a malformed version or requirement (the message says which and why).
    """

    python: str | None = None
    requirements: tuple[str, ...] = ()
    allow_sdists: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.requirements, str):
            raise ValueError(f"requirements: expected a sequence of lines, got the string {self.requirements!r}")
        object.__setattr__(self, "requirements", tuple(sorted({_normalized(line) for line in self.requirements})))

    def key(self, interpreter: Interpreter) -> str:
        """The layer's name in a store: the sha256 (hex) of this spec resolved against ``interpreter`` (the one
        :func:`find_python` picks for :attr:`python`) and this machine's architecture, as canonical JSON."""
        resolved = {
            "format": _FORMAT,
            "machine": os.uname().machine,
            "python": {"version": interpreter.version, "executable": str(interpreter.executable)},
            "requirements": list(self.requirements),
            "sdists": self.allow_sdists,
        }
        return hashlib.sha256(json.dumps(resolved, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
