"""Sealed expectations, on the host: what leaves a test module, what stays, that the judge's comparison outside
means what the assertion meant, and that sealed parametrize cases keep the ids pytest gives them."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
import types
import unittest
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from rollbox.judge.integrity._expectations import holds
from rollbox.judge.integrity._seal import SEAL_FUNCTION, seal_module

SHAPES = textwrap.dedent('''
    """Expected 424201 (a docstring can tell)."""
    import unittest

    import pytest

    from calc import f

    LIMIT = 424202


    def test_literals():
        assert f(1) == 424203
        assert 424204 == f(2)
        assert f(3) != 424205
        assert f(4) < 424206
        assert f(5) >= 424207
        assert f(6) in (424208, 1)
        assert 424209 in f(7)
        assert f(8) is None
        assert f(9) == pytest.approx(424210.5, rel=1e-3)
        assert f(10) == 10**6 + 424211
        assert len(f(11)) == 424212


    def test_names():
        """returns 424213"""
        expected = 424214
        assert f(1) == expected
        assert f(2) < LIMIT


    @pytest.mark.parametrize("x, want", [(1, 424215), (2, 424216)])
    def test_columns(x, want):
        assert f(x) == want


    class TestUnit(unittest.TestCase):
        def test_methods(self):
            self.assertEqual(f(1), 424217)
            self.assertIn(f(2), [424218])
            self.assertAlmostEqual(f(3), 424219.5, places=2)
            self.assertCountEqual(f(4), [424220, 424220])
            self.assertGreater(424221, f(5))
            with self.subTest():
                self.assertNotEqual(f(6), 424222)
''')
#: What stays, because it is not a plain expectation the judge can hold, or not certain to be one.
KEPT = textwrap.dedent("""
    import pytest

    from calc import f

    SHARED = 424301


    def helper():
        return SHARED


    def test_computed():
        assert f(1) == sum([424302])
        x = 424303
        assert f(x) == x + 1


    def test_used_otherwise():
        expected = 424304
        assert f(1) == expected
        assert expected > 0


    def test_in_try():
        try:
            assert f(1) == 424305
        except AssertionError:
            pass


    def test_nested():
        def check():
            assert f(1) == 424306
        check()


    def test_shared():
        assert f(1) == SHARED


    def test_identity_of_a_number():
        assert f(1) is 424307


    @pytest.mark.parametrize("x, expected", [(1, 424308)])
    def test_a_rebound_column(x, expected):
        expected = 424309
        assert f(x) == expected
