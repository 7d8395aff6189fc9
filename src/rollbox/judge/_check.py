"""Check-based function grading: the task's own ``check(candidate)``, run in the candidate's process, with canaries.

Some assertions cannot be written as cases (tolerances, truthiness, properties, randomized inputs), so a
function task may name ``check = "check.py"``: a file in tests/ defining ``check(candidate)``. It has to run in
the candidate's process, where the candidate can reach everything (its frames, its code, the result channel), so
no single run is trusted. The check is graded by comparing runs:

- variants: the real check, and up to two must-fail canaries: copies with one expectation changed (a literal
  replaced by another of its type, sign and count of significant digits; a tolerance's target moved the same way;
  else the one opposite assertion: ``is True``/``is False``, ``==``/``!=``, ``<``/``>=``, ``X``/``not X``). All
  are printed by :func:`ast.unparse` alike and carry fresh random ids;
- each variant runs alone, in random order, in a fresh sandbox of its own built from the same files (the tree
  as it was before any of the candidate's code ran), through a driver process that knows only that variant and
  its id. No run sees another variant, nor anything left by another run (files, processes, IPC, pids);
- ``tampered``: a canary passed while the real check passed, or a run's channel carried a forged or repeated
  record, or a builtin or a name the check relies on was rebound. A canary passed while the real check did not
  pass is not counted: honest code that is wrong exactly where a canary was flipped passes that canary;
- every value the candidate returns is round-tripped through the strict value codec before the check sees it.

Guaranteed: a candidate that subverts whatever check runs in its process (rewriting the check's code, forging
its completion record and exiting) passes the canaries too, and is ``tampered`` whenever the check has one.
Honest code that passes the real check fails every canary: only assertions that certainly run when the check
completes (top-level ones, and those directly in ``for`` loops over a non-empty constant range) are mutated, and
a mutated expectation excludes the original. Missing records are never passes.

Not guaranteed: a check with no such assertion that involves the candidate gets no canary, and its pass is the
driver's completion record alone, which a candidate can forge. A canary differs from the real check only in one
expectation, so a candidate that knows it (a public benchmark's check) or guesses it (a flipped comparison
reads less natural) can pass the real check alone. A candidate that subverts each run at random, independently,
keeps a small positive expected reward under a -1 penalty: p(2(1-p)^n - 1), at most 1/8 with one canary and
about 1/15 with two. Covert channels between runs through the host (timing, page cache) are not closed.
"""

from __future__ import annotations

import ast
import copy
import json
import math
import secrets
import string
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from importlib import resources
from typing import Any

from rollbox.sandbox import ExecResult, Sandbox, Status
from rollbox.tasks import FunctionGrading, Task, TaskFormatError

from ._channel import GRADING_ENV, ForgedChannel, read_records
from ._report import RunnerReport
from ._verdict import GradedTest, Outcome

__all__ = ["CheckVariant", "check_variants", "imported_modules", "run_check"]

_RANDOM = secrets.SystemRandom()
_OUTCOMES = {"passed": Outcome.PASSED, "failed": Outcome.FAILED, "error": Outcome.ERROR}
_CANARIES = 2
_LIMITS = (Status.TIMEOUT, Status.CPU_TIME_LIMIT, Status.MEMORY_LIMIT)
_TEXT_CLASSES = (string.ascii_lowercase, string.ascii_uppercase, string.digits, string.punctuation)


@dataclass(frozen=True)
class CheckVariant:
    """One check module sent to a driver: the task's own check, or a canary derived from it."""

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


