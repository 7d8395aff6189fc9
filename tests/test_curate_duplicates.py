"""Duplicates by construction: the same bug written two ways normalises to one form, two different bugs do not,
and a task.toml key is set in place, an array spanning lines included."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rollbox.curate._duplicates import normalised
from rollbox.curate._mutate import Operator, mutants
from rollbox.curate._toml import set_key, toml_list

OPERATORS = ["==", "!=", "<", "<=", ">", ">=", "in", "not in", "is", "is not"]
NEGATION = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<", "in": "not in", "not in": "in"}
NEGATION |= {"is": "is not", "is not": "is"}
MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
NAMES = st.sampled_from(["a", "b", "x[0]", "f(y)", "n + 1"])


def module(expression: str) -> str:
    return f"def check(a, b, x, y, n, f):\n    # why it matters\n    return {expression}\n"


@settings(max_examples=200, deadline=None)
@given(NAMES, st.sampled_from(OPERATORS), NAMES)
def test_a_negated_comparison_is_its_inverse(left: str, op: str, right: str) -> None:
    assert normalised(module(f"not {left} {op} {right}")) == normalised(module(f"{left} {NEGATION[op]} {right}"))
    assert normalised(module(f"not not ({left} {op} {right})")) == normalised(module(f"{left} {op} {right}"))
    if op in MIRROR:
        assert normalised(module(f"{left} {op} {right}")) == normalised(module(f"{right} {MIRROR[op]} {left}"))


@settings(max_examples=200, deadline=None)
@given(NAMES, st.sampled_from(OPERATORS), NAMES)
def test_an_if_with_an_else_reads_the_same_either_way_round(left: str, op: str, right: str) -> None:
    def branch(test: str, first: int, second: int) -> str:
        return f"def g(a, b, x, y, n, f):\n    if {test}:\n        return {first}\n    else:\n        return {second}\n"

    straight = branch(f"{left} {op} {right}", 1, 2)
    negated = branch(f"not {left} {NEGATION[op]} {right}", 1, 2)
    swapped = branch(f"{left} {NEGATION[op]} {right}", 2, 1)
    assert normalised(straight) == normalised(negated) == normalised(swapped)


def test_different_bugs_stay_different() -> None:
    source = "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n"
    source += "    return x\n"
    forms = {normalised(m.source) for m in mutants(source)}
    # Mutants that differ as programs differ as normalised ones: only a rewrite of the same test may merge.
    merged = len(mutants(source)) - len(forms)
    assert merged <= len(mutants(source, operators=[Operator.COMPARISON_FLIP]))
    assert normalised(source) not in forms


def test_what_is_no_python_is_compared_as_it_is() -> None:
    assert normalised("def (") == "def ("
    assert normalised("x = 1\n") == ast.dump(ast.parse("x = 1\n"), annotate_fields=False)


def test_set_key_replaces_a_value_across_lines(tmp_path: Path) -> None:
    toml = tmp_path / "task.toml"
    toml.write_text(
        'id = "t"\n\n[grading]\nrunner = "pytest"\nfail_to_pass = [\n  "tests/a.py::t[x-]]",\n]\n'
        'pass_to_pass = ["p"]\n\n[limits]\ntimeout = "5s"\n'
    )
    set_key(toml, "grading", "fail_to_pass", toml_list(["tests/a.py::t[x-]]", "tests/b.py::u"]))
    set_key(toml, "limits", "cpu_time", '"9s"')
    set_key(toml, "metadata", "note", '"added"')
    data = tomllib.loads(toml.read_text())
    assert data["grading"] == {
        "runner": "pytest",
        "fail_to_pass": ["tests/a.py::t[x-]]", "tests/b.py::u"],
        "pass_to_pass": ["p"],
    }
    assert data["limits"] == {"timeout": "5s", "cpu_time": "9s"} and data["metadata"] == {"note": "added"}
