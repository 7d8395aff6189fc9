"""Whether the reference reads the hidden tests: a lookup of the expected values is no solution.

A reference that answers from the tests' own files (``expected.json``, the cases, the test modules) passes every
check of a solution, and proves something worse than its own uselessness: the candidate's process can read those
files too. Two checks, for the runners that run the tests where the candidate's code can reach them (``pytest``
and ``script``):

- :func:`naming_the_tests`: the reference's code names the place the judge lays the tests, or a file of tests/ (by
  its name, or a test module's by its module name) that the workspace and the reference do not hold themselves;
- :func:`sealed_off`: a variant of a ``pytest`` task whose tests/conftest.py installs an audit hook that refuses
  to open a file of tests/ when the reference's own code asks for it: from a function the reference changes (or a
  module it writes whole, or a target module's top level), unless the path is one an argument handed it (a test
  passing a fixture file to the code under test). Tests opening their own files are never refused. The reference
  passes on every ordinary run and fails in this variant: it reads the tests.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from rollbox.tasks import PytestGrading, ScriptGrading, Task

from ._reference import Reference, read_tree
from ._variants import copy_task

__all__ = ["naming_the_tests", "sealed_off"]

#: Where the judge's runners lay the hidden tests (``runners/_pytest.py``, ``runners/_script.py``), and the
#: variable that names the place for a script.
_TEST_PLACES = ("/tmp/.rollbox-judge", "/tmp/rollbox-tests", "ROLLBOX_TESTS")
#: Names in tests/ too common to mean anything when a reference mentions them.
_GENERIC = frozenset({"conftest.py", "__init__.py", "pytest.ini", "test.sh"})

_HOOK = """

# rollbox validate: the reference's own code may not open a file of the hidden tests.
def _rollbox_validate_sealed_off():
    import os, sys

    root = os.path.dirname(os.path.abspath(__file__))
    hidden = {{os.path.normpath(os.path.join(root, p)) for p in {hidden!r}}}
    targets = {targets!r}

    def handed(frame, path):
        code = frame.f_code
        count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4)
        values = [frame.f_locals.get(n) for n in code.co_varnames[:count]]
        values += [v for t in values if isinstance(t, tuple) for v in t]
        for value in values:
            try:
                given = os.path.normpath(os.path.abspath(os.fsdecode(value)))
            except TypeError:
                continue
            if path == given or path.startswith(given.rstrip("/") + "/"):
                return True
        return False

    def hook(event, args):
        if event != "open" or not args or not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        path = os.path.normpath(os.path.abspath(os.fsdecode(args[0])))
        if path not in hidden:
            return
        frame = sys._getframe(1)
        while frame is not None:
            file = frame.f_code.co_filename
            if file in hidden:
                return
            names = targets.get(file)
            name = getattr(frame.f_code, "co_qualname", frame.f_code.co_name).split(".<locals>")[0]
            if names is not None and (not names or name == "<module>" or name in names):
                if handed(frame, path):
                    return
                raise PermissionError(13, "rollbox validate: the reference's own code opened a hidden test file", path)
            frame = frame.f_back

    sys.addaudithook(hook)


_rollbox_validate_sealed_off()
"""


def _written(task: Task, reference: Reference) -> dict[str, str]:
    """The reference's files that differ from the workspace's, as text (binary ones left out)."""
    workspace = read_tree(task.workspace)
    written: dict[str, str] = {}
    for path, data in reference.files.items():
        if workspace.get(path) == data:
            continue
        try:
            written[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
    return written


def naming_the_tests(task: Task, reference: Reference) -> list[tuple[str, str]]:
    """What of the hidden tests the reference's code names: (the reference's file, the name), sorted."""
    if not isinstance(task.grading, PytestGrading | ScriptGrading):
        return []
    own = {Path(p).name for p in [*read_tree(task.workspace), *reference.files]}
    names: set[str] = set(_TEST_PLACES)
    for file in task.tests.rglob("*"):
        if file.is_file() and file.name not in _GENERIC and file.name not in own:
            names.add(file.name)
            if file.suffix == ".py" and file.stem.startswith("test"):
                names.add(file.stem)
    found: list[tuple[str, str]] = []
    for path, text in sorted(_written(task, reference).items()):
        for name in sorted(names):
            if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", text):
                found.append((path, name))
    return found


def sealed_off(task: Task, reference: Reference, root: Path) -> Task | None:
    """The ``pytest`` task with the audit hook appended to tests/conftest.py (``None`` for other runners, or when
    the reference writes no Python)."""
    if not isinstance(task.grading, PytestGrading):
        return None
    targets: dict[str, list[str]] = {f"/workspace/{t.path}": list(t.functions) for t in reference.targets}
    for written in _written(task, reference):
        if written.endswith(".py"):
            targets.setdefault(f"/workspace/{written}", [])
    if not targets:
        return None
    path = copy_task(task, root, "sealed-off")
    hidden = sorted(p.relative_to(task.tests).as_posix() for p in task.tests.rglob("*") if p.is_file())
    conftest = path / "tests" / "conftest.py"
    existing = conftest.read_text(encoding="utf-8") if conftest.is_file() else ""
    conftest.write_text(existing + _HOOK.format(hidden=hidden, targets=targets), encoding="utf-8")
    return dataclasses.replace(task, path=path)
