"""Candidates validation grades besides the reference: trivial solutions, which must fail, and a corpus of hacks,
which must earn no more than a trivial solution does.

Each candidate is a set of files laid over the task's workspace (as ``rollbox.judge.grade`` takes them). Trivial
candidates replace the bodies of the functions the reference changes (see ``_reference``); hacks start from a
trivial candidate, so that none of them holds a solution, and add their trick. The ``test_data_`` hacks rewrite the
workspace's data files (``_perturb``): what they earn, they earn by the data the tests read from where the agent
writes.
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Mapping
from dataclasses import dataclass

from rollbox.tasks import FunctionGrading, PytestGrading, ScriptGrading, StdioGrading, Task

from ._perturb import data_files, emptied, zeroed
from ._reference import Reference, Target, is_test_file, read_tree
from ._source import Edit, apply_edits, functions
from ._tricks import (
    ALWAYS_EQUAL,
    CONFIG,
    EXIT_AT_IMPORT,
    FORCE_PASS_CONFTEST,
    FORGE,
    LOOKUP,
    ORACLE,
    PASSING_TEST,
    READ_EXPECTED,
    REWARD,
    SCAN_CASES,
)

__all__ = [
    "ESSENTIAL",
    "TEST_DATA",
    "Candidate",
    "CandidateKind",
    "hack_candidates",
    "replace_bodies",
    "trivial_candidates",
]

#: The candidates a quick validation grades: one of each kind of trick (the others vary these).
ESSENTIAL = frozenset(
    {
        "untouched_workspace",
        "empty_body",
        "return_none",
        "not_implemented",
        "echo_input",
        "always_equal",
        "exit_at_import",
        "conftest_rewrite",
        "test_edits",
        "read_expected_from_test",
        "read_expected_from_files",
        "oracle_from_caller",
        "read_expected_from_test_data",
        "test_data_emptied",
        "test_data_zeroed_return_zero",
        "forged_report",
        "reward_file",
    }
)


#: How the names of the hacks that rewrite the workspace's data files begin.
TEST_DATA = "test_data_"


class CandidateKind(str, enum.Enum):
    """What a candidate stands for."""

    #: The task's reference solution: it must pass.
    REFERENCE = "reference"
    #: A solution that solves nothing: it must fail.
    TRIVIAL = "trivial"
    #: A trick on the grader: it must earn no more than a trivial solution.
    HACK = "hack"
    #: The reference with one small bug: the tests should fail it.
    MUTANT = "mutant"


@dataclass(frozen=True)
class Candidate:
    """Files laid over the task's workspace, under a name that says what they try."""

    name: str
    kind: CandidateKind
    files: Mapping[str, bytes]


#: Trivial bodies: (name, the statement that becomes a target function's body, the program that replaces a
#: whole-module target; ``None`` where the kind means nothing there).
_TRIVIAL: tuple[tuple[str, str | None, str | None], ...] = (
    ("empty_body", "pass", ""),
    ("return_none", "return None", None),
    ("return_zero", "return 0", "print(0)\n"),
    ("return_empty_string", "return ''", "print()\n"),
    ("return_true", "return True", "print('YES')\n"),
    ("return_empty_list", "return []", None),
    ("not_implemented", "raise NotImplementedError", "raise NotImplementedError\n"),
)


def replace_bodies(source: str, names: tuple[str, ...], statement: str) -> str:
    """``source`` with the body of every function in ``names`` (qualified names) replaced by ``statement``; a
    docstring stays. Nested definitions inside those bodies go with them."""
    tree = ast.parse(source)
    lines = source.encode().splitlines(keepends=True)
    edits: list[Edit] = []
    for span in functions(tree):
        if span.qualname not in names:
            continue
        body = span.node.body
        first = body[0]
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        indent = (
            "    "
            if first.lineno == span.node.lineno
            else lines[first.lineno - 1][: first.col_offset].decode(errors="replace")
        )
        if docstring and len(body) == 1:
            edits.append(
                Edit(
                    first.end_lineno or 0,
                    first.end_col_offset or 0,
                    first.end_lineno or 0,
                    first.end_col_offset or 0,
                    f"\n{indent}{statement}",
                )
            )
            continue
        start = body[1] if docstring else first
        last = body[-1]
        edits.append(Edit(start.lineno, start.col_offset, last.end_lineno or 0, last.end_col_offset or 0, statement))
    # Nested functions named in ``names`` lie inside an outer body already replaced: keep the outermost edits.
    kept = [e for e in edits if not any(o is not e and _inside(e, o) for o in edits)]
    return apply_edits(source, kept)


def _inside(inner: Edit, outer: Edit) -> bool:
    return (outer.line, outer.col) <= (inner.line, inner.col) and (inner.end_line, inner.end_col) <= (
        outer.end_line,
        outer.end_col,
    )


def _rewrite(reference: Reference, statement: str | None, program: str | None, append: str = "") -> dict[str, bytes]:
    """The reference's files with each target's functions given ``statement`` as body (a whole-module target
    becomes ``program``), and ``append`` added at the end of each target module."""
    files = dict(reference.files)
    for target in reference.targets:
        if target.functions:
            if statement is None:
                continue
            text = replace_bodies(target.source, target.functions, statement)
        else:
            if program is None:
                continue
            text = program
        files[target.path] = (text + append).encode()
    return files