""")


def constants(code: types.CodeType) -> set[Any]:
    found: set[Any] = set()
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            found |= constants(constant)
        elif isinstance(constant, int | float | str):
            found.add(constant)
        elif isinstance(constant, tuple):
            found |= {c for c in constant if isinstance(c, int | float | str)}
    return found


def test_every_plain_expectation_leaves_the_module() -> None:
    sealed = seal_module(SHAPES)
    code = compile(sealed.source, "test_shapes.py", "exec")
    inside = {c for c in constants(code) if isinstance(c, int | float)} | {
        int(c) for c in constants(code) if isinstance(c, str) and c.isdigit()
    }
    numbers = {424200 + n for n in range(1, 23)} | {1424211, 424210.5, 424219.5}
    assert not (inside & numbers), inside & numbers
    assert "4242" not in sealed.source, sealed.source
    assert sorted(v for v in sealed.cases.values()) == [424215, 424216]
    seals = sorted(sealed.seals.values(), key=lambda s: str(s.expected))
    assert {s.compare for s in seals} == {"==", "!=", "<", ">=", "in", "contains", "is", "approx", "almost", "count"}
    assert len(sealed.certain["TestUnit::test_methods"]) == 5 and len(sealed.certain["test_literals"]) == 11


def test_what_cannot_be_sealed_stays() -> None:
    sealed = seal_module(KEPT)
    for n in range(1, 10):
        assert str(424300 + n) in sealed.source, (n, sealed.source)
    assert sealed.seals == {}


def test_a_sealed_module_runs_and_reports_every_value() -> None:
    sealed = seal_module(SHAPES)
    receipts = sealed.receipts
    reported: list[tuple[str, Any, str | None]] = []
    calc = types.ModuleType("calc")
    calc.f = lambda x: {7: [424209], 11: "x" * 424212, 4: [424220, 424220], 8: None}.get(x, x)  # type: ignore[attr-defined]
    sys.modules["calc"] = calc
    try:
        namespace: dict[str, Any] = {SEAL_FUNCTION: lambda i, v, t=None: reported.append((i, v, t)) or receipts[i]}
        exec(compile(sealed.source, "test_shapes.py", "exec"), namespace)
        namespace["test_literals"]()
        namespace["test_columns"](1, next(t for t, v in sealed.cases.items() if v == 424215))
        namespace["TestUnit"]("test_methods").test_methods()
    finally:
        del sys.modules["calc"]
    assert {i for i, _, _ in reported} >= set(sealed.certain["test_literals"])
    verdicts = {
        i: holds(sealed.seals[i], v, sealed.cases[t] if t else sealed.seals[i].expected) for i, v, t in reported
    }
    # !=, contains, is None, len ==; and of the methods: count, <, !=. The rest do not hold.
    assert sum(verdicts.values()) == 7, verdicts


#: (assertion with V for the value and E for the expectation, values to try, expected values)
MEANINGS = [
    ("assert V == E", [1, 1.0, True, "1", [1], (1,), None, 2], [1, 1.0, "1", [1], (1,), {"a": 1}]),
    ("assert V != E", [1, 2, "a"], [1, "a"]),
    ("assert V < E", [1, 2.5, "b", (1, 2)], [2, "a", (1, 3)]),
    ("assert E <= V", [1, 2, 3.5], [2]),
    ("assert V in E", [1, "a", 3], [(1, 2), "abc", {3: 0}]),
    ("assert E in V", ["abc", [1, 2], {"a": 1}], ["a", 1]),
    ("assert V not in E", [1, 5], [[1, 2]]),
    ("assert V is None", [None, 0, False], [None]),
    ("assert V is not True", [True, 1, None], [True]),
    ("assert V == pytest.approx(E)", [0.1 + 0.2, 0.3001, 1, [0.1 + 0.2, 1.0], {"a": 0.30000001}], [0.3, 1, [0.3, 1]]),
    ("assert V == pytest.approx(E, abs=0.01)", [0.305, 0.32], [0.3]),
    ("assert V == pytest.approx(E, rel=0.1)", [105.0, 111.0], [100]),
]


@pytest.mark.parametrize(("template", "values", "expectations"), MEANINGS)
def test_the_judges_comparison_means_what_the_assertion_meant(
    template: str, values: list[Any], expectations: list[Any]
) -> None:
    for expected in expectations:
        source = f"import pytest\n\ndef test_x(V):\n    {template.replace('E', repr(expected))}\n"
        sealed = seal_module(source)
        (seal,) = sealed.seals.values()
        assertion = ast.parse(template.replace("E", repr(expected)).replace("V", "value")).body[0]
        for value in values:
            try:
                exec(compile(ast.Module([assertion], []), "<assertion>", "exec"), {"pytest": pytest, "value": value})
                meant = True
            except (AssertionError, TypeError):
                meant = False
            assert holds(seal, value, seal.expected) is meant, (template, value, expected)


#: (method, its options, whether the expectation comes first, values, expectations)
UNITTEST_MEANINGS = [
    ("assertAlmostEqual", {}, False, [0.30000001, 0.3001], [0.3]),
    ("assertAlmostEqual", {"places": 2}, False, [0.304, 0.31], [0.3]),
    ("assertAlmostEqual", {"delta": 0.5}, False, [1.4, 1.6], [1]),
    ("assertNotAlmostEqual", {"places": 1}, False, [0.31, 0.4], [0.3]),
    ("assertCountEqual", {}, False, [[2, 1, 1], [1, 2], [[1], 2]], [[1, 1, 2], [2, [1]]]),
    ("assertIn", {}, True, ["abc", [1]], ["a", 1]),
    ("assertLessEqual", {}, False, [1, 2, 3], [2]),
]


@pytest.mark.parametrize(("method", "options", "first", "values", "expectations"), UNITTEST_MEANINGS)
def test_unittests_assertions_keep_their_meaning(
    method: str, options: dict[str, float], first: bool, values: list[Any], expectations: list[Any]
) -> None:
    case = unittest.TestCase()
    extra = "".join(f", {k}={v!r}" for k, v in options.items())
    for expected in expectations:
        args = f"{expected!r}, V" if first else f"V, {expected!r}"
        source = f"class T:\n    def test_x(self, V):\n        self.{method}({args}{extra})\n"
        (seal,) = seal_module(source).seals.values()
        for value in values:
            try:
                getattr(case, method)(*((expected, value) if first else (value, expected)), **options)
                meant = True
            except (case.failureException, TypeError):
                meant = False
            assert holds(seal, value, seal.expected) is meant, (method, value, expected)


def test_numbers_of_other_kinds_compare_by_their_value() -> None:
    (seal,) = seal_module("def test_x(V):\n    assert V == pytest.approx(0.5)\n").seals.values()
    assert holds(seal, float(Fraction(1, 2)), 0.5)


PARAMETRIZED = textwrap.dedent("""
    import pytest


    @pytest.mark.parametrize(
        "a, b, expected", [(1, 2, 3), (-1.5, None, True), ("text", "x y", False), ([1], (2,), {"k": 1})]
    )
    def test_values(a, b, expected):
        assert f(a, b) == expected


    @pytest.mark.parametrize("n, expected", [pytest.param(1, 2, id="one"), (3, 4)])
    @pytest.mark.parametrize("m", [10, 20])
    def test_stacked(m, n, expected):
        assert f(m, n) == expected


    @pytest.mark.parametrize("word, expected", [("a", 1), ("b", 2)], ids=["first", None])
    def test_ids(word, expected):
        assert f(word) == expected


    class TestInClass:
        @pytest.mark.parametrize("expected", [0, -0.0, 1e-06, 2 + 3j])
        def test_number(self, expected):
            assert f() == expected


    TABLE = (("camel", "Camel"), ("snake_case", "SnakeCase"))
    MORE = (("x", "X"),)


    @pytest.mark.parametrize(("word", "expected"), TABLE + MORE)
    def test_a_named_table(word, expected):
        assert expected == f(word)
