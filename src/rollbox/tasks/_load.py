"""Loading a native task directory into a :class:`Task`, with errors that name the file, the key and the fix."""

from __future__ import annotations

import contextlib
import difflib
import math
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from rollbox.sandbox import Limits, Network, parse_duration, parse_size

from ._cases import load_function_cases, load_stdio_cases
from ._digest import verify_workspace
from ._environment import parse_environment
from ._errors import TaskFormatError
from ._model import (
    Comparator,
    FunctionGrading,
    Grading,
    PytestGrading,
    RewardKind,
    RewardSpec,
    ScriptGrading,
    StdioGrading,
    Task,
)

__all__ = ["TaskFormatError", "load_task"]

T = TypeVar("T")

_TOP_KEYS = {"id", "grading", "limits", "environment", "workspace", "metadata"}
_GRADING_KEYS = {
    "pytest": {"fail_to_pass", "pass_to_pass", "tests_in_workspace", "removed_by_tests"},
    "function": {"module", "entry_point", "cases", "check"},
    "stdio": {"command", "cases", "comparator", "float_tolerance", "checker"},
    "script": {"script"},
}
_REWARD_KEYS = {"runner", "reward", "tamper_penalty", "f2p_weight", "cpu_weight", "memory_weight"}
_LIMIT_KEYS = {"timeout", "cpu_time", "memory", "pids", "output", "disk", "open_files", "network"}


def _check_keys(file: Path, table: str, data: Mapping[str, Any], allowed: set[str]) -> None:
    for key in data:
        if key not in allowed:
            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected one of {', '.join(sorted(allowed))}"
            raise TaskFormatError(file, f"unknown key {key!r} in {table}{hint}")


def _get(file: Path, table: str, data: Mapping[str, Any], key: str, kind: type[T], *, expected: str) -> T | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise TaskFormatError(file, f"{table} {key}: expected {expected}, got {value!r}")
    return value


def _number(
    file: Path, data: Mapping[str, Any], key: str, default: float, *, low: float = -math.inf, high: float = math.inf
) -> float:
    """[grading] ``key`` (``default`` when unset): a finite number from ``low`` to ``high``, as rewards need."""
    value = data.get(key, default)
    number = math.nan  # a value that is no number, or too big for a float, fails the range check below
    if isinstance(value, int | float) and not isinstance(value, bool):
        with contextlib.suppress(OverflowError):
            number = float(value)
    if not (math.isfinite(number) and low <= number <= high):
        bounds = (
            f"<= {high:g}" if low == -math.inf else f">= {low:g}" if high == math.inf else f"from {low:g} to {high:g}"
        )
        raise TaskFormatError(file, f"[grading] {key}: expected a finite number {bounds}, got {value!r}")
    return number


def _convert(file: Path, table: str, key: str, value: Any, parse: Callable[[Any], T]) -> T:
    try:
        return parse(value)
    except (TypeError, ValueError) as exc:
        raise TaskFormatError(file, f"{table} {key}: {exc}") from None
    except OverflowError:  # inf, or a number of too many digits, made an int
        raise TaskFormatError(file, f"{table} {key}: {value!r} is out of range; give a finite number") from None


def _count(value: Any) -> int | float:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a whole number, got {value!r}")
    return value  # Limits says what is wrong with it, if anything


