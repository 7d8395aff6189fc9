"""Loading a native task directory into a :class:`Task`, with errors that name the file, the key and the fix."""

from __future__ import annotations

import difflib
import shlex
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from rollbox.sandbox import Limits, Network, RollboxError, parse_duration, parse_size

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

_TOP_KEYS = {"id", "grading", "limits", "environment", "metadata"}
_GRADING_KEYS = {
    "pytest": {"fail_to_pass", "pass_to_pass"},
    "function": {"module", "entry_point", "cases", "check"},
    "stdio": {"command", "cases", "comparator", "float_tolerance", "checker"},
    "script": {"script"},
}
_REWARD_KEYS = {"runner", "reward", "tamper_penalty", "f2p_weight", "cpu_weight", "memory_weight"}
_LIMIT_KEYS = {"timeout", "cpu_time", "memory", "pids", "output", "disk", "open_files", "network"}


class TaskFormatError(RollboxError):
    """A task directory is malformed. The message names the file, the key, what was expected and what was found."""

    def __init__(self, file: Path, message: str) -> None:
        super().__init__(f"{file}: {message}")
        self.file = file


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


def _number(file: Path, data: Mapping[str, Any], key: str, default: float) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskFormatError(file, f"[grading] {key}: expected a number, got {value!r}")
    return float(value)


def _convert(file: Path, table: str, key: str, value: Any, parse: Callable[[Any], T]) -> T:
    try:
        return parse(value)
    except (TypeError, ValueError) as exc:
        raise TaskFormatError(file, f"{table} {key}: {exc}") from None


def _test_ids(file: Path, key: str, value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskFormatError(file, f"[grading] {key}: expected a list of test ids (strings), got {value!r}")
    return tuple(value)


def _grading(file: Path, data: Mapping[str, Any], task_dir: Path) -> tuple[Grading, RewardSpec]:
    runner = data.get("runner")
    if runner not in _GRADING_KEYS:
        raise TaskFormatError(file, f"[grading] runner: expected one of {', '.join(_GRADING_KEYS)}, got {runner!r}")
    _check_keys(file, "[grading]", data, _REWARD_KEYS | _GRADING_KEYS[runner])
    reward = RewardSpec(
        kind=_convert(file, "[grading]", "reward", data.get("reward", "binary"), RewardKind),
        tamper_penalty=_number(file, data, "tamper_penalty", -1.0),
        f2p_weight=_number(file, data, "f2p_weight", 0.5),
        cpu_weight=_number(file, data, "cpu_weight", 0.0),
        memory_weight=_number(file, data, "memory_weight", 0.0),
    )
    for key in ("cpu_weight", "memory_weight"):
        if not 0.0 <= getattr(reward, key) <= 1.0:
            raise TaskFormatError(file, f"[grading] {key}: expected a number from 0 to 1, got {getattr(reward, key)}")
    if reward.cpu_weight + reward.memory_weight > 1.0:
        raise TaskFormatError(file, "[grading] cpu_weight + memory_weight: expected at most 1")
    if (reward.cpu_weight or reward.memory_weight) and not (task_dir / "solution").is_dir():
        raise TaskFormatError(file, "[grading] cpu_weight and memory_weight compare with solution/, which is missing")
    if reward.tamper_penalty > 0:
        raise TaskFormatError(file, f"[grading] tamper_penalty: expected a number <= 0, got {reward.tamper_penalty}")
    if not 0.0 <= reward.f2p_weight <= 1.0:
        raise TaskFormatError(file, f"[grading] f2p_weight: expected a number from 0 to 1, got {reward.f2p_weight}")
    grading: Grading
    if runner == "pytest":
        grading = PytestGrading(
            fail_to_pass=_test_ids(file, "fail_to_pass", data.get("fail_to_pass")),
            pass_to_pass=_test_ids(file, "pass_to_pass", data.get("pass_to_pass")) or (),
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
        grading = FunctionGrading(module=module, entry_point=entry, cases=cases, check=check)
    elif runner == "stdio":
        command = data.get("command")
        if isinstance(command, str):
            command = shlex.split(command)
        if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
            raise TaskFormatError(file, f"[grading] command: expected a command line or a list, got {command!r}")
        comparator = _convert(file, "[grading]", "comparator", data.get("comparator", "whitespace"), Comparator)
        checker = _get(file, "[grading]", data, "checker", str, expected="a program in tests/")
        if comparator is Comparator.CHECKER and not checker:
            raise TaskFormatError(file, "[grading] comparator 'checker' needs checker = 'PROGRAM' (a file in tests/)")
        grading = StdioGrading(
            command=tuple(command),
            cases=_get(file, "[grading]", data, "cases", str, expected="a file name in tests/") or "cases.jsonl",
            comparator=comparator,
            float_tolerance=_number(file, data, "float_tolerance", 1e-6),
            checker=checker,
        )
    else:
        grading = ScriptGrading(
            script=_get(file, "[grading]", data, "script", str, expected="a file in tests/") or "test.sh"
        )
    for needed in _needed_test_files(grading):
        if not (task_dir / "tests" / needed).is_file():
            raise TaskFormatError(file, f"[grading] names tests/{needed}, which does not exist")
    return grading, reward


def _needed_test_files(grading: Grading) -> list[str]:
    if isinstance(grading, FunctionGrading):
        return [name for name in (grading.cases, grading.check) if name]
    if isinstance(grading, StdioGrading):
        return [grading.cases] + ([grading.checker] if grading.checker else [])
    if isinstance(grading, ScriptGrading):
        return [grading.script]
    return []


def _limits(file: Path, data: Mapping[str, Any]) -> tuple[Limits, Network]:
    _check_keys(file, "[limits]", data, _LIMIT_KEYS)
    fields: dict[str, Any] = {}
    for key, field, parse in (
        ("timeout", "timeout_s", parse_duration),
        ("cpu_time", "cpu_time_s", parse_duration),
        ("memory", "memory_bytes", parse_size),
        ("output", "output_bytes", parse_size),
        ("disk", "disk_bytes", parse_size),
        ("pids", "pids", int),
        ("open_files", "open_files", int),
    ):
        if key in data:
            fields[field] = _convert(file, "[limits]", key, data[key], parse)
    network = _convert(file, "[limits]", "network", data.get("network", "none"), Network)
    try:
        return Limits(**fields), network
    except ValueError as exc:
        raise TaskFormatError(file, f"[limits]: {exc}") from None


def load_task(path: str | Path) -> Task:
    """Load and validate the task directory at ``path``.

    Raises:
        TaskFormatError: the directory is not a valid task; the message says which file and key, and why.
    """
    root = Path(path).resolve()
    file = root / "task.toml"
    if not root.is_dir():
        raise TaskFormatError(root, "not a directory: a task is a directory with task.toml, workspace/ and tests/")
    try:
        data = tomllib.loads(file.read_text())
    except FileNotFoundError:
        raise TaskFormatError(file, "missing: every task needs a task.toml with a [grading] table") from None
    except tomllib.TOMLDecodeError as exc:
        raise TaskFormatError(file, f"not valid TOML: {exc}") from None
    _check_keys(file, "the top level", data, _TOP_KEYS)
    for table in ("grading", "limits", "environment"):
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
    instruction = instruction_file.read_text() if instruction_file.is_file() else ""
    return Task(
        id=task_id,
        path=root,
        instruction=instruction,
        grading=grading,
        reward=reward,
        limits=limits,
        network=network,
    )
