"""The Dockerfile subset rollbox reads: what a Python task's image holds, as an :class:`Environment` and a workspace.

Accepted instructions (any other is an error naming its line):

- ``FROM python:MAJOR.MINOR[.PATCH][-VARIANT][@DIGEST] [AS NAME]`` (also ``docker.io/library/python:...``;
  ``--platform`` is ignored): the Python version. One ``FROM`` only.
- ``RUN pip install ...`` (``pip3``, ``python -m pip``, ``python3 -m pip``; several joined by ``&&``; shell or
  JSON form): requirements, and ``-r FILE`` for a requirements file an earlier ``COPY`` put in the image. Options
  that change nothing in what is installed are accepted (``--no-cache-dir``, ``-q``, ``-U``,
  ``--break-system-packages``, ``--root-user-action``, ``--disable-pip-version-check``,
  ``--no-warn-script-location``, ``--user``); any other option is an error.
- ``COPY [--chown=...] [--chmod=OCTAL] SRC... DEST`` (shell or JSON form): files of the build context
  (environment/) copied into the image; a file or link that symbolic links lead out of environment/ is an error.
  Everything copied must end up under the final ``WORKDIR``, which becomes the workspace, except a requirements
  file that ``RUN pip install -r`` reads.
- ``WORKDIR PATH``: the directory the agent works in; the last one is the workspace.
- ``ENV NAME=VALUE ...`` (or ``ENV NAME VALUE``): environment variables; a value naming a path under the
  workspace is rewritten to /workspace; ``$`` references are not expanded, so they are refused.

Comments, blank lines, line continuations (``\\``) and the ``syntax`` parser directive are understood.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from ._environment import read_requirements
from ._errors import TaskFormatError

__all__ = ["DockerfileError", "Image", "read_dockerfile"]

_PYTHON_IMAGE = re.compile(
    r"^(?:docker\.io/)?(?:library/)?python:(?P<version>3\.\d{1,2})(?:\.\d+)?(?:-[\w.-]+)?(?:@sha256:[0-9a-f]{64})?$"
)
_PIP = (
    ["pip", "install"],
    ["pip3", "install"],
    ["python", "-m", "pip", "install"],
    ["python3", "-m", "pip", "install"],
)
_HARMLESS = {
    "--no-cache-dir",
    "-q",
    "--quiet",
    "-qq",
    "-U",
    "--upgrade",
    "--break-system-packages",
    "--disable-pip-version-check",
    "--no-warn-script-location",
    "--user",
}
_WILDCARD = re.compile(r"[*?\[]")


class DockerfileError(Exception):
    """A line outside the subset, or one that cannot be carried out; ``line`` is its (first) line number."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass
class Image:
    """What the Dockerfile builds, as far as rollbox needs it."""

    python: str | None = None
    requirements: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: The final WORKDIR (``None``: none was given).
    workdir: str | None = None
    #: Files and links under the workdir: workspace-relative path -> (context file, mode or None).
    workspace: dict[str, tuple[Path, int | None]] = field(default_factory=dict)


@dataclass
class _Copied:
    source: Path
    mode: int | None
    line: int


