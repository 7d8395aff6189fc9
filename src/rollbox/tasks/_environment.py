"""The runtime a task's commands run in, as data: ``[environment]`` in task.toml, merged with
environment/requirements.txt. Nothing here builds or runs anything: the runtime-layer store builds a layer from an
:class:`Environment` and keys it by :attr:`Environment.layer_key`.

In task.toml::

    [environment]
    python = "3.11"                       # MAJOR.MINOR; absent: the interpreter rollbox runs on
    requirements = ["numpy==1.26.4"]      # pip requirement lines
    env = { DATA_DIR = "/workspace/data" }  # variables for every command of the task (solving and grading)
    image = "python:3.12"                 # the root its sandboxes run on (see below); absent: the host's /usr

and environment/requirements.txt: one requirement a line, ``#`` comments; its lines come after the table's.

``image`` names an image: a reference or digest in the image store (``rollbox images list``), or the path of an
OCI image layout directory or a docker-save / OCI archive, relative to the task's directory. The judge resolves
it (``rollbox.judge.task_image``); here it is only a string.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ._errors import TaskFormatError

__all__ = ["Environment", "parse_environment", "read_requirements"]

_PYTHON = re.compile(r"^3\.\d{1,2}$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Variables the judge sets for its own channel; a task may not set or shadow them.
_RESERVED_PREFIX = "ROLLBOX_"
_KEYS = {"python", "requirements", "env", "image"}


@dataclass(frozen=True, kw_only=True)
class Environment:
    """What a task's commands run with: an interpreter, packages, environment variables.

    Raises:
        ValueError: on construction, a malformed version, requirement or variable (the message says which).
    """

    #: The Python version, ``MAJOR.MINOR`` (``"3.11"``); ``None`` means the interpreter rollbox runs on.
    python: str | None = None
    #: pip requirement lines (``"numpy==1.26.4"``, ``"requests>=2"``), in the order given, duplicates dropped.
    requirements: tuple[str, ...] = ()
    #: Environment variables for the task's commands.
    env: Mapping[str, str] = field(default_factory=dict, hash=False)
    #: The image the task's sandboxes run on, as written (a store reference or digest, or a path relative to the
    #: task's directory); ``None`` means the host's system directories.
    image: str | None = None

    def __post_init__(self) -> None:
        if self.image is not None and (
            not isinstance(self.image, str) or not self.image.strip() or any(c in self.image for c in "\0\n")
        ):
            raise ValueError(f"image: expected an image reference (name:tag, sha256:...) or a path, got {self.image!r}")
        if self.python is not None and not (isinstance(self.python, str) and _PYTHON.match(self.python)):
            hint = " (quote it: as a number, 3.10 reads as 3.1)" if isinstance(self.python, float) else ""
            raise ValueError(f"python: expected a version MAJOR.MINOR such as '3.11', got {self.python!r}{hint}")
        requirements = tuple(dict.fromkeys(self.requirements))
        for line in requirements:
            _check_requirement(line)
        object.__setattr__(self, "requirements", requirements)
        for name, value in self.env.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"env: {name!r} is not a variable name (letters, digits and _, not first a digit)")
            if name.startswith(_RESERVED_PREFIX):
                raise ValueError(f"env: {name} is reserved: names starting with ROLLBOX_ are the judge's own")
            if not isinstance(value, str) or "\0" in value:
                raise ValueError(f"env {name}: expected a string without NUL characters, got {value!r}")
        object.__setattr__(self, "env", dict(sorted(self.env.items())))

    @property
    def is_default(self) -> bool:
        """Whether this is the plain runtime: rollbox's own interpreter, no packages (no layer to build)."""
        return self.python is None and not self.requirements

    def layer_spec(self) -> dict[str, Any]:
        """What a runtime layer built for this environment contains, canonically: the Python version (``None``
        resolved to the running interpreter's ``MAJOR.MINOR``) and the requirements, each normalized by
        ``packaging`` and sorted (pip resolves them together, so their order changes nothing). ``env`` is not
        part of it: variables are set when a command starts, never built into a layer, so tasks that differ only
        in them share one layer."""
        python = self.python or f"{sys.version_info.major}.{sys.version_info.minor}"
        return {"python": python, "requirements": sorted({_normalized(line) for line in self.requirements})}

    @property
    def layer_key(self) -> str:
        """The sha256 (hex) of :meth:`layer_spec` as canonical JSON (sorted keys, no spaces): the name of the layer
        this environment needs in the layer store. Stable across runs, machines with the same Python, and the
        order or spelling of equivalent requirement lines."""
        canonical = json.dumps(self.layer_spec(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def _normalized(line: str) -> str:
    """A requirement as packaging spells it, with its project name canonical (``Requests`` is ``requests``)."""
    requirement = Requirement(line)
    requirement.name = canonicalize_name(requirement.name)
    return str(requirement)


def _check_requirement(line: object) -> None:
    if not isinstance(line, str) or not line.strip():
        raise ValueError(f"requirements: expected a pip requirement line such as 'numpy==1.26.4', got {line!r}")
    if line.lstrip().startswith("-"):
        raise ValueError(
            f"requirements: {line!r} is a pip option; only requirements are supported (no -r, -e, --index-url: "
            "list the packages themselves)"
        )
    try:
        Requirement(line)
    except InvalidRequirement as exc:
        raise ValueError(f"requirements: {line!r} is not a valid requirement ({exc})") from None


def read_requirements(path: Path) -> tuple[str, ...]:
    """The requirement lines of a requirements file: blank lines and ``#`` comments dropped.

    Raises:
        TaskFormatError: the file cannot be read as UTF-8, or a line is not a requirement (the message names the
            line number).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read it as UTF-8 text ({exc}); save it as UTF-8") from None
    lines: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        try:
            _check_requirement(line)
        except ValueError as exc:
            raise TaskFormatError(path, f"line {number}: {str(exc).removeprefix('requirements: ')}") from None
        lines.append(line)
    return tuple(lines)


def parse_environment(file: Path, table: Mapping[str, Any], requirements_file: Path | None) -> Environment:
    """The :class:`Environment` of ``[environment]`` (``table``, read from ``file``) and ``requirements_file``.

    Raises:
        TaskFormatError: an unknown key, a value of the wrong type, or a malformed version, requirement or
            variable; the message names the file, the key and what to write instead.
    """
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise TaskFormatError(
            file, f"unknown key {unknown[0]!r} in [environment]; expected one of {', '.join(sorted(_KEYS))}"
        )
    requirements = table.get("requirements", [])
    if not isinstance(requirements, list) or not all(isinstance(r, str) for r in requirements):
        raise TaskFormatError(
            file, f"[environment] requirements: expected a list of requirement strings, got {requirements!r}"
        )
    env = table.get("env", {})
    if not isinstance(env, dict):
        raise TaskFormatError(file, f"[environment] env: expected a table of NAME = 'value', got {env!r}")
    from_file: Iterable[str] = read_requirements(requirements_file) if requirements_file else ()
    try:
        return Environment(
            python=table.get("python"), requirements=(*requirements, *from_file), env=env, image=table.get("image")
        )
    except ValueError as exc:
        raise TaskFormatError(file, f"[environment] {exc}") from None
