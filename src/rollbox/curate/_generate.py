"""Test generation for ``function`` and ``stdio`` tasks: new inputs, expected outputs from the reference.

Inputs come from the task itself, never from running anything: the existing cases' inputs mutated (numbers
moved by one, negated, zeroed; strings and lists shortened, extended, reversed, emptied), boundary values of the
types the signature's hints and the examples show, and draws from hypothesis strategies built from those types
(when hypothesis is installed: ``pip install rollbox[curate]``). ``stdio`` inputs are the existing inputs with one
number changed at a time.

Expected outputs come from running every available reference (``solution/``, and each directory under
``references/`` when the task has one) in a sandbox, twice: under the judge's hash seed and under another (a
``function`` reference answers every input in one run, as the judge runs a candidate's cases). An input is kept
only when every run of every reference returned the same plain value (printed the same output, exiting 0); an
input a reference raises on, times out on or answers differently for is dropped (and counted).
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import random
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, cast

from rollbox.judge import task_sandboxes
from rollbox.judge.runners._drivers import driver_command
from rollbox.judge.runners._probe import grading_env, probe, sandbox_config
from rollbox.sandbox import RollboxError, SandboxConfig, SandboxSource, Status
from rollbox.tasks import Comparator, FunctionGrading, StdioGrading, Task
from rollbox.tasks._cases import FunctionCase, load_function_cases, load_stdio_cases
from rollbox.tasks._values import decode, encode

from ._reference import Reference, read_tree
from ._toml import set_key

__all__ = ["Generated", "generate_cases", "variations"]

T = TypeVar("T")
#: What every reference runs under, over the judge's variables: its own hash seed (0), then another. An answer
#: that differs between them follows the iteration order of a set or dict of strings, and is no expectation.
_PROBES: tuple[Mapping[str, str] | None, ...] = (None, {"PYTHONHASHSEED": "1"})
#: Where the driver and the value codec are written in a sandbox.
_RUN = "/tmp/.rollbox-generate"
_CODEC = resources.files("rollbox.tasks").joinpath("_values.py").read_bytes()

#: Runs inside a sandbox: call the reference's function on each input, print one JSON record a line.
_DRIVER = r"""
import importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[0]))
from _values import decode, encode
module_file, entry_point = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.dirname(module_file))
spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(module_file))[0], module_file)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
spec.loader.exec_module(module)
function = getattr(module, entry_point)
apply = {"bool": bool, "tuple": tuple}
for index, case in enumerate(json.load(sys.stdin)):
    try:
        value = function(*decode(case["args"]), **decode(case["kwargs"]))
        if "apply" in case:
            value = apply[case["apply"]](value)
        record = {"case": index, "value": encode(value)}
    except BaseException as exc:
        record = {"case": index, "raised": type(exc).__name__}
    out.write(json.dumps(record) + "\n")
    out.flush()