""")


def test_sealed_cases_keep_the_ids_pytest_gives_them(tmp_path: Path) -> None:
    (tmp_path / "test_p.py").write_text(PARAMETRIZED)
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "test_p.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    theirs = sorted(line for line in collected if "::" in line)
    sealed = seal_module(PARAMETRIZED)
    assert len(sealed.cases) == 4 + 2 + 2 + 4 + 3
    (tmp_path / "test_p.py").write_text(sealed.source)
    ours_collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "test_p.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.splitlines()
    from rollbox.judge.runners._pytest_results import Sealed

    mapping = Sealed({"test_p.py": sealed})
    ours = sorted(mapping.real_id(line) for line in ours_collected if "::" in line)
    assert ours == theirs
    for real in ("1-2-3", "text-x y-False", "b-2", "one", "1e-06", "(2+3j)", "camel-Camel", "x-X"):
        assert not any(real in line for line in ours_collected), real


def test_a_module_constant_stays_unless_an_assertion_here_expects_it_and_no_other_module_may_import_it() -> None:
    source = "LIMIT = 424401\nNAME = 'x'\n\n\ndef test_a():\n    assert f() == LIMIT\n"
    assert "424401" not in seal_module(source).source and "NAME = 'x'" in seal_module(source).source
    assert "LIMIT = 424401" in seal_module(source, keep=frozenset({"LIMIT"})).source


TABLES = textwrap.dedent("""
    import pytest

    TABLE = [(1, 424501), (2, 424502)]
    MORE = [(3, 424503)]
    READ = [(4, 424504)]
    MUTATED = [(5, 424505)]
    MUTATED.append((6, 424506))
    IMPORTED = [(7, 424507)]


    @pytest.mark.parametrize("x, want", TABLE)
    def test_table(x, want):
        assert f(x) == want


    @pytest.mark.parametrize(("x", "want"), TABLE + MORE)
    def test_tables(x, want):
        assert want == f(x)


    @pytest.mark.parametrize("x, want", READ)
    def test_read(x, want):
        assert f(x) == want
        assert len(READ) == 1


    @pytest.mark.parametrize("x, want", MUTATED)
    def test_mutated(x, want):
        assert f(x) == want


    @pytest.mark.parametrize("x, want", IMPORTED)
    def test_imported(x, want):
        assert f(x) == want
""")


def test_a_table_kept_in_a_module_constant_is_sealed_as_a_literal_one() -> None:
    # inflection's tests are parametrized so: an always-equal object passed them until these were sealed.
    sealed = seal_module(TABLES, keep=frozenset({"IMPORTED"}))
    assert "TABLE" not in sealed.source and "MORE" not in sealed.source
    for n in (1, 2, 3):
        assert f"42450{n}" not in sealed.source, sealed.source
    assert sorted(v for v in sealed.cases.values() if isinstance(v, int)) == [424501, 424501, 424502, 424502, 424503]
    assert sealed.certain["test_table"] and sealed.certain["test_tables"]
    # Read elsewhere, changed before the decorator runs, or imported by another module: the table stays as it is.
    for n in (4, 5, 6, 7):
        assert f"42450{n}" in sealed.source, sealed.source
    assert "@pytest.mark.parametrize('x, want', READ)" in sealed.source
    assert "@pytest.mark.parametrize('x, want', MUTATED)" in sealed.source
    assert "@pytest.mark.parametrize('x, want', IMPORTED)" in sealed.source
