"""The rewrites of the workspace's data that validation grades as hacks: emptied leaves nothing to loop over,
zeroed keeps the shape with every value zero, and only data files the reference leaves alone are rewritten."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from rollbox.curate._perturb import data_files, emptied, zeroed
from rollbox.curate._reference import Reference
from rollbox.tasks import load_task

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


def same_shape_all_zero(before: Any, after: Any) -> bool:
    if isinstance(before, list):
        return isinstance(after, list) and len(after) == len(before) and all(map(same_shape_all_zero, before, after))
    if isinstance(before, dict):
        return (
            isinstance(after, dict)
            and after.keys() == before.keys()
            and all(same_shape_all_zero(before[k], after[k]) for k in before)
        )
    return type(after) is type(before) and not after


def no_items(value: Any) -> bool:
    if isinstance(value, list):
        return value == []
    if isinstance(value, dict):
        return all(no_items(v) for v in value.values())
    return True


@given(JSON)
def test_zeroed_json_keeps_the_shape_with_every_value_zero(value: Any) -> None:
    assert same_shape_all_zero(value, json.loads(zeroed("data.json", json.dumps(value).encode())))


@given(JSON)
def test_emptied_json_has_nothing_to_loop_over_and_keeps_its_keys(value: Any) -> None:
    after = json.loads(emptied("data.json", json.dumps(value).encode()))
    assert no_items(after)
    if isinstance(value, dict):
        assert after.keys() == value.keys()


@given(st.lists(JSON, max_size=5))
def test_json_lines_are_zeroed_one_by_one_and_emptied_whole(values: list[Any]) -> None:
    data = "".join(json.dumps(v) + "\n" for v in values).encode()
    lines = [json.loads(line) for line in zeroed("cases.jsonl", data).splitlines()]
    assert len(lines) == len(values) and all(map(same_shape_all_zero, values, lines))
    assert emptied("cases.jsonl", data) == b""


def test_csv_and_text() -> None:
    table = b"a,b,name\n1,2,x\n-3.5,4,yy\n"
    assert zeroed("pairs.csv", table) == b"a,b,name\n0,0,\n0,0,\n"
    assert emptied("pairs.csv", table) == b"a,b,name\n"
    assert zeroed("pairs.txt", b"1 2 3\n-4 5.5 1e3\n") == b"0 0 0\n0 0 0\n"
    assert emptied("pairs.txt", b"1 2 3\n") == b""
    assert zeroed("blob.bin", b"\xff\x00 12") == b"\xff\x00 12"  # not text: left as it is


def test_the_data_files_are_those_the_reference_leaves_alone_mentioned_first(tmp_path: Path) -> None:
    files = {
        "workspace/calc.py": "def f():\n    pass\n",
        "workspace/a_notes.txt": "1\n",
        "workspace/data/pairs.json": "[[1, 2]]\n",
        "workspace/config.json": '{"x": 1}\n',
        "workspace/.git/HEAD": "ref: refs/heads/main\n",
        "solution/calc.py": "def f():\n    return 1\n",
        "solution/config.json": '{"x": 2}\n',
        "tests/test_calc.py": "import json\n\nPAIRS = json.load(open('/workspace/data/pairs.json'))\n",
    }
    for relative, text in files.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    (tmp_path / "task.toml").write_text('[grading]\nrunner = "pytest"\n')
    task = load_task(tmp_path)
    reference = Reference.of(task)
    assert reference is not None
    assert list(data_files(task, reference)) == ["data/pairs.json", "a_notes.txt"]


def test_json_nested_deeper_than_the_parser_recurses_is_no_json() -> None:
    # One such file in a workspace ended a whole validation with a RecursionError.
    deep = b"[" * 100_000
    assert emptied("data.json", deep) == b""
    assert zeroed("data.json", deep) == deep
    assert zeroed("rows.jsonl", deep + b"\n") == deep + b"\n"
