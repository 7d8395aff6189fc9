"""The calls the fail_to_pass tests make: a pytest plugin, run in a sandbox with the reference, that records them.

A special-case patch answers the failing tests' inputs from a table; to write one, validation needs those inputs
and the reference's answers. :func:`record_calls` runs the task's fail_to_pass tests against the reference with
:data:`PLUGIN` loaded, which traces every call of a function of the modules the reference writes made while a test
runs (``sys.settrace``, call and return events only) and writes, per call: the function, the arguments and the
outcome as Python literals (``None`` where one is no literal), whether a test called it directly, and whether the
function called itself.

The run ends one of three ways (:class:`RecordStatus`): every call recorded; more calls than the recorder keeps
(``overflow``: many inputs); or no record at all (``no_record``: the run died, a limit cut it short, or it wrote
nothing readable). The last is no evidence of anything, and is never read as either of the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

from rollbox.judge import task_sandboxes
from rollbox.sandbox import SandboxConfig, SandboxSource, Status, signal_name
from rollbox.tasks import PytestGrading, Task

from ._reference import Reference

__all__ = ["Call", "RecordStatus", "Recording", "record_calls"]

_RUN = "/tmp/.rollbox-record"
_QUIET = ("-p", "no:cacheprovider", "-q", "--tb=no", "-W", "ignore")
#: Calls recorded at most: more, and the evidence is no table of a few inputs anyway.
_MAX_CALLS = 5000

PLUGIN = r"""
import ast, json, os, sys, threading

import pytest

_TARGETS = json.loads(os.environ["ROLLBOX_RECORD_TARGETS"])
_OUT = os.environ["ROLLBOX_RECORD_OUT"]
_MAX = int(os.environ["ROLLBOX_RECORD_MAX"])
_calls = []
_state = {"test": None, "overflow": False}
_SKIP = 0x20 | 0x80 | 0x100 | 0x200  # generators and coroutines: no one return to record


def _literal(value):
    try:
        text = repr(value)
        if len(text) > 4000:
            return None
        back = ast.literal_eval(text)
        return text if type(back) is type(value) and back == value else None
    except Exception:
        return None


def _is_test(path):
    name = os.path.basename(path)
    return name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py"


def _tracer(frame, event, arg):
    if event != "call" or _state["test"] is None:
        return None
    code = frame.f_code
    names = _TARGETS.get(code.co_filename)
    if names is None or code.co_flags & _SKIP:
        return None
    if len(_calls) >= _MAX:
        _state["overflow"] = True
        return None
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 4) + bool(code.co_flags & 8)
    params = code.co_varnames[:count]
    args = {}
    for name in params:
        text = _literal(frame.f_locals.get(name))
        if text is None:
            args = None
            break
        args[name] = text
    caller = frame.f_back
    record = {
        "test": _state["test"],
        "file": code.co_filename,
        "module": str(frame.f_globals.get("__name__", "")),
        "function": getattr(code, "co_qualname", code.co_name),
        "params": list(params),
        "args": args,
        "key": repr([frame.f_locals.get(n) for n in params])[:2000] if args is None else None,
        "plain": not code.co_flags & 12 and not code.co_kwonlyargcount,
        "from_test": caller is not None and _is_test(caller.f_code.co_filename),
        "recursive": caller is not None and caller.f_code is code,
    }
    frame.f_trace_lines = False
    raised = []

    def local(frame, event, arg):
        if event == "exception":
            raised[:] = [arg[1]]
        elif event == "return":
            if arg is None and raised:
                error = raised[0]
                record["raised"] = [type(error).__module__, type(error).__qualname__, _literal(error.args)]
            else:
                record["result"] = _literal(arg)
            _calls.append(record)
        return local

    return local


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    _state["test"] = item.nodeid
    threading.settrace(_tracer)
    sys.settrace(_tracer)
    try:
        yield
    finally:
        sys.settrace(None)
        threading.settrace(None)
        _state["test"] = None


def pytest_sessionfinish(session, exitstatus):
    with open(_OUT, "w", encoding="utf-8") as f:
        json.dump({"calls": _calls, "overflow": _state["overflow"]}, f)