def _resembling_number(value: int | float, beyond: float = 0.0) -> int | float | None:
    """A number of ``value``'s type, sign and count of significant digits, in its decade when it can be, more
    than ``beyond`` away from it (``None`` for an infinite or NaN float): 0.33 becomes 0.87, 1e-06 becomes 4e-06."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    assert isinstance(exponent, int)
    count = len(digits) if value else 1
    low, high = 10 ** (count - 1), 10**count - 1
    for shift in range(400):  # up a decade when ``beyond`` leaves no room in this one
        for _ in range(32):
            mantissa = _RANDOM.randint(low, high)
            if count > 1 and mantissa % 10 == 0:
                continue  # a trailing zero would drop a significant digit
            other = type(value)(Decimal(f"{'-' if sign else ''}{mantissa}e{exponent + shift}"))
            if isinstance(other, float) and not math.isfinite(other):
                return None
            if other != value and abs(other - value) > beyond:
                return other
    return None


def _resembling_text(value: str) -> str | None:
    """``value`` with one character replaced by another of its class (a letter of the same case, a digit, ...)."""
    spots = [(at, pool) for at, char in enumerate(value) for pool in _TEXT_CLASSES if char in pool]
    if not spots:
        return None
    at, pool = _RANDOM.choice([s for s in spots if s[1] is not string.punctuation] or spots)
    return value[:at] + _RANDOM.choice([c for c in pool if c != value[at]]) + value[at + 1 :]


def _mutated(value: Any) -> Any:
    """A value of the same type and look that no value equal to ``value`` can equal (or _NOT_LITERAL)."""
    kind = type(value)
    other: Any = None
    if kind is bool:
        other = not value
    elif kind in (int, float):
        other = _resembling_number(value)
    elif kind is str:
        other = _resembling_text(value)
    elif kind in (list, tuple, dict):
        keys = list(value) if kind is dict else list(range(len(value)))
        _RANDOM.shuffle(keys)
        for key in keys:
            item = _mutated(value[key])
            if item is not _NOT_LITERAL:
                return {**value, key: item} if kind is dict else kind([*value[:key], item, *value[key + 1 :]])
    return _NOT_LITERAL if other is None else other


def _literal_node(value: Any) -> ast.expr:
    return ast.parse(repr(value), mode="eval").body


def _expected(node: ast.expr) -> tuple[Any, ast.expr | None]:
    """The literal an expected value is spelled with, and the ``tuple(...)``/``list(...)`` call around it if any."""
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(node, ast.Call) and isinstance(func, ast.Name) and func.id in ("tuple", "list"):
        inner = _literal(node.args[0]) if len(node.args) == 1 and not node.keywords else _NOT_LITERAL
        return (inner, node) if type(inner) in (list, tuple) else (_NOT_LITERAL, None)
    return _literal(node), None


def _respelled(value: Any, call: ast.expr | None) -> ast.expr:
    if call is None:
        return _literal_node(value)
    wrapped = copy.deepcopy(call)
    assert isinstance(wrapped, ast.Call)
    wrapped.args = [_literal_node(value)]
    return wrapped


def _retarget(test: ast.expr) -> ast.expr | None:
    """``test`` with its expected value replaced by one it cannot share (None when it has no literal one)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    op, left, right = test.ops[0], test.left, test.comparators[0]
    mutated = copy.deepcopy(test)
    if isinstance(op, ast.Eq):
        for node, on_right in ((right, True), (left, False)):
            value, call = _expected(node)
            other = _NOT_LITERAL if value is _NOT_LITERAL else _mutated(value)
            if other is not _NOT_LITERAL:
                if on_right:
                    mutated.comparators = [_respelled(other, call)]
                else:
                    mutated.left = _respelled(other, call)
                return mutated
        return None
    # abs(X - TARGET) < TOL (or TARGET - X): move TARGET by more than three times the tolerance.
    if not (isinstance(op, ast.Lt | ast.LtE) and isinstance(left, ast.Call) and len(left.args) == 1):
        return None
    tolerance, inner = _literal(right), left.args[0]
    if ast.unparse(left.func) not in ("abs", "math.fabs") or type(tolerance) not in (int, float):
        return None
    if not (0 < tolerance < 1e15 and isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub)):
        return None
    for attribute in ("right", "left"):
        target = _literal(getattr(inner, attribute))
        if type(target) in (int, float):
            moved = _resembling_number(target, beyond=3 * tolerance)
            if moved is None:
                return None
            mutated_left = mutated.left
            assert isinstance(mutated_left, ast.Call) and isinstance(mutated_left.args[0], ast.BinOp)
            setattr(mutated_left.args[0], attribute, _literal_node(moved))
            return mutated
    return None


