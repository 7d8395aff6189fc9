"""Recipes: a short description of an image built from Debian packages (base suite, packages, files, env).

A recipe is a TOML file::

    # python: the interpreter and its standard library
    suite = "bookworm"
    packages = ["python3"]

    [env]
    PYTHONDONTWRITEBYTECODE = "1"

    [files]
    "/etc/motd" = "built by rollbox\\n"
    "/usr/local/bin/hello" = { content = "#!/bin/sh\\necho hello\\n", mode = 0o755 }

Recipes for the languages ``/run_code`` runs ship with rollbox (:func:`recipe_names`); a path to a ``.toml`` file
names a recipe of one's own. A recipe's :attr:`Recipe.digest` covers everything the build depends on that the
recipe says (the mirror's contents aside: see :mod:`rollbox.sandbox.images._build`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path, PurePosixPath

from ._errors import ImageError

__all__ = ["DEFAULT_MIRROR", "BuildError", "Recipe", "RecipeFile", "combined_recipe", "load_recipe", "recipe_names"]

#: The Debian mirror recipes use unless they name one: the one this machine's apt sources name.
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: The build's clock (SOURCE_DATE_EPOCH): every file's mtime is clamped to it. 2023-11-14T22:13:20Z.
DEFAULT_EPOCH = 1_700_000_000
#: Bumped whenever the builder changes what it writes for the same recipe, so that cached builds are redone.
BUILDER_VERSION = "rollbox-build/1"

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+(:[a-z0-9]+)?")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEYS = {"suite", "mirror", "packages", "env", "files", "working_dir", "epoch"}


class BuildError(ImageError):
    """A recipe could not be read, or its image could not be built; the message says what to do."""


@dataclass(frozen=True)
class RecipeFile:
    """A file a recipe lays into its image (over whatever a package put there)."""

    path: str
    content: str
    mode: int = 0o644


@dataclass(frozen=True)
class Recipe:
    """What an image is built from; see the module's docstring for its TOML form.

    Attributes:
        name: What the image is called (``rollbox/NAME`` in the store).
        suite: The Debian suite its base comes from (``bookworm``).
        packages: Debian packages installed over the essential base (their dependencies follow).
        files: Files laid over the installed system.
        env: The image's ``Env``.
        working_dir: The image's ``WorkingDir``.
        mirror: The Debian mirror its packages come from.
        epoch: SOURCE_DATE_EPOCH of the build: every file's mtime is at most this.
    """

    name: str
    suite: str = "bookworm"
    packages: tuple[str, ...] = ()
    files: tuple[RecipeFile, ...] = ()
    env: tuple[tuple[str, str], ...] = (("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),)
    working_dir: str = "/workspace"
    mirror: str = field(default_factory=lambda: os.environ.get("ROLLBOX_DEBIAN_MIRROR") or DEFAULT_MIRROR)
    epoch: int = DEFAULT_EPOCH

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise BuildError(f"recipe name {self.name!r} is not lowercase letters, digits, '.', '_' or '-'")
        for package in self.packages:
            if not _PACKAGE.fullmatch(package):
                raise BuildError(f"recipe {self.name}: {package!r} is not a Debian package name")
        for name, _ in self.env:
            if not _ENV_NAME.fullmatch(name):
                raise BuildError(f"recipe {self.name}: env name {name!r} is not a variable name")
        for file in self.files:
            path = PurePosixPath(file.path)
            if not path.is_absolute() or ".." in path.parts or len(path.parts) < 2:
                raise BuildError(f"recipe {self.name}: file path {file.path!r} must be absolute, below /, without '..'")
            if not 0 <= file.mode <= 0o777:
                raise BuildError(f"recipe {self.name}: mode {file.mode:o} of {file.path} is not within 0..0o777")

    @property
    def digest(self) -> str:
        """``sha256:...`` of everything the build takes from the recipe, and of the builder's version."""
        fields = asdict(self)
        fields["packages"] = sorted(self.packages)
        fields["files"] = sorted(fields["files"], key=lambda f: f["path"])
        fields["builder"] = BUILDER_VERSION
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_toml(cls, name: str, text: str) -> Recipe:
        """A recipe from its TOML text.

        Raises:
            BuildError: the text is not TOML, or says something a recipe cannot.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise BuildError(f"recipe {name}: not TOML: {exc}") from None
        unknown = set(data) - _KEYS
        if unknown:
            raise BuildError(f"recipe {name}: unknown keys {sorted(unknown)}; a recipe has {sorted(_KEYS)}")
        try:
            files = tuple(_file(path, spec) for path, spec in data.pop("files", {}).items())
            env = tuple((str(k), _text(v, f"env.{k}")) for k, v in data.pop("env", {}).items())
            packages = tuple(_text(p, "packages[]") for p in data.pop("packages", []))
        except (TypeError, AttributeError) as exc:
            raise BuildError(f"recipe {name}: {exc}") from None
        defaults = dict(Recipe(name).env)
        defaults.update(env)
        for key in ("suite", "mirror", "working_dir"):
            if key in data:
                data[key] = _text(data[key], key)
        if "epoch" in data and (isinstance(data["epoch"], bool) or not isinstance(data["epoch"], int)):
            raise BuildError(f"recipe {name}: epoch must be an integer (seconds since 1970), got {data['epoch']!r}")
        return cls(name=name, packages=packages, files=files, env=tuple(defaults.items()), **data)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a string, got {value!r}")
    return value


def _file(path: str, spec: object) -> RecipeFile:
    if isinstance(spec, str):
        return RecipeFile(path, spec)
    if isinstance(spec, dict) and set(spec) <= {"content", "mode"} and "content" in spec:
        mode = spec.get("mode", 0o644)
        if isinstance(mode, bool) or not isinstance(mode, int):
            raise TypeError(f"files.{path!r}.mode must be an integer such as 0o755, got {mode!r}")
        return RecipeFile(path, _text(spec["content"], f"files.{path!r}.content"), mode)
    raise TypeError(f"files.{path!r} must be a string or {{ content = ..., mode = 0o755 }}, got {spec!r}")


def recipe_names() -> list[str]:
    """The recipes that ship with rollbox."""
    folder = resources.files(__package__).joinpath("recipes")
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load_recipe(name_or_path: str | Path) -> Recipe:
    """A shipped recipe by name (``python``), or a recipe file by path (``./my.toml``; named after the file).

    Raises:
        BuildError: no such recipe, or it cannot be read.
    """
    path = Path(name_or_path)
    if path.suffix == ".toml" or os.sep in str(name_or_path):
        try:
            return Recipe.from_toml(path.stem, path.read_text())
        except OSError as exc:
            raise BuildError(f"cannot read recipe {path}: {exc.strerror}") from None
    name = str(name_or_path)
    if name not in recipe_names():
        raise BuildError(
            f"no recipe named {name!r}; shipped recipes: {', '.join(recipe_names())}, or give a .toml path"
        )
    text = resources.files(__package__).joinpath("recipes", f"{name}.toml").read_text()
    return Recipe.from_toml(name, text)


def combined_recipe(name: str, recipes: list[Recipe]) -> Recipe:
    """One recipe with every package, file and variable of ``recipes`` (one image that runs all their languages).

    Raises:
        BuildError: the recipes differ in suite, mirror or epoch, or give one variable or file two values.
    """
    if not recipes:
        raise BuildError("combined_recipe needs at least one recipe")
    first = recipes[0]
    env: dict[str, str] = {}
    files: dict[str, RecipeFile] = {}
    for recipe in recipes:
        if (recipe.suite, recipe.mirror, recipe.epoch) != (first.suite, first.mirror, first.epoch):
            raise BuildError(f"recipes {first.name} and {recipe.name} differ in suite, mirror or epoch")
        for key, value in recipe.env:
            if env.setdefault(key, value) != value:
                raise BuildError(f"recipes disagree on {key}: {env[key]!r} and {value!r} (in {recipe.name})")
        for file in recipe.files:
            if files.setdefault(file.path, file) != file:
                raise BuildError(f"recipes disagree on the file {file.path} (in {recipe.name})")
    packages = sorted({p for recipe in recipes for p in recipe.packages})
    return Recipe(
        name=name,
        suite=first.suite,
        packages=tuple(packages),
        files=tuple(files.values()),
        env=tuple(env.items()),
        mirror=first.mirror,
        epoch=first.epoch,
    )
