"""The stdio importer: stdin/stdout problems (the shape of CodeContests and APPS data) as native ``stdio`` tasks.

Each line of the input is one problem, a JSON object::

    {"id": "cf-1A", "statement": "...", "tests": [{"input": "3\\n", "output": "6\\n"}, ...],
     "solutions": [...], "time_limit": 2, "memory_limit_bytes": 268435456}

``id`` (a string or a number), ``statement`` and a non-empty ``tests`` list are required; other keys are ignored
(data sets carry many). ``solutions`` is optional: a list whose items are Python 3 source strings, or objects
``{"language": L, "code": SOURCE}`` (``"solution"`` for ``"code"`` also works), or CodeContests' columns
``{"language": [L, ...], "solution": [SOURCE, ...]}``. ``L`` is Python 3 when it is ``"python"``, ``"python3"``,
``"python 3"``, ``"py"``, ``"py3"`` (any case) or CodeContests' number ``3``; solutions in other languages
(CodeContests' ``1`` is Python 2) are skipped. The first Python 3 solution becomes solution/solution.py.
``time_limit`` (seconds, or CodeContests' ``{"seconds": S, "nanos": N}``) sets the CPU-time limit, and twice it the
wall-clock limit; ``memory_limit_bytes`` the memory limit.

Each problem becomes::

    task.toml            runner "stdio", command "python3 solution.py", cases "cases.jsonl", whitespace comparator
    instruction.md       the statement, and how the program is run
    workspace/           empty: the candidate writes solution.py
    tests/cases.jsonl    the tests, one {"input", "output"} a line
    solution/solution.py the first Python 3 solution, when there is one
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from rollbox.sandbox import Limits

from ._importing import Draft, ImportRefused, Refusal
from ._jsonl import Record, records, require, shorten
from ._model import StdioGrading, Task
from ._write import write_task

__all__ = ["read_stdio"]

_PYTHON3 = {"python", "python3", "python 3", "py", "py3"}
#: CodeContests' Language enum: 3 is PYTHON3 (1 is Python 2).
_CODECONTESTS_PYTHON3 = 3
_HOW_TO_RUN = """

---

Write your solution as a Python 3 program in `solution.py`. It is run as `python3 solution.py` once per test, with
the test's input on stdin; what it prints is compared with the expected output, whitespace-normalized.
"""


def _is_python3(language: Any) -> bool:
    if isinstance(language, str):
        return language.strip().lower() in _PYTHON3
    return language == _CODECONTESTS_PYTHON3 and not isinstance(language, bool)


def _first_python(solutions: Any) -> str | None:
    """The first Python 3 source among ``solutions`` (the shapes the module's docstring lists).

    Raises:
        ImportRefused: ``solutions`` has none of those shapes.
    """
    if isinstance(solutions, dict) and isinstance(solutions.get("language"), list):
        languages, sources = solutions["language"], solutions.get("solution", solutions.get("code"))
        if not isinstance(sources, list) or len(sources) != len(languages):
            raise ImportRefused(
                "key 'solutions': the columns 'language' and 'solution' must be lists of the same length"
            )
        solutions = [{"language": lang, "code": code} for lang, code in zip(languages, sources, strict=True)]
    if not isinstance(solutions, list):
        raise ImportRefused(f"key 'solutions': expected a list of solutions, got {shorten(solutions)}")
    for number, item in enumerate(solutions, 1):
        if isinstance(item, str):
            return item
        code = item.get("code", item.get("solution")) if isinstance(item, dict) else None
        if not isinstance(code, str):
            raise ImportRefused(
                f"key 'solutions' item {number}: expected a Python 3 source string or "
                f'{{"language": ..., "code": "..."}}, got {shorten(item)}'
            )
        if _is_python3(item.get("language", "python3")):
            return code
    return None


def _seconds(limit: Any) -> float:
    """A time limit in seconds: a number, or CodeContests' ``{"seconds": S, "nanos": N}``."""
    if isinstance(limit, dict):
        seconds, nanos = limit.get("seconds", 0), limit.get("nanos", 0)
        if type(seconds) in (int, float) and type(nanos) in (int, float):
            limit = seconds + nanos / 1e9
    if type(limit) not in (int, float) or not limit > 0:
        raise ImportRefused(f"key 'time_limit': expected seconds (a positive number), got {shorten(limit)}")
    return float(limit)


def _limits(data: dict[str, Any]) -> Limits:
    fields: dict[str, Any] = {}
    if data.get("time_limit") is not None:
        seconds = _seconds(data["time_limit"])
        fields.update(cpu_time_s=seconds, timeout_s=2 * seconds)
    if "memory_limit_bytes" in data:
        fields["memory_bytes"] = require(data, "memory_limit_bytes", int, "a whole number of bytes")
    try:
        return Limits(**fields)
    except ValueError as exc:
        raise ImportRefused(str(exc)) from None


def _problem(record: Record) -> tuple[str, dict[str, Any]]:
    """The task id and what write_task needs, for one problem.

    Raises:
        ImportRefused: a key is missing or malformed; the message names it.
    """
    data = record.data
    task_id = str(require(data, "id", (str, int), "the problem's id (a string or a number)"))
    statement = require(data, "statement", str, "the problem statement (a string)")
    tests = require(data, "tests", list, 'a non-empty list of {"input": "...", "output": "..."}')
    if not tests:
        raise ImportRefused('key \'tests\': the list is empty; give at least one {"input": "...", "output": "..."}')
    for number, test in enumerate(tests, 1):
        if not (isinstance(test, dict) and isinstance(test.get("input"), str) and isinstance(test.get("output"), str)):
            raise ImportRefused(
                f'key \'tests\' item {number}: expected {{"input": STRING, "output": STRING}}, got {shorten(test)}'
            )
    solution = _first_python(data["solutions"]) if data.get("solutions") is not None else None
    cases = "".join(json.dumps({"input": t["input"], "output": t["output"]}) + "\n" for t in tests)
    return task_id, {
        "task_id": task_id,
        "grading": StdioGrading(command=("python3", "solution.py")),
        "instruction": statement.rstrip("\n") + _HOW_TO_RUN,
        "tests": {"cases.jsonl": cases},
        "solution": None if solution is None else {"solution.py": solution},
        "limits": _limits(data),
        "metadata": {"source": "stdio", "tests": len(tests)},
    }


def _write(arguments: dict[str, Any], root: Path, force: bool) -> Task:
    return write_task(root, **arguments, replace=force)


def read_stdio(source: str | Path) -> list[Draft | Refusal]:
    """The problems of a stdio JSON Lines file (see the module's docstring): a draft each, or a refusal naming the
    line and the key.

    Raises:
        ImportSourceError: the file cannot be read.
    """
    found: list[Draft | Refusal] = []
    for record in records(Path(source)):
        if isinstance(record, Refusal):
            found.append(record)
            continue
        try:
            task_id, arguments = _problem(record)
        except ImportRefused as exc:
            raw = record.data.get("id")
            usable = isinstance(raw, str | int) and not isinstance(raw, bool)
            found.append(Refusal(str(raw) if usable else None, record.where, str(exc)))
            continue
        found.append(Draft(task_id, record.where, functools.partial(_write, arguments)))
    return found
