"""Sealed expectations: the expected values of a pytest module taken out of it, to be compared outside.

A test runs in the candidate's process, where the candidate's code can read anything: the caller's frame, its
locals, its code object's constants and bytecode, the test module's source and the module itself. An expected
value that is anywhere in that process can be read and returned. :func:`seal_module` rewrites a test module so
that its plain expected values are nowhere in it: every assertion that holds a value the test computed against a
constant expectation becomes a call that reports the value (``assert SEAL_FUNCTION(seal_id, value) == receipt``),
and the expectation stays with the judge, which compares the two after the run, outside the candidate's process
(see :mod:`._expectations`). The outcome never returns to the process (the test goes on as if the assertion had
held), so nothing there learns whether a guess was right. The reporting function answers each seal with its
receipt, a random word the judge gives it apart from the code: a test whose reporting was silenced (the function
replaced by one that reports nothing) fails at the assertion itself, wherever it stands, in a loop or a branch too.

Sealed, where the expectation is a constant expression (a literal, arithmetic on literals, ``set()``):

- ``assert V == E`` (either way round), ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``, ``is`` and
  ``is not`` (``None``, ``True``, ``False``), and ``V == pytest.approx(E, rel=.., abs=..)``;
- unittest's ``self.assertEqual`` (and its typed kin, ``assertListEqual``...), ``assertNotEqual``, ``assertIs``,
  ``assertIsNot``, ``assertIn``, ``assertNotIn``, ``assertGreater`` and its kin, ``assertAlmostEqual``,
  ``assertNotAlmostEqual``, ``assertCountEqual``;
- ``E`` may also be a name that holds only such a constant: a local assigned once at the top of the test, a
  module-level global assigned once, or a column of a literal ``pytest.mark.parametrize`` list (or of a table
  kept in module constants that only parametrize lists read: written into each list, and taken out of the module);
  each only where every use of the name is such an expectation. A sealed column's values become opaque tokens,
  and its cases get opaque ids (see :mod:`._parametrize`), so that neither the test's locals nor its id carries
  them.

Every function of the module is sealed so (which are tests depends on pytest's configuration, and a helper that
asserts reports to the test that calls it). Not sealed, and so still in the candidate's process: expectations the
test computes (``a // 3``, a helper's result, an object built from the code under test), assertions in ``try``
blocks or nested functions, expectations passed as arguments to helpers, values fixtures provide. Docstrings are
dropped everywhere. Pure ``ast`` work.
"""

from __future__ import annotations

import ast
import functools
import secrets
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollbox.tasks._constants import UNFOLDABLE, fold

from ._assertions import Assertion, Sealable, assertions
from ._parametrize import LiteralCases, inline_tables, literal_cases, seal_columns

__all__ = ["SEAL_FUNCTION", "Seal", "SealedModule", "seal_module"]

#: What a sealed module calls: ``SEAL_FUNCTION(seal_id, value)``, or ``SEAL_FUNCTION(seal_id, value, token)``; it
#: returns the seal's receipt.
SEAL_FUNCTION = "__rollbox_seal__"


@dataclass(frozen=True)
class Seal:
    """One sealed expectation: how the value a test computed must compare with the expected one."""

    id: str
    #: ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``in``, ``not in``, ``contains``, ``not contains``, ``is``,
    #: ``is not``, ``approx``, ``almost``, ``not almost`` or ``count``.
    compare: str
    #: The expected value; ``None`` for a seal per case (its value comes with the case's token).
    expected: Any = None
    #: ``rel``/``abs`` of ``approx``; ``places``/``delta`` of ``almost``: as written (an ``int`` stays one).
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SealedModule:
    """A test module with its plain expectations taken out, and what the judge keeps of them."""

    #: The module without them, and without docstrings.
    source: str
    seals: Mapping[str, Seal]
    #: Token of a sealed parametrize case -> the expected value it stands for.
    cases: Mapping[str, Any]
    #: ``test_x`` or ``TestClass::test_x`` (every function, as any may be a test) -> the seals that report whenever
    #: it completes.
    certain: Mapping[str, tuple[str, ...]]
    #: Opaque id of a parametrize case, as the run names it -> the id pytest gives the case.
    ids: Mapping[str, str]
    #: Seal id -> the receipt the sealed assertion must get back from the reporting function.
    receipts: Mapping[str, str] = field(default_factory=dict)
    #: ``test_x`` or ``TestClass::test_x`` -> the opaque id of each case of its sealed parametrize lists: each must
    #: be in the id of a test the run collects (a count of cases would let one case stand for the others).
    case_ids: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    #: Token of a sealed parametrize case -> the opaque id of its case: its value counts only in a test of that case.
    token_cases: Mapping[str, str] = field(default_factory=dict)


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function of the module and method of its classes, named as pytest names a test in an id
    (``Class::method``): which of them are tests depends on the configuration (``python_functions``), and a helper
    that asserts reports to the test that calls it."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield f"{node.name}::{item.name}", item