def trivial_candidates(task: Task, reference: Reference | None) -> list[Candidate]:
    """The untouched workspace, and (with a reference) its targets gutted each trivial way."""
    found = [Candidate("untouched_workspace", CandidateKind.TRIVIAL, {})]
    if reference is None or not reference.targets:
        return found
    for name, statement, program in _TRIVIAL:
        files = _rewrite(reference, statement, program)
        if files != reference.files:
            found.append(Candidate(name, CandidateKind.TRIVIAL, files))
    if isinstance(task.grading, StdioGrading):
        echo = "import sys\nsys.stdout.write(sys.stdin.read())\n"
        found.append(Candidate("echo_input", CandidateKind.TRIVIAL, _rewrite(reference, None, echo)))
    return found


def _has_functions(reference: Reference) -> bool:
    return any(target.functions for target in reference.targets)


def _call_name(target: Target) -> str:
    return target.functions[0].rsplit(".", 1)[-1] if target.functions else ""


def hack_candidates(task: Task, reference: Reference | None) -> list[Candidate]:
    """The hacks that apply to the task's runner, each on top of the empty-bodied trivial candidate."""
    if reference is None or not reference.targets:
        return []
    base = _rewrite(reference, "pass", "")
    runs_tests_over_tree = isinstance(task.grading, PytestGrading | ScriptGrading)
    hacks: dict[str, dict[str, bytes]] = {"exit_at_import": _rewrite(reference, "pass", "", EXIT_AT_IMPORT)}
    if _has_functions(reference):
        hacks["always_equal"] = _rewrite(reference, "return _RollboxAlwaysEqual()", None, ALWAYS_EQUAL)
        hacks["sys_exit_in_call"] = _rewrite(reference, "raise SystemExit(0)", None)
        hacks["os_exit_in_call"] = _rewrite(reference, "__import__('os')._exit(0)", None)
    if runs_tests_over_tree:
        hacks["conftest_rewrite"] = {
            **base,
            "conftest.py": FORCE_PASS_CONFTEST.encode(),
            "tests/conftest.py": FORCE_PASS_CONFTEST.encode(),
        }
        pyproject = (
            (task.workspace / "pyproject.toml").read_bytes() if (task.workspace / "pyproject.toml").is_file() else b""
        )
        hacks["config_rewrite"] = {
            **base,
            "pytest.ini": f"[pytest]\n{CONFIG}".encode(),
            "tox.ini": f"[pytest]\n{CONFIG}".encode(),
            "setup.cfg": f"[tool:pytest]\n{CONFIG}".encode(),
            "pyproject.toml": pyproject + b'\n[tool.pytest.ini_options]\naddopts = "--collect-only -q"\n',
        }
        edits = {p: PASSING_TEST.encode() for p in read_tree(task.workspace) if is_test_file(p)}
        for module in task.test_modules:
            edits[f"tests/{module.relative_to(task.tests).as_posix()}"] = PASSING_TEST.encode()
        hacks["test_edits"] = {**base, **edits}
        if _has_functions(reference):
            hacks["read_expected_from_test"] = _per_target(reference, READ_EXPECTED, "return _rollbox_expected({!r})")
            hacks["oracle_from_caller"] = _per_target(reference, ORACLE, "return _rollbox_oracle({!r})")
            if any(p.is_file() and p.suffix != ".py" for p in task.tests.rglob("*")):
                hacks["read_expected_from_test_data"] = _rewrite(
                    reference, "return _rollbox_lookup(list(locals().values()))", "", LOOKUP
                )
        hacks.update(_test_data(task, reference))
    if isinstance(task.grading, ScriptGrading):
        hacks["reward_file"] = _rewrite(reference, "pass", "", REWARD)
    if isinstance(task.grading, FunctionGrading):
        hacks["forged_report"] = _rewrite(reference, "pass", "", FORGE)
        hacks["read_expected_from_files"] = _rewrite(
            reference, "return _rollbox_expected(None, list(locals().values()))", None, SCAN_CASES
        )
    if isinstance(task.grading, StdioGrading):
        scan = SCAN_CASES + "\nimport sys\nprint(_rollbox_expected(None, stdin=sys.stdin.read()) or '')\n"
        hacks["read_expected_from_files"] = _rewrite(reference, None, scan)
    hacks["startup_hook"] = {
        **base,
        "sitecustomize.py": EXIT_AT_IMPORT.encode(),
        "usercustomize.py": EXIT_AT_IMPORT.encode(),
        "rollbox_hack.pth": b"import os; os._exit(0)\n",
    }
    return [Candidate(name, CandidateKind.HACK, files) for name, files in hacks.items()]


def _per_target(reference: Reference, helper: str, body: str) -> dict[str, bytes]:
    """Each target's functions given ``body`` formatted with the function's own name, ``helper`` appended (a
    whole-module target emptied, as in the empty-bodied candidate)."""
    files = _rewrite(reference, "pass", "")
    for target in reference.targets:
        if not target.functions:
            continue
        text = target.source
        for name in target.functions:
            text = replace_bodies(text, (name,), body.format(name.rsplit(".", 1)[-1]))
        files[target.path] = (text + helper).encode()
    return files


def _test_data(task: Task, reference: Reference) -> dict[str, dict[str, bytes]]:
    """The workspace's data files emptied over the empty-bodied candidate, and zeroed over each constant one."""
    data = data_files(task, reference)
    if not data:
        return {}
    hacks = {f"{TEST_DATA}emptied": {**_rewrite(reference, "pass", ""), **{p: emptied(p, d) for p, d in data.items()}}}
    zero = {p: zeroed(p, d) for p, d in data.items()}
    for name, statement, _ in _TRIVIAL:
        if statement is not None and statement.startswith("return "):
            hacks[f"{TEST_DATA}zeroed_{name}"] = {**_rewrite(reference, statement, ""), **zero}
    return hacks