"""


@dataclass(frozen=True)
class Generated:
    """Cases every reference agreed on, and how many inputs were dropped."""

    #: JSON-ready case records, as the task's cases file spells them.
    cases: list[dict[str, Any]]
    #: Inputs dropped because references (or reruns of one) disagreed.
    contradictory: int = 0
    #: Inputs dropped because a reference raised, timed out, or returned something that is no plain value.
    invalid: int = 0


def variations(value: Any, rng: random.Random) -> Iterator[Any]:
    """Values near ``value``, of its type: boundaries, one step away, emptied, shortened, reversed."""
    kind = type(value)
    if kind is bool:
        yield not value
    elif kind is int:
        yield from (value + 1, value - 1, 0, 1, -1, -value, value * 2, value + rng.randint(-10, 10))
    elif kind is float:
        yield from (value + 0.5, value - 0.5, 0.0, -value, value * 2, 1.0)
    elif kind is str:
        yield from ("", value[:-1], value + value[-1:], value[::-1], value.upper(), value.lower(), value[:1])
        if value:
            position = rng.randrange(len(value))
            yield value[:position] + value[position + 1 :]
    elif kind in (list, tuple):
        items = list(value)
        variants = [[], items[:-1], items[1:], items + items[-1:], items[::-1], sorted(items, key=repr), items[:1]]
        if items:
            position = rng.randrange(len(items))
            variants += [[*items[:position], near, *items[position + 1 :]] for near in variations(items[position], rng)]
        yield from (kind(v) for v in variants)
    elif kind is dict:
        yield {}
        for key in list(value)[:3]:
            yield {k: v for k, v in value.items() if k != key}


def _boundaries(annotation: str) -> list[Any]:
    simple: dict[str, list[Any]] = {
        "int": [0, 1, -1, 2, 10, -10, 100],
        "float": [0.0, 1.0, -1.0, 0.5, 1e-9, 100.25],
        "str": ["", "a", "ab", "aA", " ", "abc cba", "Zz9"],
        "bool": [True, False],
    }
    if annotation in simple:
        return simple[annotation]
    for prefix in ("list[", "List["):
        inner = annotation.removeprefix(prefix).removesuffix("]")
        if annotation.startswith(prefix) and inner in simple:
            values = simple[inner]
            return [[], values[:1], values[:3], values[:3][::-1], [values[1]] * 3]
    return []


def _strategy(value: Any, depth: int = 0) -> Any:
    """A hypothesis strategy for values shaped like ``value`` (``None`` when there is none)."""
    from hypothesis import strategies as st

    kind = type(value)
    if kind is bool:
        return st.booleans()
    if kind is int:
        bound = max(100, abs(value) * 2)
        return st.integers(-bound, bound)
    if kind is float:
        return st.floats(-1e6, 1e6, allow_nan=False)
    if kind is str:
        alphabet = sorted(set(value)) or ["a", "b", " "]
        return st.text(st.sampled_from([*alphabet, "a", " "]), max_size=max(8, 2 * len(value)))
    if kind in (list, tuple) and depth < 3:
        element = _strategy(value[0], depth + 1) if value else st.integers(-10, 10)
        if element is None:
            return None
        lists = st.lists(element, max_size=max(8, 2 * len(value)))
        return lists if kind is list else lists.map(tuple)
    return None


def _hypothesis_inputs(examples: Sequence[list[Any]], count: int, seed: int) -> list[list[Any]]:
    """``count`` argument lists drawn from strategies shaped like the first example (none without hypothesis)."""
    if not examples or count <= 0:
        return []
    try:
        from hypothesis import HealthCheck, Phase, given, settings
        from hypothesis import strategies as st
    except ImportError:
        return []
    parts = [_strategy(value) for value in examples[0]]
    if any(part is None for part in parts):
        return []
    drawn: list[list[Any]] = []

    @settings(
        max_examples=count,
        database=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(st.tuples(*parts))
    def collect(arguments: tuple[Any, ...]) -> None:
        drawn.append(list(arguments))

    collect()
    random.Random(seed).shuffle(drawn)
    return drawn[:count]


def _signature(reference: Reference, grading: FunctionGrading) -> list[str]:
    """The entry point's parameters' annotations, as source text ("" where there is none)."""
    for target in reference.targets:
        if target.path != grading.module:
            continue
        for node in ast.walk(ast.parse(target.source)):
            if isinstance(node, ast.FunctionDef) and node.name == grading.entry_point:
                return [ast.unparse(a.annotation) if a.annotation else "" for a in node.args.args]
    return []


def _function_inputs(task: Task, reference: Reference, grading: FunctionGrading, limit: int) -> list[dict[str, Any]]:
    cases: tuple[FunctionCase, ...] = load_function_cases(task.tests / grading.cases) if grading.cases else ()
    rng = random.Random(task.id)
    template = cases[0] if cases else None
    examples = [list(case.args) for case in cases if not case.kwargs]
    found: list[list[Any]] = []
    for args in examples:
        for position, value in enumerate(args):
            found += [[*args[:position], near, *args[position + 1 :]] for near in variations(value, rng)]
    annotations = _signature(reference, grading)
    if annotations and all(_boundaries(a) for a in annotations):
        columns = [_boundaries(a) for a in annotations]
        found += [[column[i % len(column)] for column in columns] for i in range(max(map(len, columns)))]
        if not examples:
            examples = [[column[1] for column in columns]]
    found += _hypothesis_inputs(examples, limit // 2, rng.randrange(2**32))
    known = {json.dumps(encode(args)) for args in examples}
    inputs: list[dict[str, Any]] = []
    for args in found:
        key = json.dumps(encode(args))
        if key in known:
            continue
        known.add(key)
        record: dict[str, Any] = {"args": encode(args), "kwargs": {}}
        if template is not None and template.apply is not None:
            record["apply"] = template.apply
        inputs.append(record)
    rng.shuffle(inputs)
    return inputs[:limit]


def _number_tokens(text: str) -> list[tuple[int, int, str]]:
    tokens, position = [], 0
    for token in text.split():
        start = text.index(token, position)
        position = start + len(token)
        try:
            int(token)
        except ValueError:
            continue
        tokens.append((start, position, token))
    return tokens


def _stdio_inputs(task: Task, grading: StdioGrading, limit: int) -> list[str]:
    rng = random.Random(task.id)
    existing = [case.input for case in load_stdio_cases(task.tests / grading.cases)]
    found: list[str] = []
    for text in existing:
        for start, end, token in _number_tokens(text)[:12]:
            for near in variations(int(token), rng):
                found.append(text[:start] + str(near) + text[end:])
    unique = [text for text in dict.fromkeys(found) if text not in existing]
    rng.shuffle(unique)
    return unique[:limit]


def _references(task: Task, reference: Reference) -> list[dict[str, bytes]]:
    extra = task.path / "references"
    others = sorted(p for p in extra.iterdir() if p.is_dir()) if extra.is_dir() else []
    return [reference.files, *(read_tree(p) for p in others)]


async def _write_reference(sb: Any, task: Task, files: dict[str, bytes]) -> None:
    await sb.write_tree(task.workspace)
    for path, data in files.items():
        await sb.write_file(path, data)


def _answered(stdout: str, values: list[Any], start: int) -> int:
    """Read a run's records of the inputs from ``start`` on into ``values``; how many inputs it answered (in
    order, up to the first line that is no record of the next one: where the run ended, or its output was cut)."""
    answered = 0
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or record.get("case") != answered:
                break
            if "value" in record:
                decode(record["value"])  # a plain value, or no expectation at all
                values[start + answered] = record["value"]
        except (ValueError, RecursionError):
            break
        answered += 1
    return answered


async def _function_outputs(
    task: Task,
    grading: FunctionGrading,
    *,
    files: dict[str, bytes],
    inputs: list[dict[str, Any]],
    env: Mapping[str, str] | None,
    sandboxes: SandboxSource,
) -> list[Any]:
    """Each input's encoded value (``_INVALID`` where the reference raised or returned no plain value, or where a
    run of its own could not answer it: it timed out, crashed or filled the output limit on it).

    One run answers the inputs in order, as the judge runs a candidate (a fork of the sandbox's Python, started
    under the probe's variables ``env``: ``rollbox.judge.runners._probe``). A run that ends before it answered
    them all is followed by another from the input it did not answer; an input that a new run cannot answer first
    is dropped, and the next run starts after it.
    """
    values: list[Any] = [_INVALID] * len(inputs)
    with probe(env):
        config = sandbox_config(SandboxConfig(limits=task.limits, network=task.network))
        async with sandboxes.sandbox(config) as sb:
            await _write_reference(sb, task, files)
            await sb.write_file(f"{_RUN}/_values.py", _CODEC)
            await sb.write_file(f"{_RUN}/driver.py", _DRIVER)
            command, warm = driver_command(sb, f"{_RUN}/driver.py", f"/workspace/{grading.module}", grading.entry_point)
            start = 0
            while start < len(inputs):
                stdin = json.dumps(inputs[start:])
                result = await sb.exec(command, stdin=stdin, env=grading_env(), warm_python=warm)
                if result.status is Status.INFRA_ERROR:
                    raise _Infra(result.error or "infra_error")
                start += _answered(result.stdout_text, values, start) or 1
    return values


async def _stdio_outputs(
    task: Task,
    grading: StdioGrading,
    *,
    files: dict[str, bytes],
    inputs: list[str],
    env: Mapping[str, str] | None,
    sandboxes: SandboxSource,
) -> list[Any]:
    outputs: list[Any] = [_INVALID] * len(inputs)
    async with sandboxes.sandbox(SandboxConfig(limits=task.limits, network=task.network)) as sb:
        await _write_reference(sb, task, files)
        for index, text in enumerate(inputs):
            with probe(env):
                result = await sb.exec(list(grading.command), stdin=text, env=grading_env())
            if result.status is Status.INFRA_ERROR:
                raise _Infra(result.error or "infra_error")
            if result.ok:
                output = result.stdout.decode("utf-8", "replace")
                outputs[index] = output if grading.comparator is Comparator.EXACT else " ".join(output.split())
    return outputs


class _Infra(Exception):
    """rollbox or the host failed a reference run."""


async def _all(runs: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """The runs' results, run at once, in their order; each ends before the first error is raised."""
    done = await asyncio.gather(*runs, return_exceptions=True)
    for result in done:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], done)