def _read_text(path: Path, fix: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskFormatError(path, f"cannot read it as UTF-8 text ({exc}); {fix}") from None


def _test_ids(file: Path, key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskFormatError(file, f"[grading] {key}: expected a list of test ids (strings), got {value!r}")
    return tuple(value)


def _removed_by_tests(file: Path, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskFormatError(
            file, f"[grading] removed_by_tests: expected a list of workspace paths (strings), got {value!r}"
        )
    for path in value:
        parts = PurePosixPath(path).parts
        if not path or "\0" in path or path.startswith("/") or ".." in parts or path != "/".join(parts):
            raise TaskFormatError(
                file,
                "[grading] removed_by_tests: expected paths relative to workspace/, without '..', '.' or a "
                f"trailing '/', such as 'tests/test_old.py', got {path!r}",
            )
    return tuple(sorted(set(value)))


def _reward(file: Path, data: Mapping[str, Any], task_dir: Path) -> RewardSpec:
    reward = RewardSpec(
        kind=_convert(file, "[grading]", "reward", data.get("reward", "binary"), RewardKind),
        tamper_penalty=_number(file, data, "tamper_penalty", -1.0, high=0.0),
        f2p_weight=_number(file, data, "f2p_weight", 0.5, low=0.0, high=1.0),
        cpu_weight=_number(file, data, "cpu_weight", 0.0, low=0.0, high=1.0),
        memory_weight=_number(file, data, "memory_weight", 0.0, low=0.0, high=1.0),
    )
    if reward.cpu_weight + reward.memory_weight > 1.0:
        raise TaskFormatError(file, "[grading] cpu_weight + memory_weight: expected at most 1")
    if (reward.cpu_weight or reward.memory_weight) and not (task_dir / "solution").is_dir():
        raise TaskFormatError(file, "[grading] cpu_weight and memory_weight compare with solution/, which is missing")
    return reward


def _command(file: Path, value: Any) -> tuple[str, ...]:
    try:
        argv = shlex.split(value) if isinstance(value, str) else value
    except ValueError as exc:  # an unclosed quote, or a trailing backslash
        raise TaskFormatError(
            file, f"[grading] command: cannot split {value!r} ({exc}); close the quote, or give a list of arguments"
        ) from None
    if not isinstance(argv, list) or not argv or not all(isinstance(c, str) for c in argv):
        raise TaskFormatError(file, f"[grading] command: expected a command line or a list, got {value!r}")
    return tuple(argv)


def _grading(file: Path, data: Mapping[str, Any], task_dir: Path) -> tuple[Grading, RewardSpec]:
    runner = data.get("runner")
    if not isinstance(runner, str) or runner not in _GRADING_KEYS:
        raise TaskFormatError(file, f"[grading] runner: expected one of {', '.join(_GRADING_KEYS)}, got {runner!r}")
    _check_keys(file, "[grading]", data, _REWARD_KEYS | _GRADING_KEYS[runner])
    reward = _reward(file, data, task_dir)
    grading: Grading
    if runner == "pytest":
        grading = PytestGrading(
            fail_to_pass=_test_ids(file, "fail_to_pass", data.get("fail_to_pass")),
            pass_to_pass=_test_ids(file, "pass_to_pass", data.get("pass_to_pass")) or (),
            tests_in_workspace=bool(
                _get(file, "[grading]", data, "tests_in_workspace", bool, expected="true or false")
            ),
            removed_by_tests=_removed_by_tests(file, data.get("removed_by_tests")),
        )
        if grading.removed_by_tests and not grading.tests_in_workspace:
            raise TaskFormatError(
                file,
                "[grading] removed_by_tests: only repository tests (tests_in_workspace = true) remove workspace "
                "files; set tests_in_workspace, or drop removed_by_tests",
            )
    elif runner == "function":
        module = _get(file, "[grading]", data, "module", str, expected="a workspace file name such as 'solution.py'")
        entry = _get(file, "[grading]", data, "entry_point", str, expected="a function name")
        if not module or not entry:
            raise TaskFormatError(file, "[grading] runner 'function' needs module and entry_point")
        check = _get(
            file, "[grading]", data, "check", str, expected="a Python file in tests/ defining check(candidate)"
        )
        cases = _get(file, "[grading]", data, "cases", str, expected="a file name in tests/")
        if cases is None and check is None:
            cases = "cases.jsonl"
        if not cases and not check:
            raise TaskFormatError(file, "[grading] runner 'function' needs cases (a file in tests/), check, or both")
        grading = FunctionGrading(module=module, entry_point=entry, cases=cases, check=check)
    elif runner == "stdio":
        comparator = _convert(file, "[grading]", "comparator", data.get("comparator", "whitespace"), Comparator)
        checker = _get(file, "[grading]", data, "checker", str, expected="a program in tests/")
        if comparator is Comparator.CHECKER and not checker:
            raise TaskFormatError(file, "[grading] comparator 'checker' needs checker = 'PROGRAM' (a file in tests/)")
        cases = _get(file, "[grading]", data, "cases", str, expected="a file name in tests/")
        if cases == "":
            raise TaskFormatError(file, "[grading] cases: expected a file name in tests/, such as 'cases.jsonl'")
        grading = StdioGrading(
            command=_command(file, data.get("command")),
            cases="cases.jsonl" if cases is None else cases,
            comparator=comparator,
            # At most 0.5: the tolerance is relative too, and a relative tolerance of 1 accepts 0 for any answer.
            float_tolerance=_number(file, data, "float_tolerance", 1e-6, low=0.0, high=0.5),
            checker=checker,
        )
    else:
        script = _get(file, "[grading]", data, "script", str, expected="a file in tests/")
        grading = ScriptGrading() if script is None else ScriptGrading(script=script)
    return grading, reward


#: How the judge reads a file of tests/: parsed as cases, read as text, or only run (``None``): load_task reads it
#: the same way, so that a file the judge could not read is refused now, not at grading time.
_Read = Callable[[Path], object] | None


def _as_text(path: Path) -> object:
    return _read_text(path, "the judge reads it as text: save it as UTF-8")


def _grading_files(task: Task) -> list[tuple[str, str, _Read]]:
    """Each file of tests/ that grading uses: the key naming it, its name, and how the judge reads it."""
    grading = task.grading
    named: list[tuple[str, str | None, _Read]]
    if isinstance(grading, PytestGrading):
        named = [("runner 'pytest'", path.relative_to(task.tests).as_posix(), _as_text) for path in task.test_modules]
    elif isinstance(grading, FunctionGrading):
        named = [("cases", grading.cases, load_function_cases), ("check", grading.check, _as_text)]
    elif isinstance(grading, StdioGrading):  # the checker is run, never read
        named = [("cases", grading.cases, load_stdio_cases), ("checker", grading.checker, None)]
    else:
        named = [("script", grading.script, None)]  # run by bash; the judge only hashes its bytes
    return [(key, name, read) for key, name, read in named if name]  # "" is none, as the runners take it


def _check_test_file(file: Path, tests: Path, key: str, name: str, read: _Read) -> None:
    """Refuse ``name`` unless it is a regular file inside ``tests``, links resolved (the judge reads it as root and
    the agent must never see it), that ``read`` reads."""
    relative = PurePosixPath(name)
    if not name or "\0" in name or relative.is_absolute() or ".." in relative.parts:
        raise TaskFormatError(
            file,
            f"[grading] {key}: expected a path relative to tests/ without '..', such as 'cases.jsonl', got {name!r}",
        )
    real = Path(os.path.realpath(tests / name))
    if not real.is_relative_to(os.path.realpath(tests)):  # tests/ itself may be a link (shared between tasks)
        raise TaskFormatError(
            file, f"[grading] {key}: tests/{name} leads to {real}, outside tests/; put the file in tests/"
        )
    if not real.is_file():
        found = "which is not a regular file" if real.exists() else "which does not exist"
        raise TaskFormatError(file, f"[grading] {key} names tests/{name}, {found}")
    if read is not None:
        read(real)


def _check_grading_files(file: Path, task: Task) -> None:
    files = _grading_files(task)
    grading = task.grading
    # Repository tests named by id (SWE-bench's tests/.../tests.py) need no test_*.py name: the ids say what runs.
    named = isinstance(grading, PytestGrading) and grading.tests_in_workspace and grading.fail_to_pass is not None
    if isinstance(grading, PytestGrading) and not files and not named:
        raise TaskFormatError(
            file,
            "[grading] runner 'pytest': tests/ has no test module, so every candidate would fail; add a "
            "tests/test_*.py or tests/*_test.py (or, for repository tests, set tests_in_workspace and fail_to_pass)",
        )
    for key, name, read in files:
        _check_test_file(file, task.tests, key, name, read)
    for path in grading.removed_by_tests if isinstance(grading, PytestGrading) else ():
        if not os.path.lexists(task.workspace / path):
            raise TaskFormatError(
                file, f"[grading] removed_by_tests names workspace/{path}, which does not exist; drop it from the list"
            )


def _limits(file: Path, data: Mapping[str, Any]) -> tuple[Limits, Network]:
    _check_keys(file, "[limits]", data, _LIMIT_KEYS)
    fields: dict[str, Any] = {}
    for key, field, parse in (
        ("timeout", "timeout_s", parse_duration),
        ("cpu_time", "cpu_time_s", parse_duration),
        ("memory", "memory_bytes", parse_size),
        ("output", "output_bytes", parse_size),
        ("disk", "disk_bytes", parse_size),
        ("pids", "pids", _count),
        ("open_files", "open_files", _count),
    ):
        if key in data:
            fields[field] = _convert(file, "[limits]", key, data[key], parse)
    network = _convert(file, "[limits]", "network", data.get("network", "none"), Network)
    try:
        return Limits(**fields), network
    except ValueError as exc:
        raise TaskFormatError(file, f"[limits]: {exc}") from None


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _workspace_sha256(file: Path, data: Mapping[str, Any]) -> str | None:
    _check_keys(file, "[workspace]", data, {"sha256"})
    value = data.get("sha256")
    if value is not None and not (isinstance(value, str) and _SHA256.match(value)):
        raise TaskFormatError(
            file,
            f"[workspace] sha256: expected 64 lowercase hex digits, got {value!r}; record it with "
            f"'rollbox tasks rehash {file.parent}'",
        )
    return value


def load_task(path: str | os.PathLike[str], *, verify: bool = True) -> Task:
    """Load and validate the task directory at ``path``.

    When task.toml records the workspace's hash (``[workspace] sha256``), the workspace is checked against it
    (cheaply: see :mod:`rollbox.tasks._digest`), unless ``verify`` is false (for tools that report on a task
    rather than run it).

    Raises:
        WorkspaceChangedError: the workspace no longer matches its recorded hash.
        TaskFormatError: the directory is not a valid task; the message says which file and key, and why.
    """
    root = Path(path).resolve()
    file = root / "task.toml"
    if not root.is_dir():
        raise TaskFormatError(root, "not a directory: a task is a directory with task.toml, workspace/ and tests/")
    if not file.is_file():
        found = "not a regular file" if file.exists() else "missing"
        raise TaskFormatError(file, f"{found}: every task needs a task.toml file with a [grading] table")
    try:
        data = tomllib.loads(_read_text(file, "save task.toml as UTF-8"))
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(file, f"not valid TOML: {exc}") from None
    except RecursionError:
        raise TaskFormatError(file, "not valid TOML: nested too deeply; flatten its arrays and tables") from None
    _check_keys(file, "the top level", data, _TOP_KEYS)
    for table in ("grading", "limits", "environment", "workspace", "metadata"):
        if table in data and not isinstance(data[table], dict):
            raise TaskFormatError(file, f"{table}: expected a table [{table}], got {data[table]!r}")
    if "grading" not in data:
        raise TaskFormatError(file, "missing [grading] table (with at least runner = 'pytest'|'function'|...)")
    for directory in ("workspace", "tests"):
        if not (root / directory).is_dir():
            raise TaskFormatError(root, f"missing {directory}/ directory")
    task_id = _get(file, "the top level", data, "id", str, expected="a string") or root.name
    grading, reward = _grading(file, data["grading"], root)
    limits, network = _limits(file, data.get("limits", {}))
    instruction_file = root / "instruction.md"
    instruction = _read_text(instruction_file, "save it as UTF-8") if instruction_file.is_file() else ""
    requirements = root / "environment" / "requirements.txt"
    environment = parse_environment(file, data.get("environment", {}), requirements if requirements.is_file() else None)
    recorded = _workspace_sha256(file, data.get("workspace", {}))
    task = Task(
        id=task_id,
        path=root,
        instruction=instruction,
        grading=grading,
        reward=reward,
        limits=limits,
        network=network,
        environment=environment,
        workspace_sha256=recorded,
        metadata=data.get("metadata", {}),
    )
    _check_grading_files(file, task)
    if verify and recorded is not None:
        verify_workspace(task.id, root, recorded)
    return task
