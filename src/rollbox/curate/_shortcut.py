"""Special-case patches: the starting workspace, its bug left in place, with the failing tests' calls answered from
a table of their inputs.

A bug-fix task whose fail_to_pass tests give the code one input (``pluralize('cow')``) is passed by a three-line
patch that special-cases it, and training would reward that patch as a fix. From the calls the fail_to_pass tests
make with the reference in place (``_recorder``), two patches, each tried when its table holds at most
``max_inputs`` distinct inputs, all of them Python literals:

- ``shortcut_in_changed_function``: each function the reference changes answers the calls made of it (but those
  it makes of itself) with the reference's answers;
- ``shortcut_at_entry``: each function of the modules the reference writes that a test calls directly answers
  those calls.

Each answer is a ``return`` of the reference's value, or a ``raise`` of its exception (a builtin one, or one the
module defines). A patch that passes every test makes the task ``shortcut_passes``. Tasks whose fail_to_pass tests
give more inputs than that are not tried: their evidence spans several inputs, and a table of them is no longer a
few lines.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

from rollbox.tasks import Task

from ._recorder import Call
from ._reference import Reference
from ._source import Edit, apply_edits, functions

__all__ = ["Shortcut", "distinct_inputs", "shortcuts"]

_MARK = "  # rollbox validate: a special case"


@dataclass(frozen=True)
class Shortcut:
    """A special-case patch: its name, the files laid over the workspace, and the special cases in words."""

    name: str
    files: dict[str, bytes]
    #: The distinct inputs it answers, and one of them shown (``pluralize('cow') -> 'kine'``).
    inputs: int
    example: str


def distinct_inputs(calls: Sequence[Call]) -> int:
    """How many distinct inputs the tests gave the functions they call directly (literal or not)."""
    return len({(c.path, c.function, c.key) for c in calls if c.from_test})


def _answer(call: Call, defined: set[str]) -> str | None:
    """The statement that answers ``call`` as the reference did, or ``None`` when there is none to write."""
    if call.raised is not None:
        module, name, args = call.raised
        if args is None or "." in name or not (module == "builtins" or name in defined):
            return None
        return f"raise {name}(*{args})"
    return None if call.result is None else f"return {call.result}"


def _prelude(params: Sequence[str], table: dict[str, tuple[dict[str, str], str]], indent: str) -> str:
    lines = []
    for args, answer in table.values():
        if params:
            names = ", ".join(params) + ","
            values = ", ".join(args[p] for p in params) + ","
            lines.append(f"{indent}if ({names}) == ({values}):{_MARK}\n{indent}    {answer}\n")
        else:
            lines.append(f"{indent}if True:{_MARK}\n{indent}    {answer}\n")
    return "".join(lines)


def _patched(source: str, cases: dict[str, dict[str, tuple[dict[str, str], str]]]) -> str | None:
    """``source`` with a table of answers at the top of each function ``cases`` names (qualified name -> inputs ->
    (arguments, answer)); ``None`` when a function is missing or has no body of its own lines."""
    tree = ast.parse(source)
    spans = {span.qualname: span.node for span in functions(tree)}
    lines = source.encode().splitlines(keepends=True)
    edits = []
    for name, table in cases.items():
        node = spans.get(name)
        if node is None:
            return None
        body = node.body
        docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        first = body[1] if docstring and len(body) > 1 else body[0]
        if first.lineno == node.lineno or (docstring and len(body) == 1):
            return None
        indent = lines[first.lineno - 1][: first.col_offset].decode(errors="replace")
        if indent.strip():
            return None
        params = [a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]]
        params += [a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None]
        recorded = next(iter(table.values()))[0]
        if sorted(params) != sorted(recorded):
            return None
        edits.append(Edit(first.lineno, 0, first.lineno, 0, _prelude(params, table, indent)))
    return apply_edits(source, edits)


def _shortcut(name: str, task: Task, calls: Sequence[Call], max_inputs: int) -> Shortcut | None:
    """The patch answering ``calls``, when every one can be answered and they are at most ``max_inputs``."""
    if not calls:
        return None
    by_file: dict[str, dict[str, dict[str, tuple[dict[str, str], str]]]] = {}
    answers: dict[tuple[str, str, str], str] = {}
    for call in calls:
        module = task.workspace / call.path
        if call.args is None or not module.is_file():
            return None
        source = module.read_text(encoding="utf-8", errors="replace")
        defined = {n.name for n in ast.parse(source).body if isinstance(n, ast.ClassDef)}
        answer = _answer(call, defined)
        if answer is None or answers.setdefault((call.path, call.function, call.key), answer) != answer:
            return None  # no literal answer, or the same input answered two ways
        by_file.setdefault(call.path, {}).setdefault(call.function, {})[call.key] = (call.args, answer)
    if len(answers) > max_inputs:
        return None
    files: dict[str, bytes] = {}
    for relative, cases in by_file.items():
        patched = _patched((task.workspace / relative).read_text(encoding="utf-8"), cases)
        if patched is None:
            return None
        files[relative] = patched.encode()
    (where, function, _), answer = next(iter(answers.items()))
    example = next(c for c in calls if (c.path, c.function) == (where, function))
    shown = ", ".join((example.args or {}).values())
    return Shortcut(name, files, len(answers), f"`{function}({shown})` -> `{answer}`")


def shortcuts(task: Task, reference: Reference, calls: Sequence[Call], max_inputs: int) -> list[Shortcut]:
    """The special-case patches for ``calls`` (see the module's docstring) that can be written."""
    changed = {(t.path, f) for t in reference.targets for f in t.functions}
    found = [
        _shortcut(
            "shortcut_in_changed_function",
            task,
            [c for c in calls if (c.path, c.function) in changed and not c.recursive],
            max_inputs,
        ),
        _shortcut("shortcut_at_entry", task, [c for c in calls if c.from_test], max_inputs),
    ]
    unique: dict[bytes, Shortcut] = {}
    for shortcut in found:
        if shortcut is not None:
            unique.setdefault(b"\0".join(shortcut.files[p] for p in sorted(shortcut.files)), shortcut)
    return list(unique.values())