_INVALID = object()


async def generate_cases(task: Task, reference: Reference, *, sandboxes: SandboxSource, limit: int = 200) -> Generated:
    """New cases for ``task`` (a ``function`` or ``stdio`` task) that every reference agrees on.

    Raises:
        RuntimeError: rollbox or the host failed a reference run (nothing was generated).
    """
    grading = task.grading
    runs: list[list[Any]] = []
    try:
        source = await task_sandboxes(task, sandboxes)  # the task's runtime layer, image and variables
        # Every reference under every seed at once: they are independent.
        if isinstance(grading, FunctionGrading):
            function_inputs = _function_inputs(task, reference, grading, limit)
            count = len(function_inputs)
            runs = await _all(
                [
                    _function_outputs(task, grading, files=files, inputs=function_inputs, env=env, sandboxes=source)
                    for files in _references(task, reference)
                    for env in _PROBES
                ]
            )
        elif isinstance(grading, StdioGrading):
            stdio_inputs = _stdio_inputs(task, grading, limit)
            count = len(stdio_inputs)
            runs = await _all(
                [
                    _stdio_outputs(task, grading, files=files, inputs=stdio_inputs, env=env, sandboxes=source)
                    for files in _references(task, reference)
                    for env in _PROBES
                ]
            )
        else:
            return Generated([])
    except (_Infra, RollboxError) as exc:
        raise RuntimeError(f"a reference run for test generation failed: {exc}") from None
    cases: list[dict[str, Any]] = []
    contradictory = invalid = 0
    for index in range(count):
        answers = [run[index] for run in runs]
        if any(answer is _INVALID for answer in answers):
            invalid += 1
            continue
        if any(json.dumps(a, sort_keys=True) != json.dumps(answers[0], sort_keys=True) for a in answers):
            contradictory += 1
            continue
        if isinstance(grading, FunctionGrading):
            case = dict(function_inputs[index])
            case["expected"] = answers[0]
            value = decode(answers[0])
            if type(value) is float and math.isnan(value):
                invalid += 1
                continue
            cases.append(case)
        else:
            cases.append({"input": stdio_inputs[index], "output": answers[0]})
    return Generated(cases, contradictory, invalid)


def write_fix(task: Task, cases: Sequence[dict[str, Any]]) -> str:
    """Write the task's cases plus ``cases`` as a new file beside the old one (kept), point task.toml at it, and
    return its path relative to the task directory."""
    grading = task.grading
    assert isinstance(grading, FunctionGrading | StdioGrading)
    old = grading.cases
    stem = Path(old).stem if old else "cases"
    new = f"{stem}_strong.jsonl"
    existing = (task.tests / old).read_text(encoding="utf-8") if old else ""
    if existing and not existing.endswith("\n"):
        existing += "\n"
    (task.tests / new).write_text(existing + "".join(json.dumps(c) + "\n" for c in cases), encoding="utf-8")
    set_key(task.path / "task.toml", "grading", "cases", f'"{new}"')
    return f"tests/{new}"
