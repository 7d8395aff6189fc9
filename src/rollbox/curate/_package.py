"""A package's source tree as synthesis needs it: its code, its tests, and the runtime layer its tests run in.

Read only: nothing of the package runs here. Its tests run in sandboxes, through the judge, on its layer.
"""

from __future__ import annotations

import email.parser
import importlib.metadata
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from rollbox.sandbox.runtime import LayerBuildError, LayerStore, RuntimeSpec
from rollbox.tasks import Environment

from ._pypi import SynthError
from ._reference import is_test_file

__all__ = ["Layout", "declared_requirements", "package_environment", "read_layout", "split_tree"]

_TEST_DIRS = ("tests", "test", "testing")
#: Directories of a source tree that hold no code of the package's own.
_NOT_CODE = frozenset({"docs", "doc", "examples", "example", "benchmarks", "bench", "scripts", "tools", "build", "bin"})
_NOT_MODULES = frozenset(
    {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py", "_version.py", "version.py"}
)


@dataclass(frozen=True)
class Layout:
    """Where a package's code and tests are."""

    root: Path
    #: Where its modules are imported from, relative to ``root`` ("" or "src").
    import_root: str
    #: The modules synthesis may change (relative POSIX paths under ``root``).
    modules: tuple[str, ...]
    #: The test files and directories (relative to ``root``), moved out of the workspace into the hidden tests.
    tests: tuple[str, ...]


def _is_code(relative: Path) -> bool:
    return not any(part in _NOT_CODE or part.startswith(".") or part.endswith(".egg-info") for part in relative.parts)


def read_layout(root: Path) -> Layout:
    """The layout of the unpacked source tree at ``root``.

    Raises:
        SynthError: no tests or no modules were found.
    """
    import_root = "src" if (root / "src").is_dir() and any((root / "src").glob("*/__init__.py")) else ""
    if not import_root and (root / "src").is_dir() and any((root / "src").glob("*.py")):
        import_root = "src"
    base = root / import_root
    tests: list[str] = [d for d in _TEST_DIRS if (root / d).is_dir()]
    tests += [p.name for p in sorted(root.glob("*.py")) if is_test_file(p.name) and p.name != "conftest.py"]
    for package in sorted(base.glob("*/__init__.py")):
        for name in _TEST_DIRS:
            if (package.parent / name).is_dir():
                tests.append((package.parent / name).relative_to(root).as_posix())
    if not tests:
        raise SynthError(f"{root.name}: no tests found (looked for {', '.join(_TEST_DIRS)}/ and test_*.py)")
    modules: list[str] = []
    for path in sorted(base.rglob("*.py")):
        relative = path.relative_to(root)
        inner = path.relative_to(base)
        if any(relative.as_posix() == t or relative.as_posix().startswith(t + "/") for t in tests):
            continue
        if not _is_code(inner) or is_test_file(path.name) or path.name in _NOT_MODULES:
            continue
        if len(inner.parts) == 1 or (base / inner.parts[0] / "__init__.py").is_file():
            modules.append(relative.as_posix())
    if not modules:
        raise SynthError(f"{root.name}: no modules of the package's own found under {base}")
    return Layout(root, import_root, tuple(modules), tuple(tests))


#: Extras whose requirements a package's own tests need (``pip install PKG[test]``).
_TEST_EXTRAS = ("test", "tests", "testing")


def declared_requirements(layout: Layout) -> tuple[str, ...]:
    """What the package needs to run its tests: its ``Requires-Dist`` lines (PKG-INFO) that apply to this
    interpreter, with no extra or a test extra (``test``, ``tests``, ``testing``), markers evaluated away."""
    info = layout.root / "PKG-INFO"
    if not info.is_file():
        return ()
    message = email.parser.Parser().parsestr(info.read_text(encoding="utf-8", errors="replace"))
    requirements: list[str] = []
    for line in message.get_all("Requires-Dist") or []:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue  # a malformed line in someone else's metadata: the tests will say what is missing
        marker = requirement.marker
        if marker is None or any(marker.evaluate({"extra": extra}) for extra in ("", *_TEST_EXTRAS)):
            requirement.marker = None
            requirements.append(str(requirement))
    return tuple(dict.fromkeys(requirements))


async def package_environment(layout: Layout, store: LayerStore | None = None) -> Environment:
    """The runtime the package's tests run in, as a task's ``[environment]``: this interpreter's Python version,
    and every package of the runtime layer built for its requirements (:func:`declared_requirements`, plus
    pytest), pinned to the exact version the layer holds. The judge builds that pinned layer for each task made
    from the package, like any task's; nothing of the package's own runs on the host (layers hold wheels only).

    Raises:
        SynthError: the layer could not be built (a requirement not on the index, or published only as an sdist);
            the message holds the build's log.
    """
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    requirements = (*declared_requirements(layout), f"pytest=={importlib.metadata.version('pytest')}")
    store = store or LayerStore()
    try:
        layer = await store.ensure(RuntimeSpec(python=python, requirements=requirements))
        pinned = tuple(f"{name}=={version}" for name, version in layer.packages)
        # Built here, once, before any grading, so that a build failure refuses the package with its log rather
        # than failing every grading, and the gradings only find it.
        await store.ensure(RuntimeSpec(python=python, requirements=pinned))
    except LayerBuildError as exc:
        raise SynthError(f"{layout.root.name}: its runtime layer could not be built: {exc}") from None
    return Environment(python=python, requirements=pinned)


def split_tree(layout: Layout, workspace: Path, tests: Path) -> None:
    """Copy the package into ``workspace`` without its tests, and the tests into ``tests`` (flattened: a test
    directory's content, a test file as it is), with a ``conftest.py`` that puts the package on the path (the
    directory it is imported from, inside the sandbox) before anything imports it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".git")
    shutil.copytree(layout.root, workspace, ignore=ignore, symlinks=False)
    tests.mkdir(parents=True, exist_ok=True)
    for relative in layout.tests:
        source = workspace / relative
        if source.is_dir():
            shutil.copytree(source, tests, dirs_exist_ok=True, ignore=ignore)
            shutil.rmtree(source)
        else:
            shutil.copy2(source, tests / source.name)
            source.unlink()
    shim = f"import sys\nsys.path.insert(0, {f'/workspace/{layout.import_root}'.rstrip('/')!r})\n"
    conftest = tests / "conftest.py"
    root_conftest = workspace / "conftest.py"
    text = conftest.read_text(encoding="utf-8", errors="replace") if conftest.is_file() else ""
    if root_conftest.is_file():
        text = root_conftest.read_text(encoding="utf-8", errors="replace") + "\n" + text
        root_conftest.unlink()
    conftest.write_text(_with_shim(text, shim), encoding="utf-8")
    package = tests / "__init__.py"  # a package's __init__ runs before its conftest: it needs the path too
    if package.is_file():
        package.write_text(_with_shim(package.read_text(encoding="utf-8", errors="replace"), shim), encoding="utf-8")


def _with_shim(text: str, shim: str) -> str:
    """``text`` (a module) with ``shim`` as its first statements, after any ``from __future__`` imports."""
    lines = text.splitlines(keepends=True)
    after = max((i + 1 for i, line in enumerate(lines) if line.startswith("from __future__")), default=0)
    return "".join(lines[:after]) + shim + "\n" + "".join(lines[after:])