def _bindings(node: ast.AST) -> Iterator[str]:
    """Every name bound anywhere under ``node``: assignments, loops, imports, parameters, ``global``..."""
    for found in ast.walk(node):
        if isinstance(found, ast.Name) and isinstance(found.ctx, ast.Store | ast.Del):
            yield found.id
        elif isinstance(found, ast.arg):
            yield found.arg
        elif isinstance(found, ast.alias):
            yield (found.asname or found.name).partition(".")[0]
        elif isinstance(found, ast.Global | ast.Nonlocal):
            yield from found.names
        elif isinstance(found, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) or (
            isinstance(found, ast.ExceptHandler) and found.name
        ):
            yield str(found.name)


def _reads(node: ast.AST) -> Iterator[ast.Name]:
    for found in ast.walk(node):
        if isinstance(found, ast.Name) and isinstance(found.ctx, ast.Load):
            yield found


def _constants(body: list[ast.stmt], scope: ast.AST) -> dict[str, tuple[ast.stmt, Any]]:
    """Names one top-level statement of ``body`` assigns a constant, bound nowhere else in ``scope``."""
    counts: dict[str, int] = {}
    for name in _bindings(scope):
        counts[name] = counts.get(name, 0) + 1
    found: dict[str, tuple[ast.stmt, Any]] = {}
    for statement in body:
        if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
            target = statement.targets[0]
            if isinstance(target, ast.Name) and counts.get(target.id) == 1:
                value = fold(statement.value)
                if value is not UNFOLDABLE:
                    found[target.id] = (statement, value)
    return found


def _columns(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, tuple[ast.Call, LiteralCases, int]]:
    """Parameters of the test that a literal parametrize list gives, with the list and their column in it."""
    parameters = {a.arg for a in (*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs)}
    found: dict[str, tuple[ast.Call, LiteralCases, int]] = {}
    for decorator in function.decorator_list:
        cases = literal_cases(decorator)
        if cases is not None:
            assert isinstance(decorator, ast.Call)
            for column, name in enumerate(cases.argnames):
                if name in parameters:
                    found[name] = (decorator, cases, column)
    return found


@dataclass
class _Test:
    """One test function and what in it can be sealed."""

    name: str
    function: ast.FunctionDef | ast.AsyncFunctionDef
    assertions: list[Assertion]
    constants: dict[str, tuple[ast.stmt, Any]]
    columns: dict[str, tuple[ast.Call, LiteralCases, int]]
    #: Names of those, and of module constants, whose every read in the test is an expectation of an assertion.
    expectations_only: set[str]


def _numbers(values: list[Any]) -> bool:
    """Whether ``pytest.approx`` compares these within tolerance: numbers, or lists, tuples or dicts of them."""
    for value in values:
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else [value]
        if not all(type(v) in (int, float, complex) for v in items):
            return False
    return True


def _survey(tree: ast.Module, module_constants: Mapping[str, tuple[ast.stmt, Any]]) -> list[_Test]:
    tests = []
    for name, function in _functions(tree):
        constants = _constants(function.body, function)
        bound = Counter(_bindings(function))
        columns = {n: c for n, c in _columns(function).items() if bound[n] == 1}  # the parameter, never rebound
        rebound = set(bound)
        names = set(constants) | set(columns) | (set(module_constants) - rebound)
        known = {**{n: [v] for n, (_, v) in module_constants.items()}, **{n: [v] for n, (_, v) in constants.items()}}
        known.update({n: [row[c] for row in cases.values] for n, (_, cases, c) in columns.items()})
        found = [
            a
            for a in assertions(function.body, Sealable(names))
            if a.compare != "approx"
            or _numbers(known[a.expected.id] if isinstance(a.expected, ast.Name) else [fold(a.expected)])
        ]
        expected = {id(a.expected) for a in found if isinstance(a.expected, ast.Name)}
        elsewhere = {n.id for n in _reads(function) if id(n) not in expected}
        tests.append(_Test(name, function, found, constants, columns, names - elsewhere))
    return tests


def seal_module(source: str, *, keep: frozenset[str] = frozenset()) -> SealedModule:
    """``source`` with its plain expectations sealed (see the module docstring), and what the judge keeps.

    A module constant is sealed only where an assertion of this module uses it as an expectation, and never when
    its name is in ``keep`` (names other modules may import). The same arguments give the same result for the life
    of the process (tokens and ids are drawn once).

    Raises:
        SyntaxError: ``source`` is not valid Python.
    """
    return _seal(source, keep)


