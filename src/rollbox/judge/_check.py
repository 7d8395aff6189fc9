"""Check-based function grading: the task's own ``check(candidate)``, run in the candidate's process, with canaries.

Some assertions cannot be written as cases (tolerances, truthiness, properties, randomized inputs), so a
function task may name ``check = "check.py"``: a file in tests/ defining ``check(candidate)``. It has to run
beside the candidate, so three things keep it honest:

- every value the candidate returns is round-tripped through the strict value codec before the check sees it
  (an always-equal object, or an ``int`` subclass, raises ``TypeError`` there: the check fails);
- must-fail canaries run beside the real check: copies of it with one expectation changed (a literal replaced
  by another value of its type, a tolerance's target moved, ``is True`` turned into ``is False``, an assertion
  negated), every copy under a random id, in random order, all formatted alike. Honest code fails every
  canary; a canary that passes means the reporting was forged or the comparison subverted (``tampered``);
- builtins, and the names and modules a check relies on, are watched: rebinding one during a check is
  ``tampered`` too.

Only spots that certainly run when the real check passes are mutated (top-level assertions, and those directly
in ``for`` loops over a non-empty constant range); when there is none, the canary wraps the whole check and
asserts that the candidate's first result equals a fresh sentinel string.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import secrets
import string
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from rollbox.sandbox import Sandbox, Status
from rollbox.tasks import FunctionGrading, Task, TaskFormatError

from ._channel import GRADING_ENV, ForgedChannel, read_records
from ._report import RunnerReport
from ._verdict import GradedTest, Outcome

__all__ = ["CheckVariant", "check_variants", "imported_modules", "merge_reports", "run_check"]

_RANDOM = secrets.SystemRandom()
_OUTCOMES = {"passed": Outcome.PASSED, "failed": Outcome.FAILED, "error": Outcome.ERROR}


@dataclass(frozen=True)
class CheckVariant:
    """One check module sent to the driver: the task's own check, or a canary derived from it."""

    id: str
    source: str
    canary: bool


# -- deriving canaries ------------------------------------------------------------------------------------------


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


_NOT_LITERAL = object()


def _moved(value: float, step: float) -> Any:
    """``value`` moved by ``step`` up or down, keeping its sign where it can (a canary should look ordinary)."""
    choices = [value + step] + ([value - step] if (value - step >= 0) == (value >= 0) else [])
    return _RANDOM.choice(choices)


def _other(value: Any) -> Any:
    """A value of the same type that no value equal to ``value`` can equal (or _NOT_LITERAL)."""
    kind = type(value)
    if kind is bool:
        return not value
    if kind is int:
        return _moved(value, _RANDOM.randint(1, max(9, abs(value))))
    if kind is float:
        if not math.isfinite(value):
            return _NOT_LITERAL
        other = round(_moved(value, _RANDOM.uniform(0.5, 9.5) * max(1.0, abs(value))), 3)
        return other if other != value and math.isfinite(other) else _NOT_LITERAL
    if kind is str:
        if not value:
            return "".join(_RANDOM.choices(string.ascii_lowercase, k=_RANDOM.randint(1, 5)))
        at = _RANDOM.randrange(len(value))
        pool = string.digits if value[at].isdigit() else string.ascii_letters
        return value[:at] + _RANDOM.choice([c for c in pool if c != value[at]]) + value[at + 1 :]
    if value is None:
        return _RANDOM.choice([0, -1, ""])
    if kind in (list, tuple):
        if not value:
            return kind([_RANDOM.randint(0, 9)])
        at = _RANDOM.randrange(len(value))
        item = _other(value[at])
        return _NOT_LITERAL if item is _NOT_LITERAL else kind([*value[:at], item, *value[at + 1 :]])
    if kind is dict and value:
        key = _RANDOM.choice(list(value))
        item = _other(value[key])
        return _NOT_LITERAL if item is _NOT_LITERAL else {**value, key: item}
    return _NOT_LITERAL


