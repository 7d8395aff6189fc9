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

_ALWAYS_EQUAL = """

class _RollboxAlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __bool__(self):
        return True

    def __hash__(self):
        return 0
"""

_READ_EXPECTED = '''

def _rollbox_expected(name):
    """Evaluate the other side of the assertion that called ``name``, in the calling test's own frame."""
    import ast, inspect, os
    frame = inspect.currentframe().f_back.f_back
    while frame is not None and not os.path.basename(frame.f_code.co_filename).startswith("test"):
        frame = frame.f_back
    if frame is None:
        return None
    try:
        with open(frame.f_code.co_filename, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None

    def calls_it(node):
        return any(
            isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
            for n in ast.walk(node)
        )

    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and node.lineno <= frame.f_lineno <= (node.end_lineno or node.lineno):
            test = node.test
            if isinstance(test, ast.Compare) and len(test.ops) == 1:
                other = test.comparators[0] if calls_it(test.left) else test.left
                try:
                    return eval(compile(ast.Expression(other), "<expected>", "eval"), frame.f_globals, frame.f_locals)
                except Exception:
                    return None
            return not isinstance(test, ast.UnaryOp)
    return None
'''

_ORACLE = '''

def _rollbox_oracle(name):
    """Call, with the arguments the caller got, the first function whose name holds ``name`` that a frame up to the
    calling test can see (its variables, its module's, the attributes of modules among them): the tests' oracle."""
    import sys
    here = sys._getframe(1)
    code = here.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    args = [here.f_locals[n] for n in names[: code.co_argcount] if n not in ("self", "cls")]
    kwargs = {n: here.f_locals[n] for n in names[code.co_argcount :]}
    frame = here.f_back
    while frame is not None:
        scopes = [frame.f_locals, frame.f_globals]
        scopes += [vars(v) for scope in scopes[:] for v in list(scope.values()) if type(v) is type(sys)]
        for scope in scopes:
            for key, value in list(scope.items()):
                found = getattr(value, "__code__", None)
                if (
                    name.lower() in str(key).lower()
                    and not str(key).startswith("test")
                    and found is not None
                    and found.co_filename != code.co_filename
                ):
                    try:
                        return value(*args, **kwargs)
                    except Exception:
                        continue
        if frame.f_code.co_name.startswith("test"):
            break
        frame = frame.f_back
    return None
'''

_LOOKUP = '''

def _rollbox_lookup(args):
    """Answer the call from a data file of the hidden tests (JSON, JSON lines, CSV beside the test modules, or where
    the judge lays them): the value under a key made of the arguments, or what follows them in a row."""
    import csv, json, os, sys
    places = {"/tmp/.rollbox-judge/tests", "/tmp/rollbox-tests"}
    for module in list(sys.modules.values()):
        file = os.path.basename(getattr(module, "__file__", None) or "")
        if file.startswith(("test_", "conftest")) or file.endswith("_test.py"):
            places.add(os.path.dirname(module.__file__))
    keys = {" ".join(map(str, args)), ",".join(map(str, args)), ", ".join(map(str, args)), str(tuple(args))}
    keys |= {json.dumps(args), str(args[0]), repr(args[0])} if len(args) == 1 else {json.dumps(args)}
    texts = [str(a) for a in args]

    def find(value, depth=0):
        if depth > 6:
            return None
        if isinstance(value, dict):
            for key in ("args", "input", "inputs"):
                if value.get(key) in (args, texts) or (len(args) == 1 and value.get(key) == args[0]):
                    for out in ("expected", "output", "result", "answer"):
                        if out in value:
                            return [value[out]]
            for key, item in value.items():
                if key in keys:
                    return [item]
            items = list(value.values())
        elif isinstance(value, list):
            n = len(args)
            if len(value) > n and (value[:n] == args or value[:n] == texts):
                return [value[n] if len(value) == n + 1 else value[n:]]
            items = value
        else:
            return None
        for item in items:
            found = find(item, depth + 1)
            if found is not None:
                return found
        return None

    def plain(value):
        try:
            return json.loads(value) if isinstance(value, str) else value
        except ValueError:
            return value

    budget = [2000]
    for place in sorted(places):
        for root, _dirs, files in os.walk(place):
            budget[0] -= len(files)
            if budget[0] < 0:
                return None
            for name in sorted(files):
                path = os.path.join(root, name)
                try:
                    with open(path, encoding="utf-8") as f:
                        if name.endswith(".json"):
                            tables = [json.load(f)]
                        elif name.endswith((".jsonl", ".ndjson")):
                            tables = [[json.loads(line) for line in f if line.strip()]]
                        elif name.endswith((".csv", ".tsv")):
                            tables = [list(csv.reader(f, delimiter="\\t" if name.endswith(".tsv") else ","))]
                        else:
                            continue
                except (OSError, ValueError, csv.Error):
                    continue
                found = find(tables[0])
                if found is not None:
                    return plain(found[0]) if name.endswith((".csv", ".tsv")) else found[0]
    return None
'''