_OPPOSITE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
}


def _flipped(test: ast.expr) -> ast.expr:
    """The one opposite of ``test``: ``is True``/``is False``, then the opposite operator, else negation."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and type(right.value) is bool:
            return ast.Compare(left=test.left, ops=[op], comparators=[ast.Constant(not right.value)])
        if type(op) in _OPPOSITE:
            return ast.Compare(left=test.left, ops=[_OPPOSITE[type(op)]()], comparators=test.comparators)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _names(nodes: Iterable[ast.AST]) -> set[str]:
    return {n.id for node in nodes for n in ast.walk(node) if isinstance(n, ast.Name)}


def _tainted(function: ast.FunctionDef) -> set[str]:
    """The candidate's parameter, and every name the check assigns (or mutates) from a value that uses one."""
    flows: list[tuple[set[str], ast.AST]] = []
    for node in ast.walk(function):
        if isinstance(node, ast.Assign):
            flows.append((_names(node.targets), node.value))
        elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            flows.append((_names([node.target]), node.value))
        elif isinstance(node, ast.For | ast.comprehension):
            flows.append((_names([node.target]), node.iter))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # results.append(...)
            flows.append((_names([node.func.value]), node))
    tainted = {function.args.args[0].arg}
    grown = True
    while grown:
        grown = False
        for targets, value in flows:
            if not targets <= tainted and _names([value]) & tainted:
                tainted |= targets
                grown = True
    return tainted


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