def _literal_node(value: Any) -> ast.expr | None:
    if value is _NOT_LITERAL:
        return None
    return ast.parse(repr(value), mode="eval").body


def _retargeted(test: ast.expr) -> Iterator[ast.expr]:
    """Tests in which the expected value of ``test`` is replaced by others (none when it has no literal)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return
    op, left, right = test.ops[0], test.left, test.comparators[0]
    if isinstance(op, ast.Eq):
        side = "comparators" if _literal(right) is not _NOT_LITERAL else "left"
        value = _literal(right if side == "comparators" else left)
        if value is _NOT_LITERAL:
            return
        for _ in range(2):
            node = _literal_node(_other(value))
            if node is not None:
                mutated = copy.deepcopy(test)
                if side == "comparators":
                    mutated.comparators = [node]
                else:
                    mutated.left = node
                yield mutated
    elif isinstance(op, ast.Lt | ast.LtE) and isinstance(left, ast.Call) and len(left.args) == 1:
        # abs(X - TARGET) < TOL: move TARGET by more than twice the tolerance.
        tolerance, inner = _literal(right), left.args[0]
        func = ast.unparse(left.func)
        if func not in ("abs", "math.fabs") or type(tolerance) not in (int, float) or not 0 < tolerance < 1e15:
            return
        if not (isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub)):
            return
        target = _literal(inner.right)
        if type(target) not in (int, float) or not math.isfinite(target):
            return
        for _ in range(2):
            step = _RANDOM.uniform(2.5, 9.5) * max(1.0, abs(target), 10 * tolerance)
            moved = _moved(target, math.ceil(step)) if type(target) is int else round(_moved(target, step), 3)
            mutated = copy.deepcopy(test)
            assert isinstance(mutated.left, ast.Call) and isinstance(mutated.left.args[0], ast.BinOp)
            mutated.left.args[0].right = ast.parse(repr(moved), mode="eval").body
            yield mutated


def _flipped(test: ast.expr) -> ast.expr:
    """The one opposite of ``test``: ``is True`` and ``is False`` swap, ``==`` and ``!=`` swap, else negation."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and type(right.value) is bool:
            return ast.Compare(left=test.left, ops=[op], comparators=[ast.Constant(not right.value)])
        opposite: dict[type[ast.cmpop], type[ast.cmpop]] = {
            ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq,
            ast.Is: ast.IsNot,
            ast.IsNot: ast.Is,
        }
        if type(op) in opposite:
            return ast.Compare(left=test.left, ops=[opposite[type(op)]()], comparators=test.comparators)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _jumps(nodes: Sequence[ast.stmt], kinds: tuple[type, ...]) -> bool:
    """Whether any of ``kinds`` occurs in ``nodes`` outside nested functions and classes."""
    stack: list[ast.AST] = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, kinds):
            return True
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return False


def _nonempty_range(node: ast.expr) -> bool:
    if not (isinstance(node, ast.Call) and ast.unparse(node.func) == "range" and not node.keywords):
        return False
    bounds = [_literal(a) for a in node.args]
    if not 1 <= len(bounds) <= 3 or any(type(b) is not int for b in bounds):
        return False
    try:
        return len(range(*bounds)) > 0
    except ValueError:  # a zero step
        return False