"""


@dataclass(frozen=True)
class Call:
    """One call the fail_to_pass tests made, of a function of a module the reference writes."""

    test: str
    #: The module's workspace-relative path, and the function's qualified name.
    path: str
    function: str
    #: The module's name, as the tests import it.
    module: str
    #: The function's parameters, in order.
    params: tuple[str, ...]
    #: Each parameter's value as a Python literal (``None``: one of them is no literal).
    args: dict[str, str] | None
    #: The arguments as ``repr`` shows them (to count distinct inputs, literal or not).
    key: str
    #: The reference's answer as a literal; or what it raised (module, class name, its arguments as a literal).
    result: str | None
    raised: tuple[str, str, str | None] | None
    from_test: bool
    recursive: bool
    #: Whether every parameter is positional (no ``*args``, ``**kwargs`` or keyword-only one).
    plain: bool


class RecordStatus(str, Enum):
    """How a recording run ended."""

    #: The run finished and its record holds every call the tests made.
    RECORDED = "recorded"
    #: The run finished, but the tests made more calls than the recorder keeps (``_MAX_CALLS``): many inputs.
    OVERFLOW = "overflow"
    #: The run left no record: it died (an exit in the code under test, a signal), a limit cut it short, or it wrote
    #: nothing readable. Nothing is known of the calls.
    NO_RECORD = "no_record"


@dataclass(frozen=True)
class Recording:
    """What a recording run gave."""

    status: RecordStatus
    #: The calls (``recorded`` only; empty otherwise).
    calls: tuple[Call, ...] = ()
    #: For ``no_record``: how the run ended, to show in a reason.
    detail: str = ""


def _call(data: dict[str, Any]) -> Call:
    args = data["args"]
    raised = data.get("raised")
    return Call(
        test=str(data["test"]),
        path=str(data["file"]).removeprefix("/workspace/"),
        function=str(data["function"]),
        module=str(data["module"]),
        params=tuple(str(p) for p in data["params"]),
        args=args,
        key=json.dumps(args, sort_keys=True) if args is not None else str(data["key"]),
        result=data.get("result"),
        raised=(str(raised[0]), str(raised[1]), raised[2]) if raised else None,
        from_test=bool(data["from_test"]),
        recursive=bool(data["recursive"]),
        plain=bool(data["plain"]),
    )


async def record_calls(task: Task, reference: Reference, sandboxes: SandboxSource) -> Recording:
    """The calls the task's fail_to_pass tests make with the reference in place (see :class:`RecordStatus`).

    Raises:
        RuntimeError: rollbox or the host failed the run.
    """
    grading = task.grading
    assert isinstance(grading, PytestGrading) and grading.fail_to_pass
    targets = {f"/workspace/{t.path}": list(t.functions) for t in reference.targets}
    if grading.tests_in_workspace:
        root, ids, options = "/workspace", list(grading.fail_to_pass), ["--rootdir=/workspace"]
    else:
        root, ids = _RUN, list(grading.fail_to_pass)
        options = ["-c", f"{_RUN}/pytest.ini", f"--rootdir={_RUN}"]
    source = await task_sandboxes(task, sandboxes)
    limits = task.limits
    async with source.sandbox(SandboxConfig(limits=limits, network=task.network)) as sb:
        await sb.write_tree(task.workspace)
        await sb.write_files(dict(reference.files))
        for path in grading.removed_by_tests:  # as the judge has them: gone when the tests run
            await sb.remove(path)
        await sb.write_tree(task.tests, "." if grading.tests_in_workspace else f"{_RUN}/tests")
        await sb.write_file(f"{_RUN}/pytest.ini", "[pytest]\npythonpath = /workspace\n")
        await sb.write_file(f"{_RUN}/plugin/rollbox_recorder.py", PLUGIN)
        result = await sb.exec(
            [
                "python3",
                "-s",
                "-m",
                "pytest",
                *options,
                "-p",
                "rollbox_recorder",
                "-p",
                "no:cacheprovider",
                *_QUIET,
                *ids,
            ],
            cwd=root,
            env={
                "PYTHONHASHSEED": "0",
                "TZ": "UTC",
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONPATH": f"{_RUN}/plugin",
                "ROLLBOX_RECORD_TARGETS": json.dumps(targets),
                "ROLLBOX_RECORD_OUT": f"{_RUN}/calls.json",
                "ROLLBOX_RECORD_MAX": str(_MAX_CALLS),
            },
        )
        if result.status is Status.INFRA_ERROR:
            raise RuntimeError(f"recording the fail_to_pass tests' calls failed: {result.error}")
        try:
            data = json.loads(await sb.read_file(f"{_RUN}/calls.json", max_bytes=64 * 1024 * 1024))
        except (OSError, ValueError):
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("calls"), list):
        how = result.status.value
        if result.exit_code is not None:
            how += f", exit code {result.exit_code}"
        elif result.signal is not None:
            how += f", {signal_name(result.signal)}"
        detail = f"the recording run of the fail_to_pass tests left no record ({how}): the calls are unknown"
        return Recording(RecordStatus.NO_RECORD, detail=detail)
    if data.get("overflow"):
        return Recording(RecordStatus.OVERFLOW)
    return Recording(RecordStatus.RECORDED, tuple(_call(c) for c in data["calls"]))