def _certain_asserts(body: Sequence[ast.stmt], tainted: set[str]) -> Iterator[ast.Assert]:
    """Assertions that use the candidate's results and surely run whenever the check completes."""
    for statement in body:
        if isinstance(statement, ast.Assert):
            if _names([statement.test]) & tainted:
                yield statement
        elif (
            isinstance(statement, ast.For)
            and _nonempty_range(statement.iter)
            and not _jumps(statement.body, (ast.Break, ast.Continue, ast.Return))
        ):
            yield from _certain_asserts(statement.body, tainted)
        if _jumps([statement], (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
            return


def _canaries(tree: ast.Module) -> list[str]:
    """Up to two distinct canary sources: retargeted expectations where there are any, else flipped assertions."""
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks or not checks[-1].args.args:
        return []
    spots = list(_certain_asserts(checks[-1].body, _tainted(checks[-1])))
    retargetable = [s for s in spots if _retarget(s.test) is not None]
    if retargetable:
        tries = [(s, _retarget(s.test)) for s in _RANDOM.choices(retargetable, k=4 * _CANARIES)]
    else:
        tries = [(s, _flipped(s.test)) for s in _RANDOM.sample(spots, min(_CANARIES, len(spots)))]
    real, canaries = ast.unparse(tree), list[str]()
    for spot, test in tries:
        if test is None or len(canaries) == _CANARIES:
            continue
        original, spot.test = spot.test, test
        canary = ast.unparse(tree)
        spot.test = original
        if canary != real and canary not in canaries:
            canaries.append(canary)
    return canaries


def check_variants(source: str) -> list[CheckVariant]:
    """The task's check and its must-fail canaries, each under a fresh random id, in random order.

    All variants are printed by :func:`ast.unparse` alike, so that only the changed expectation tells them
    apart. A source that does not parse gives the real check alone (it will fail to load: an error); so does a
    check without an assertion that surely runs and uses the candidate's results.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return [CheckVariant(secrets.token_hex(8), source, canary=False)]
    variants = [CheckVariant(secrets.token_hex(8), ast.unparse(tree), canary=False)]
    variants += [CheckVariant(secrets.token_hex(8), c, canary=True) for c in _canaries(tree)]
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

#: Lists the regular files under the working directory (/workspace) with their modes, and its symbolic links with
#: their targets, as JSON on stdout. It runs before any of the candidate's code, and isolated from it (-I: neither
#: the working directory nor PYTHON* variables), so its answer is rollbox's own.
_LISTER = """
import json, os, stat, sys
top, files, links, stack = os.getcwd(), [], [], [os.getcwd()]
while stack:
    with os.scandir(stack.pop()) as entries:
        for entry in entries:
            mode, path = entry.stat(follow_symlinks=False).st_mode, os.path.relpath(entry.path, top)
            if stat.S_ISDIR(mode):
                stack.append(entry.path)
            elif stat.S_ISREG(mode):
                files.append([path, stat.S_IMODE(mode)])
            elif stat.S_ISLNK(mode):
                links.append([path, os.readlink(entry.path)])
sys.stdout.write(json.dumps({"files": files, "links": links}))
"""


@dataclass(frozen=True)
class _Tree:
    """The graded tree as it was before any of the candidate's code ran: what every variant's sandbox holds."""

    #: (path, mode, content), writable ones first: a read-only write makes the directories it creates read-only.
    files: list[tuple[str, int, bytes]]
    #: (path, target)
    links: list[tuple[str, str]]

    async def write(self, sb: Sandbox) -> None:
        """Write the tree into ``sb``'s /workspace."""
        for path, mode, data in self.files:
            await sb.write_file(path, data, mode=mode, read_only=not mode & 0o200)
        for path, target in self.links:
            await sb.write_link(path, target)


@dataclass(frozen=True)
class _Run:
    """One variant's run: its result, the outcome its completion record gave, and what else its channel said."""

    variant: CheckVariant
    result: ExecResult
    outcome: str | None
    notes: dict[str, Any]


def _read_channel(stdout: str, variant_id: str, *, truncated: bool) -> tuple[str | None, dict[str, Any]]:
    """The outcome one run reported for its variant, and what else it said (ready, import_error, forged)."""
    outcome: str | None = None
    notes: dict[str, Any] = {}
    try:
        records = read_records(stdout, truncated=truncated)
    except ForgedChannel as exc:
        notes["forged"] = str(exc)
        records = []
    for record in records:
        if record.get("ready") is True and "ready" not in notes:
            notes["ready"] = True
        elif "import_error" in record and "import_error" not in notes:
            notes["import_error"] = record["import_error"]
        elif "integrity" in record:
            notes["forged"] = f"the check's environment was changed: {record['integrity']}"[:500]
            break
        elif record.get("id") == variant_id and outcome is None and record.get("outcome") in _OUTCOMES:
            outcome = record["outcome"]
        else:
            notes["forged"] = f"the result channel carried a forged or repeated report: {json.dumps(record)[:200]}"
            break
    return outcome, notes


async def _read_tree(sb: Sandbox) -> _Tree | ExecResult:
    """The tree in ``sb``'s /workspace, or the failed run of the lister."""
    listing = await sb.exec(["python3", "-I", "-S", "-B", "-c", _LISTER], env=GRADING_ENV)
    if listing.status is not Status.OK:
        return listing
    found = json.loads(listing.stdout_text)
    files = [(path, mode, await sb.read_file(path)) for path, mode in found["files"]]
    files.sort(key=lambda f: not f[1] & 0o200)
    return _Tree(files, [(path, target) for path, target in found["links"]])


async def _run_variant(sb: Sandbox, tree: _Tree, variant: CheckVariant, watch: list[str], argv: list[str]) -> _Run:
    """Run one variant in a fresh sandbox like ``sb``, holding ``tree`` and the driver (at ``argv[2]``)."""
    package, values = resources.files("rollbox.judge"), resources.files("rollbox.tasks") / "_values.py"
    directory = argv[2].rsplit("/", 1)[0]
    async with Sandbox(limits=sb.limits, network=sb.network, backend=sb.backend) as box:
        try:
            await tree.write(box)
            for name, source in (("driver.py", package / "_check_driver.py"), ("_values.py", values)):
                await box.write_file(f"{directory}/{name}", source.read_bytes(), read_only=True)
        except OSError as exc:  # the same files fitted in ``sb``, under the same limits
            result = ExecResult.infra_error(f"could not write the graded files into a check sandbox: {exc}")
        else:
            request = {"id": variant.id, "source": variant.source, "watch": watch}
            result = await box.exec(argv, stdin=json.dumps(request), env=GRADING_ENV)
    return _Run(variant, result, *_read_channel(result.stdout_text, variant.id, truncated=result.stdout_truncated))


def _settled(runs: Sequence[_Run]) -> bool:
    """Whether the runs so far decide the grade, so that the variants left need not run."""
    last = runs[-1]
    if "forged" in last.notes:
        return True
    real = next((r for r in runs if not r.variant.canary), None)
    if real is None:
        # A canary at a limit before the real check ran stops it: honest code runs a canary no longer than it.
        return last.result.status in _LIMITS
    return real.outcome != "passed" or any(r.variant.canary and r.outcome == "passed" for r in runs)


def _report(test_id: str, runs: Sequence[_Run]) -> RunnerReport:
    real = next((r for r in runs if not r.variant.canary), None)
    deciding = real or runs[-1]
    forged = next((r.notes["forged"] for r in runs if "forged" in r.notes), None)
    canaries = sum(r.variant.canary and r.outcome == "passed" for r in runs)
    if forged is None and real is not None and real.outcome == "passed" and canaries:
        forged = f"{canaries} must-fail canary check(s) passed, as did the real check"
    outcome = _OUTCOMES[real.outcome] if real is not None and real.outcome is not None else Outcome.MISSING
    return RunnerReport(
        tests=(GradedTest(test_id, outcome),),
        run_status=deciding.result.status,
        crashed="import_error" in deciding.notes or deciding.outcome is None,
        tampered=forged is not None,
        detail=forged,
        cpu_s=sum(r.result.cpu_s for r in runs),
        peak_memory_bytes=max(r.result.peak_memory_bytes or 0 for r in runs),
    )


async def run_check(sb: Sandbox, task: Task, grading: FunctionGrading) -> RunnerReport:
    """Run the task's check and its canaries against the candidate whose tree ``sb`` holds in /workspace.

    Call it before any of the candidate's code has run in ``sb``: the files are listed and read from ``sb``
    then, and ``sb`` runs nothing else. Each variant runs in a fresh sandbox of ``sb``'s kind and limits that
    holds those files; a failure to set one up is rollbox's (``infra_error``), never the candidate's doing. The
    one graded test is ``ENTRY_POINT[check]``, with the outcome of the real check's completion record (``missing``
    without one). Variants left to run once the grade is decided (the real check did not pass, a canary passed
    with it, a forgery) are skipped, and so are all of them when a canary hits a limit before the real check ran.
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
    try:
        tree = await _read_tree(sb)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        tree = ExecResult.infra_error(f"could not read the graded files back from the sandbox: {exc}")
    if isinstance(tree, ExecResult):
        if tree.status in (Status.INFRA_ERROR, Status.NONZERO_EXIT, Status.SIGNALED):
            detail = tree.error or f"listing the graded files failed: {tree.stderr_text[-2000:]}"
            return RunnerReport(tests=missing, run_status=Status.INFRA_ERROR, detail=detail)
        return RunnerReport(tests=missing, run_status=tree.status, crashed=True)  # too many files to list
    driver = f"/tmp/.rollbox-check-{secrets.token_hex(8)}/driver.py"
    argv = ["python3", "-s", driver, f"/workspace/{grading.module}", grading.entry_point]
    runs: list[_Run] = []
    for variant in variants:
        run = await _run_variant(sb, tree, variant, watch, argv)
        if run.result.status is Status.INFRA_ERROR:
            return RunnerReport(tests=missing, run_status=Status.INFRA_ERROR, detail=run.result.error)
        if (
            "ready" not in run.notes
            and "forged" not in run.notes
            and run.result.status in (Status.OK, Status.NONZERO_EXIT)
        ):
            # The driver died before any code of the task or the candidate ran: that is rollbox's failure.
            detail = f"the check driver failed before the candidate's code ran: {run.result.stderr_text[-2000:]}"
            return RunnerReport(tests=missing, run_status=Status.INFRA_ERROR, detail=detail)
        runs.append(run)
        if _settled(runs):
            break
    return _report(test_id, runs)