def _certain_asserts(body: Sequence[ast.stmt], candidate: str) -> Iterator[ast.Assert]:
    """Assertions about the candidate that surely run whenever the check completes without an exception."""
    for statement in body:
        if isinstance(statement, ast.Assert):
            if any(isinstance(n, ast.Name) and n.id == candidate for n in ast.walk(statement.test)):
                yield statement
        elif (
            isinstance(statement, ast.For)
            and _nonempty_range(statement.iter)
            and not _jumps(statement.body, (ast.Break, ast.Continue, ast.Return))
        ):
            yield from _certain_asserts(statement.body, candidate)
        if _jumps([statement], (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
            return


def _sentinel_canary(tree: ast.Module) -> str:
    token, sentinel = secrets.token_hex(4), secrets.token_hex(16)
    return (
        ast.unparse(tree) + f"\n_task_check_{token} = check\n\n\nclass _Stop_{token}(BaseException):\n    pass\n\n\n"
        f"def check(candidate):\n    first = []\n\n    def spy(*args, **kwargs):\n"
        f"        first.append(candidate(*args, **kwargs))\n        raise _Stop_{token}\n"
        f"    try:\n        _task_check_{token}(spy)\n    except _Stop_{token}:\n        pass\n"
        f"    assert first and first[0] == {sentinel!r}\n"
    )


def check_variants(source: str) -> list[CheckVariant]:
    """The task's check and its must-fail canaries, each under a fresh random id, in random order.

    All variants are printed by :func:`ast.unparse` alike, so that only the changed expectation tells them
    apart. A source that does not parse gives the real check alone (it will fail to load: an error).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [CheckVariant(secrets.token_hex(8), source, canary=False)]
    canaries: list[str] = []
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if checks and checks[-1].args.args:
        function = checks[-1]
        spots = list(_certain_asserts(function.body, function.args.args[0].arg))
        if spots:
            spot = _RANDOM.choice(spots)
            tests = list(_retargeted(spot.test)) or [_flipped(spot.test)]
            for test in tests:
                original, spot.test = spot.test, test
                canary = ast.unparse(tree)
                spot.test = original
                if canary not in canaries:
                    canaries.append(canary)
    if not canaries:
        canaries.append(_sentinel_canary(tree))
    variants = [CheckVariant(secrets.token_hex(8), ast.unparse(tree), canary=False)]
    variants += [CheckVariant(secrets.token_hex(8), c, canary=True) for c in canaries]
    _RANDOM.shuffle(variants)
    return variants


def imported_modules(source: str) -> list[str]:
    """The absolute modules a check imports anywhere (the driver imports and watches them before the candidate)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return sorted(names)


# -- running them -----------------------------------------------------------------------------------------------


def _read_channel(
    stdout: str, variants: Sequence[CheckVariant], *, truncated: bool
) -> tuple[dict[str, str], dict[str, Any]]:
    """The outcome reported for each variant id, and what else the channel said (ready, import_error, forgery)."""
    known = {v.id for v in variants}
    outcomes: dict[str, str] = {}
    notes: dict[str, Any] = {}
    try:
        records = read_records(stdout, truncated=truncated)
    except ForgedChannel as exc:
        notes["forged"] = str(exc)
        records = []
    for record in records:
        if record.get("ready") is True and "ready" not in notes:
            notes["ready"] = True
        elif "import_error" in record:
            notes["import_error"] = record["import_error"]
        elif "integrity" in record:
            notes["forged"] = f"the check's environment was changed: {record['integrity']}"[:500]
            break
        elif record.get("id") in known and record["id"] not in outcomes and record.get("outcome") in _OUTCOMES:
            outcomes[record["id"]] = record["outcome"]
        else:
            notes["forged"] = f"the result channel carried a forged or repeated report: {json.dumps(record)[:200]}"
            break
    return outcomes, notes


async def run_check(sb: Sandbox, task: Task, grading: FunctionGrading) -> RunnerReport:
    """Run the task's check and its canaries against the candidate in ``sb``, an open sandbox holding the tree.

    Call it before any of the candidate's code has run in ``sb``: the judge's files are written here, and a
    failure to write them is then rollbox's (``infra_error``), never the candidate's doing. The one graded test
    is ``ENTRY_POINT[check]``; it passes only when the real check reported ``passed`` exactly once and no canary
    passed.
    """
    test_id = f"{grading.entry_point}[check]"
    missing = (GradedTest(test_id, Outcome.MISSING),)
    if grading.check is None:
        raise ValueError(f"run_check needs a task with a check; {task.id} has none")
    path = task.tests / grading.check
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read the check: {exc}") from exc
    variants, watch = check_variants(source), imported_modules(source)
    directory = f"/tmp/.rollbox-check-{secrets.token_hex(8)}"
    package = resources.files("rollbox.judge")
    try:
        await sb.write_file(f"{directory}/driver.py", package.joinpath("_check_driver.py").read_bytes(), read_only=True)
        await sb.write_file(f"{directory}/_values.py", package.joinpath("_values.py").read_bytes(), read_only=True)
    except OSError as exc:
        detail = f"could not write the check driver into the sandbox: {exc}"
        return RunnerReport(tests=missing, run_status=Status.INFRA_ERROR, detail=detail)
    result = await sb.exec(
        ["python3", "-s", f"{directory}/driver.py", f"/workspace/{grading.module}", grading.entry_point],
        stdin=json.dumps({"checks": [{"id": v.id, "source": v.source} for v in variants], "watch": watch}),
        env=GRADING_ENV,
    )
    if result.status is Status.INFRA_ERROR:
        return RunnerReport(tests=missing, run_status=result.status, detail=result.error)
    outcomes, notes = _read_channel(result.stdout_text, variants, truncated=result.stdout_truncated)
    if "ready" not in notes and "forged" not in notes and result.status in (Status.OK, Status.NONZERO_EXIT):
        # The driver died before any code of the task or the candidate ran: that is rollbox's failure.
        detail = f"the check driver failed before the candidate's code ran: {result.stderr_text[-2000:]}"
        return RunnerReport(tests=missing, run_status=Status.INFRA_ERROR, detail=detail)
    real = next(v for v in variants if not v.canary)
    passed_canaries = [v for v in variants if v.canary and outcomes.get(v.id) == "passed"]
    forged = notes.get("forged")
    if forged is None and passed_canaries:
        forged = f"{len(passed_canaries)} must-fail canary check(s) passed"
    outcome = _OUTCOMES[outcomes[real.id]] if real.id in outcomes else Outcome.MISSING
    return RunnerReport(
        tests=(GradedTest(test_id, outcome),),
        run_status=result.status,
        crashed="import_error" in notes or not outcomes,
        tampered=forged is not None,
        detail=forged,
        cpu_s=result.cpu_s,
        peak_memory_bytes=result.peak_memory_bytes or 0,
    )


def merge_reports(reports: Sequence[RunnerReport]) -> RunnerReport:
    """One report for several runs in one grading (cases, then a check): every test, and the worst of each run.

    The run status is ``infra_error`` if any run had it, else the first status that is neither ``ok`` nor
    ``nonzero_exit``, else ``nonzero_exit`` if any, else ``ok``.
    """
    if not reports:
        raise ValueError("merge_reports needs at least one report")
    statuses = [r.run_status for r in reports]
    if Status.INFRA_ERROR in statuses:
        status = Status.INFRA_ERROR
    else:
        worse = [s for s in statuses if s not in (Status.OK, Status.NONZERO_EXIT)]
        status = worse[0] if worse else (Status.NONZERO_EXIT if Status.NONZERO_EXIT in statuses else Status.OK)
    infra = [r.detail for r in reports if r.run_status is Status.INFRA_ERROR and r.detail]
    tampered = [r.detail for r in reports if r.tampered and r.detail]
    details: list[str | None] = [*infra, *tampered, None]
    return RunnerReport(
        tests=tuple(t for r in reports for t in r.tests),
        run_status=status,
        crashed=any(r.crashed for r in reports),
        tampered=any(r.tampered for r in reports),
        detail=details[0],
        fail_to_pass=tuple(t for r in reports for t in r.fail_to_pass),
        flags=tuple(f for r in reports for f in r.flags),
        cpu_s=sum(r.cpu_s for r in reports),
        peak_memory_bytes=max(r.peak_memory_bytes for r in reports),
    )