@functools.lru_cache(maxsize=256)  # a task is graded many times
def _seal(source: str, keep: frozenset[str]) -> SealedModule:
    tree = ast.parse(source)
    constants = _constants(tree.body, tree)
    tables = inline_tables(tree, {n: v for n, (_, v) in constants.items()}, keep)  # now read by no one
    module_constants = {n: c for n, c in constants.items() if n not in tables}
    tests = _survey(tree, module_constants)
    # A module constant is sealed only where no code but the tests' expectations reads it.
    in_tests = {id(n) for test in tests for n in ast.walk(test.function)}
    read_outside = {n.id for n in _reads(tree) if id(n) not in in_tests}
    read_otherwise = {n for t in tests for n in module_constants if n in _names_read(t) - t.expectations_only}
    used = {a.expected.id for t in tests for a in t.assertions if isinstance(a.expected, ast.Name)}
    sealed_globals = (set(module_constants) & used) - read_outside - read_otherwise - keep
    replacements: dict[int, ast.stmt | None] = {id(module_constants[n][0]): None for n in sealed_globals}
    replacements.update({id(constants[n][0]): None for n in tables})
    seals: dict[str, Seal] = {}
    cases: dict[str, Any] = {}
    certain: dict[str, tuple[str, ...]] = {}
    ids: dict[str, str] = {}
    receipts: dict[str, str] = {}
    case_ids: dict[str, tuple[str, ...]] = {}
    token_cases: dict[str, str] = {}
    for test in tests:
        values = {n: module_constants[n][1] for n in sealed_globals if n in test.expectations_only}
        values.update({n: v for n, (_, v) in test.constants.items() if n in test.expectations_only})
        columns = {n: c for n, c in test.columns.items() if n in test.expectations_only}
        tokens = {name: [secrets.token_hex(8) for _ in cases_.values] for name, (_, cases_, _) in columns.items()}
        for name, (_, cases_, column) in columns.items():
            cases.update(zip(tokens[name], (v[column] for v in cases_.values), strict=True))
        for decorator, cases_ in {id(d): (d, c) for d, c, _ in columns.values()}.values():
            by_column = {c: tokens[n] for n, (d, _, c) in columns.items() if d is decorator}
            opaque = seal_columns(decorator, cases_, by_column)  # opaque id -> pytest's id, case by case
            ids.update(opaque)
            case_ids[test.name] = (*case_ids.get(test.name, ()), *opaque)
            for drawn in by_column.values():  # a column's tokens, case by case
                token_cases.update(zip(drawn, opaque, strict=True))
        sealable = Sealable(set(values) | set(columns))
        certain_seals: list[str] = []
        for assertion in test.assertions:
            if not sealable(assertion.expected):
                continue
            seal_id = secrets.token_hex(8)
            args: list[ast.expr] = [ast.Constant(seal_id), assertion.value]
            expected = assertion.expected
            if isinstance(expected, ast.Name) and expected.id in columns:
                args.append(ast.Name(expected.id, ast.Load()))
                value = None
            else:
                value = values[expected.id] if isinstance(expected, ast.Name) else fold(expected)
            seals[seal_id] = Seal(seal_id, assertion.compare, value, assertion.options)
            receipts[seal_id] = secrets.token_hex(8)
            call = ast.Call(ast.Name(SEAL_FUNCTION, ast.Load()), args, [])
            check = ast.Assert(ast.Compare(call, [ast.Eq()], [ast.Constant(receipts[seal_id])]), None)
            replacements[id(assertion.statement)] = ast.copy_location(check, assertion.statement)
            if assertion.certain:
                certain_seals.append(seal_id)
        certain[test.name] = tuple(certain_seals)
        replacements.update({id(test.constants[n][0]): None for n in values if n in test.constants})
    tree = _Rewrite(replacements).visit(tree)
    _drop_docstrings(tree)
    source = ast.unparse(ast.fix_missing_locations(tree))
    return SealedModule(source, seals, cases, certain, ids, receipts, case_ids, token_cases)


def _names_read(test: _Test) -> set[str]:
    return {n.id for n in _reads(test.function)}


class _Rewrite(ast.NodeTransformer):
    """Replace (or remove) statements by identity; a block left empty gets ``pass``."""

    def __init__(self, replacements: Mapping[int, ast.stmt | None]) -> None:
        self.replacements = replacements

    def visit(self, node: ast.AST) -> Any:
        if id(node) in self.replacements:
            return self.replacements[id(node)]
        result = super().visit(node)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(result, name, None)
            if name == "body" and isinstance(block, list) and not block and not isinstance(result, ast.Module):
                block.append(ast.Pass())
        return result


def _drop_docstrings(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            first = body[0] if body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                body[0:1] = [] if len(body) > 1 or isinstance(node, ast.Module) else [ast.Pass()]