def _instructions(text: str) -> list[tuple[int, str, str]]:
    """(first line number, KEYWORD, arguments) for each instruction, continuations joined and comments dropped."""
    found: list[tuple[int, str, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and not found and re.match(r"^#\s*escape\s*=", stripped, re.IGNORECASE):
            raise DockerfileError(number, "the escape parser directive is not supported; use the default '\\'")
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        continued = stripped.endswith("\\")
        pending.append(stripped[:-1] if continued else stripped)
        if not continued:
            keyword, _, arguments = " ".join(pending).strip().partition(" ")
            found.append((start, keyword.upper(), arguments.strip()))
            pending = []
    if pending:
        raise DockerfileError(start, "the last instruction ends with a line continuation '\\'; finish it")
    return found


def _words(line: int, arguments: str) -> list[str]:
    """The arguments in JSON (exec) form or split as a shell would."""
    if arguments.startswith("["):
        try:
            words = json.loads(arguments)
        except ValueError:
            words = None
        if isinstance(words, list) and all(isinstance(w, str) for w in words):
            return words
        raise DockerfileError(line, f"{arguments!r} is not a JSON array of strings")
    try:
        return shlex.split(arguments)
    except ValueError as exc:
        raise DockerfileError(line, f"cannot split {arguments!r}: {exc}") from None


class _Builder:
    def __init__(self, context: Path) -> None:
        self.context = context
        self.image = Image()
        self.workdir = "/"
        self.files: dict[str, _Copied] = {}  # absolute image path -> what put it there
        self.read_by_pip: set[str] = set()
        self.seen_from = False

    def run(self, number: int, keyword: str, arguments: str) -> None:
        handler = getattr(self, f"_{keyword.lower()}", None)
        if handler is None or keyword not in {"FROM", "RUN", "COPY", "WORKDIR", "ENV"}:
            raise DockerfileError(
                number,
                f"{keyword} is outside the subset rollbox reads (FROM python:X.Y, RUN pip install, COPY, WORKDIR, "
                "ENV); express the task with those, or remove the line",
            )
        if keyword != "FROM" and not self.seen_from:
            raise DockerfileError(number, f"{keyword} before FROM; start with FROM python:X.Y")
        handler(number, arguments)

    def _from(self, number: int, arguments: str) -> None:
        if self.seen_from:
            raise DockerfileError(number, "a second FROM: multi-stage builds are outside the subset; use one stage")
        words = [w for w in arguments.split() if not w.startswith("--platform")]
        if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
            raise DockerfileError(number, f"FROM {arguments}: expected FROM IMAGE [AS NAME]")
        match = _PYTHON_IMAGE.match(words[0])
        if match is None:
            raise DockerfileError(
                number,
                f"FROM {words[0]}: the base image must be python:MAJOR.MINOR (such as python:3.11-slim), whose "
                "version rollbox runs the task with",
            )
        self.image.python = match.group("version")
        self.seen_from = True

    def _run(self, number: int, arguments: str) -> None:
        words = _words(number, arguments)
        commands: list[list[str]] = [[]]
        for word in words:
            if word == "&&":
                commands.append([])
            else:
                commands[-1].append(word)
        for command in commands:
            prefix = next((p for p in _PIP if command[: len(p)] == p), None)
            if prefix is None:
                shown = " ".join(command) or "(nothing)"
                raise DockerfileError(
                    number, f"RUN {shown}: only 'pip install' is in the subset; put other setup in the workspace"
                )
            self._pip(number, command[len(prefix) :])

    def _pip(self, number: int, words: list[str]) -> None:
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            if word in ("-r", "--requirement") or word.startswith("--requirement="):
                name = word.partition("=")[2] if "=" in word else (words[index] if index < len(words) else "")
                index += 0 if "=" in word else 1
                self._requirements_file(number, name)
            elif word.startswith("--root-user-action"):
                index += 0 if "=" in word else 1
            elif word.startswith("-"):
                if word not in _HARMLESS:
                    raise DockerfileError(number, f"pip option {word} is outside the subset; remove it")
            else:
                try:
                    Requirement(word)
                except InvalidRequirement as exc:
                    raise DockerfileError(number, f"pip install {word}: not a requirement ({exc})") from None
                self.image.requirements.append(word)

    def _requirements_file(self, number: int, name: str) -> None:
        path = posixpath.normpath(posixpath.join(self.workdir, name))
        copied = self.files.get(path)
        if not name or copied is None:
            raise DockerfileError(number, f"pip install -r {name or '?'}: no earlier COPY put that file in the image")
        try:
            self.image.requirements.extend(read_requirements(copied.source))
        except TaskFormatError as exc:
            raise DockerfileError(number, f"pip install -r {name}: {exc}") from None
        self.read_by_pip.add(path)

    def _workdir(self, number: int, arguments: str) -> None:
        words = _words(number, arguments)
        if len(words) != 1 or "$" in words[0]:
            raise DockerfileError(number, f"WORKDIR {arguments}: expected one path, without $ references")
        self.workdir = posixpath.normpath(posixpath.join(self.workdir, words[0]))

    def _env(self, number: int, arguments: str) -> None:
        words = _words(number, arguments)
        pairs = [tuple(w.split("=", 1)) for w in words] if "=" in (words[0] if words else "") else []
        if not pairs and len(words) >= 2:
            pairs = [(words[0], arguments.split(None, 1)[1])]  # the legacy form: ENV NAME the rest of the line
        if not pairs or any(len(p) != 2 for p in pairs):
            raise DockerfileError(number, f"ENV {arguments}: expected NAME=VALUE ...")
        for name, value in pairs:
            if "$" in value:
                raise DockerfileError(number, f"ENV {name}: $ references are not expanded; write the value out")
            self.image.env[name] = value

    def _copy(self, number: int, arguments: str) -> None:
        words = _words(number, arguments)
        mode: int | None = None
        while words and words[0].startswith("--"):
            flag = words.pop(0)
            if flag.startswith("--chmod="):
                try:
                    mode = int(flag.partition("=")[2], 8)
                except ValueError:
                    raise DockerfileError(number, f"COPY {flag}: expected an octal mode such as 755") from None
            elif not flag.startswith("--chown="):
                raise DockerfileError(number, f"COPY {flag} is outside the subset (only --chown and --chmod)")
        if len(words) < 2:
            raise DockerfileError(number, f"COPY {arguments}: expected SRC... DEST")
        *sources, dest = words
        target = posixpath.normpath(posixpath.join(self.workdir, dest))
        into_directory = dest.endswith("/") or len(sources) > 1
        for source in sources:
            for path, relative in self._expand(number, source):
                if relative is None:  # a file named as the source
                    where = posixpath.join(target, path.name) if into_directory else target
                else:
                    where = posixpath.join(target, relative) if relative else target
                self.files[where] = _Copied(path, mode, number)

    def _expand(self, number: int, source: str) -> list[tuple[Path, str | None]]:
        """(context path, its path relative to a copied directory, or None for a file named itself) for a SRC."""
        relative = posixpath.normpath(source.lstrip("/"))
        if relative.startswith(".."):
            raise DockerfileError(number, f"COPY {source}: outside the build context (environment/)")
        matches = sorted(self.context.glob(relative)) if _WILDCARD.search(relative) else [self.context / relative]
        if not matches or not all(m.exists() or m.is_symlink() for m in matches):
            raise DockerfileError(number, f"COPY {source}: no such file in environment/")
        found: list[tuple[Path, str | None]] = []
        for match in matches:
            self._within_context(number, source, match)
            if match.is_dir() and not match.is_symlink():
                for p in sorted(match.rglob("*")):
                    if (p.is_file() or p.is_symlink()) and p.name != ".dockerignore":
                        self._within_context(number, source, p)
                        found.append((p, p.relative_to(match).as_posix()))
            else:
                found.append((match, None))
        return found

    def _within_context(self, number: int, source: str, path: Path) -> None:
        """Refuse ``path`` when symbolic links lead it out of the build context: Docker resolves them inside it,
        and rollbox must not copy the host's files into a task."""
        real = Path(os.path.realpath(path))
        if not real.is_relative_to(os.path.realpath(self.context)):
            raise DockerfileError(
                number,
                f"COPY {source}: environment/{path.relative_to(self.context).as_posix()} leads through a symbolic "
                f"link to {real}, outside the build context (environment/); put the file itself in environment/",
            )

    def finish(self, workdir: str | None) -> Image:
        if not self.seen_from:
            raise DockerfileError(1, "no FROM; start with FROM python:X.Y")
        root = posixpath.normpath(workdir) if workdir else self.workdir
        self.image.workdir = None if root == "/" else root
        for path, copied in self.files.items():
            inside = path.startswith(root.rstrip("/") + "/")
            if path in self.read_by_pip and not inside:
                continue
            if root == "/":
                raise DockerfileError(
                    copied.line, "COPY without a WORKDIR: say where the agent works (WORKDIR /app) and copy under it"
                )
            if not inside:
                raise DockerfileError(
                    copied.line,
                    f"COPY puts {path} outside the WORKDIR {root}, which alone becomes rollbox's workspace; copy it "
                    "under the WORKDIR",
                )
            self.image.workspace[posixpath.relpath(path, root)] = (copied.source, copied.mode)
        if self.image.workdir:
            pattern = re.compile(rf"(?<![\w./-]){re.escape(self.image.workdir)}(?=/|:|$)")
            self.image.env = {name: pattern.sub("/workspace", value) for name, value in self.image.env.items()}
        return self.image


def read_dockerfile(path: Path, *, workdir: str | None = None) -> Image:
    """The :class:`Image` the Dockerfile at ``path`` builds, its directory being the build context; ``workdir``
    overrides its final WORKDIR (as Harbor's ``[environment] workdir`` does).

    Raises:
        DockerfileError: a line outside the subset (see the module's docstring), or one that cannot be carried out
            (a COPY of a missing file, a file copied outside the WORKDIR); the message names the line.
        OSError, UnicodeDecodeError: the file cannot be read.
    """
    if (path.parent / ".dockerignore").exists():
        raise DockerfileError(1, "environment/.dockerignore is outside the subset; COPY the files the task needs")
    builder = _Builder(path.parent)
    for number, keyword, arguments in _instructions(path.read_text(encoding="utf-8")):
        builder.run(number, keyword, arguments)
    return builder.finish(workdir)