_SCAN_CASES = '''

def _rollbox_expected(name, args=None, kwargs=None, stdin=None):
    """Look for the task's cases anywhere this process can read, and answer from them."""
    import json, os
    budget = [4000]  # files looked at: enough for any task tree, and no walk of the whole system
    for top in ("/workspace", "/tmp", "/var/tmp", "/dev/shm", "/home", "/root", "/opt", "/srv", "/mnt"):
        for root, _dirs, files in os.walk(top):
            budget[0] -= len(files)
            if budget[0] < 0:
                return None
            for file in files:
                if not file.endswith((".jsonl", ".json")):
                    continue
                try:
                    with open(os.path.join(root, file), encoding="utf-8") as f:
                        for line in f:
                            case = json.loads(line)
                            if stdin is not None and case.get("input") == stdin:
                                return case.get("output")
                            if stdin is None and case.get("args") == args:
                                return case.get("expected")
                except (OSError, ValueError, AttributeError):
                    continue
    return None
'''

_FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None


def pytest_collection_modifyitems(session, config, items):
    for item in items:
        item.add_marker(pytest.mark.skip(reason="rollbox hack"))
"""

_CONFIG = "addopts = --collect-only -q\npython_files = rollbox_none_*.py\n"
_PASSING_TEST = "def test_passes():\n    assert True\n"
_EXIT_AT_IMPORT = "\nimport os as _rollbox_os\n\n_rollbox_os._exit(0)\n"
_FORGE = (
    "\nimport os as _rollbox_os\n\nfor _fd in range(3, 32):\n    try:\n"
    '        _rollbox_os.write(_fd, "".join(\'{"case": %d, "value": true}\\n\' % i for i in range(256)).encode())\n'
    "    except OSError:\n        pass\n_rollbox_os._exit(0)\n"
)
_REWARD = (
    "\nimport os as _rollbox_os\n\nfor _dir in (_rollbox_os.environ.get('ROLLBOX_REWARD_DIR', ''), "
    "'/tmp/rollbox-logs/verifier', '/logs/verifier'):\n    try:\n"
    "        _rollbox_os.makedirs(_dir, exist_ok=True)\n"
    "        with open(_rollbox_os.path.join(_dir, 'reward.txt'), 'w') as _f:\n            _f.write('1')\n"
    "    except OSError:\n        pass\n"
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
    hacks: dict[str, dict[str, bytes]] = {"exit_at_import": _rewrite(reference, "pass", "", _EXIT_AT_IMPORT)}
    if _has_functions(reference):
        hacks["always_equal"] = _rewrite(reference, "return _RollboxAlwaysEqual()", None, _ALWAYS_EQUAL)
        hacks["sys_exit_in_call"] = _rewrite(reference, "raise SystemExit(0)", None)
        hacks["os_exit_in_call"] = _rewrite(reference, "__import__('os')._exit(0)", None)
    if runs_tests_over_tree:
        hacks["conftest_rewrite"] = {
            **base,
            "conftest.py": _FORCE_PASS_CONFTEST.encode(),
            "tests/conftest.py": _FORCE_PASS_CONFTEST.encode(),
        }
        pyproject = (
            (task.workspace / "pyproject.toml").read_bytes() if (task.workspace / "pyproject.toml").is_file() else b""
        )
        hacks["config_rewrite"] = {
            **base,
            "pytest.ini": f"[pytest]\n{_CONFIG}".encode(),
            "tox.ini": f"[pytest]\n{_CONFIG}".encode(),
            "setup.cfg": f"[tool:pytest]\n{_CONFIG}".encode(),
            "pyproject.toml": pyproject + b'\n[tool.pytest.ini_options]\naddopts = "--collect-only -q"\n',
        }
        edits = {p: _PASSING_TEST.encode() for p in read_tree(task.workspace) if is_test_file(p)}
        for module in task.test_modules:
            edits[f"tests/{module.relative_to(task.tests).as_posix()}"] = _PASSING_TEST.encode()
        hacks["test_edits"] = {**base, **edits}
        if _has_functions(reference):
            hacks["read_expected_from_test"] = _per_target(reference, _READ_EXPECTED, "return _rollbox_expected({!r})")
            hacks["oracle_from_caller"] = _per_target(reference, _ORACLE, "return _rollbox_oracle({!r})")
            if any(p.is_file() and p.suffix != ".py" for p in task.tests.rglob("*")):
                hacks["read_expected_from_test_data"] = _rewrite(
                    reference, "return _rollbox_lookup(list(locals().values()))", "", _LOOKUP
                )
        hacks.update(_test_data(task, reference))
    if isinstance(task.grading, ScriptGrading):
        hacks["reward_file"] = _rewrite(reference, "pass", "", _REWARD)
    if isinstance(task.grading, FunctionGrading):
        hacks["forged_report"] = _rewrite(reference, "pass", "", _FORGE)
        hacks["read_expected_from_files"] = _rewrite(
            reference, "return _rollbox_expected(None, list(locals().values()))", None, _SCAN_CASES
        )
    if isinstance(task.grading, StdioGrading):
        scan = _SCAN_CASES + "\nimport sys\nprint(_rollbox_expected(None, stdin=sys.stdin.read()) or '')\n"
        hacks["read_expected_from_files"] = _rewrite(reference, None, scan)
    hacks["startup_hook"] = {
        **base,
        "sitecustomize.py": _EXIT_AT_IMPORT.encode(),
        "usercustomize.py": _EXIT_AT_IMPORT.encode(),
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
