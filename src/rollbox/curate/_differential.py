"""Differential tests: the reference against the starting workspace on inputs near the failing tests' own, where
they answer differently, as a hidden test module. What strengthens a task a special-case patch passes.

Inputs: each literal argument of a call a fail_to_pass test made directly (``_recorder``) varied one at a time
(``_generate``'s variations: a string emptied, cut short, extended, reversed, upper- and lower-cased; a number one
step away, zeroed, negated; ...). Outputs: the reference's, run twice (under hash seeds 0 and 1) in a sandbox with
the package, and the starting workspace's once. An input is kept when both reference runs returned the same Python
literal and the workspace answered otherwise (another value, an exception, a timeout): a test of it fails on the
starting workspace and passes with the fix, and a table of the visible inputs does not pass it.
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollbox.judge import task_sandboxes
from rollbox.sandbox import SandboxConfig, SandboxSource, Status
from rollbox.tasks import Task

from ._generate import variations
from ._recorder import Call

__all__ = ["MODULE", "Case", "differential_cases", "hidden_module"]

#: The hidden test module the cases are written to, in tests/.
MODULE = "test_rollbox_differential.py"
_RUN = "/tmp/.rollbox-differential"
#: Inputs tried at most, and seconds per call.
_MAX_INPUTS = 120
_CALL_S = 2

_DRIVER = r"""
import ast, importlib, json, signal, sys


def _alarm(*_):
    raise TimeoutError


signal.signal(signal.SIGALRM, _alarm)
answers = []
for root, module, function, args in json.load(open(sys.argv[1])):
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        signal.alarm(int(sys.argv[3]))
        target = importlib.import_module(module)
        for part in function.split("."):
            target = getattr(target, part)
        value = target(*[ast.literal_eval(a) for a in args])
        signal.alarm(0)
        text = repr(value)
        back = ast.literal_eval(text)
        answers.append(["value", text] if type(back) is type(value) and back == value else ["other", None])
    except BaseException as exc:
        signal.alarm(0)
        answers.append(["raised", type(exc).__name__])
with open(sys.argv[2], "w") as f:
    json.dump(answers, f)
"""


@dataclass(frozen=True)
class Case:
    """One generated input and the reference's answer (Python literals)."""

    #: Where the module is imported from in the sandbox, its name, and the function's.
    root: str
    module: str
    function: str
    args: tuple[str, ...]
    expected: str


def _root(call: Call) -> str | None:
    """The directory the tests import ``call``'s module from (``/workspace/src`` for ``src/pkg/mod.py``)."""
    suffix = call.module.replace(".", "/") + ("/__init__.py" if call.path.endswith("__init__.py") else ".py")
    if not call.module or call.module == "__main__" or not call.path.endswith(suffix):
        return None
    return f"/workspace/{call.path[: -len(suffix)]}".rstrip("/") or "/workspace"


def _inputs(calls: Sequence[Call], seed: str) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(root, module, function, arguments) near the tests' direct calls, the calls themselves left out."""
    rng = random.Random(seed)
    seen = {(c.module, c.function, c.key) for c in calls}
    found: dict[tuple[str, str, str, tuple[str, ...]], None] = {}
    for call in calls:
        root = _root(call)
        if not call.from_test or not call.plain or call.args is None or "." in call.function or root is None:
            continue
        args = [call.args[p] for p in call.params]
        for index, text in enumerate(args):
            for near in variations(ast.literal_eval(text), rng):
                changed = (*args[:index], repr(near), *args[index + 1 :])
                key = json.dumps(dict(zip(call.params, changed, strict=True)), sort_keys=True)
                if (call.module, call.function, key) not in seen:
                    found.setdefault((root, call.module, call.function, changed), None)
    return list(found)[:_MAX_INPUTS]


async def _answers(
    task: Task,
    files: Mapping[str, bytes],
    inputs: Sequence[tuple[str, str, str, tuple[str, ...]]],
    seed: str,
    sandboxes: SandboxSource,
) -> list[list[Any]] | None:
    source = await task_sandboxes(task, sandboxes)
    async with source.sandbox(SandboxConfig(limits=task.limits, network=task.network)) as sb:
        await sb.write_tree(task.workspace)
        await sb.write_files(dict(files))
        await sb.write_file(f"{_RUN}/inputs.json", json.dumps([list(i) for i in inputs]))
        await sb.write_file(f"{_RUN}/driver.py", _DRIVER)
        result = await sb.exec(
            ["python3", "-s", f"{_RUN}/driver.py", f"{_RUN}/inputs.json", f"{_RUN}/answers.json", str(_CALL_S)],
            cwd="/workspace",
            env={"PYTHONHASHSEED": seed, "TZ": "UTC", "PYTHONDONTWRITEBYTECODE": "1"},
        )
        if result.status is Status.INFRA_ERROR:
            raise RuntimeError(f"a run for differential tests failed: {result.error}")
        try:
            answers = json.loads(await sb.read_file(f"{_RUN}/answers.json", max_bytes=16 * 1024 * 1024))
        except (OSError, ValueError):
            return None
    return answers if isinstance(answers, list) and len(answers) == len(inputs) else None


async def differential_cases(
    task: Task, reference_files: Mapping[str, bytes], calls: Sequence[Call], sandboxes: SandboxSource
) -> list[Case]:
    """The generated inputs on which the reference and the starting workspace answer differently.

    Raises:
        RuntimeError: rollbox or the host failed a run.
    """
    inputs = _inputs(calls, seed=task.id)
    if not inputs:
        return []
    first = await _answers(task, reference_files, inputs, "0", sandboxes)
    second = await _answers(task, reference_files, inputs, "1", sandboxes)
    before = await _answers(task, {}, inputs, "0", sandboxes)
    if first is None or second is None or before is None:
        return []
    cases = []
    for (root, module, function, args), one, two, old in zip(inputs, first, second, before, strict=True):
        if one[0] == "value" and one == two and old != one:
            cases.append(Case(root, module, function, args, one[1]))
    return cases


def hidden_module(cases: Sequence[Case]) -> str:
    """The hidden test module checking ``cases``: one parametrized test, ``test_differential[caseN]``."""
    rows = "".join(
        f"    ({c.root!r}, {c.module!r}, {c.function!r}, ({''.join(a + ', ' for a in c.args)}), {c.expected}),\n"
        for c in cases
    )
    return (
        '"""rollbox: the reference\'s answers on inputs near the failing tests\' own (generated; hidden)."""\n\n'
        "import importlib\nimport sys\n\nimport pytest\n\nCASES = [\n" + rows + "]\n\n\n"
        "@pytest.mark.parametrize(('root', 'module', 'function', 'args', 'expected'), CASES, "
        "ids=[f'case{i}' for i in range(len(CASES))])\n"
        "def test_differential(root, module, function, args, expected):\n"
        "    if root not in sys.path:\n        sys.path.insert(0, root)\n"
        "    target = importlib.import_module(module)\n"
        "    for part in function.split('.'):\n        target = getattr(target, part)\n"
        "    assert target(*args) == expected\n"
    )
