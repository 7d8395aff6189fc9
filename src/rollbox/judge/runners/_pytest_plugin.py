"""The judge's pytest plugin: runs inside the grading sandbox, loaded with ``-p`` before any test module and
before any conftest, so before any of the candidate's code.

It reports one JSON object a line on a duplicate of the original stdout, taken at import; everything else
written to stdout goes to stderr. Records::

    {"collected": ["tests/test_x.py::test_a", ...]}
    {"collect_error": "tests/test_x.py"}
    {"start": "tests/test_x.py::test_a"}
    {"seal": SEAL_ID, "value": PLAIN_VALUE[, "token": TOKEN]}      a sealed expectation's value
    {"seal": SEAL_ID, "unsealable": TYPE_NAME[, "token": TOKEN]}   a value that is not plain
    {"id": "tests/test_x.py::test_a", "outcome": "passed"|"failed"|"error"|"skipped"|"xfailed"|"xpassed"}

A value belongs to the test between whose ``start`` and ``id`` records it comes (none: reported at import, or by a
thread its test left running), whatever the candidate's code changed of this module meanwhile.

The hidden test modules (and every other Python module of the task's tests/) come sealed
(``rollbox.judge.integrity._seal``) and as bytecode only: the files at their paths are empty, and
``$ROLLBOX_SEALED/sealed.json`` maps each one's path to its code; each seal's receipt comes on stdin, never in a
file the candidate's code could open. The plugin reads all of it at import, before any of the candidate's code
runs; a finder first on ``sys.meta_path`` then gives each such path its module from that code,
whatever is at the path by then. A sealed assertion calls ``__rollbox_seal__``, which reports the value the test
computed, encoded exactly by the judge's codec (loaded privately; other libraries' values as the plain value they
stand for: its ``plain``), and answers with the seal's receipt, which the assertion checks: the test goes on.
Reporting writes to the channel's descriptor through references the function holds, not through this module's
names, which the candidate's code can reach.

Only the standard library and pytest's public hooks.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import json
import marshal
import os
import sys

_channel = os.dup(1)
os.dup2(2, 1)
_outcomes: dict = {}
_here = os.path.dirname(os.path.abspath(__file__))
_codec = {"__name__": "_rollbox_values"}
with open(os.path.join(_here, "_values.pyc"), "rb") as _file:
    exec(marshal.loads(_file.read()[16:]), _codec)  # the judge's bytecode: magic, flags, 8 unused bytes
_encode, _plain = _codec["encode"], _codec["plain"]
_sealed: dict = {}
_directory = os.environ.get("ROLLBOX_SEALED")
if _directory:
    with open(os.path.join(_directory, "sealed.json"), encoding="utf-8") as _file:
        for _path, _blob in json.load(_file).items():
            with open(os.path.join(_directory, _blob), "rb") as _code:
                _sealed[_path] = _code.read()
# A package's modules are looked up by the package's name (its __init__.py), the others by their own.
_names = {
    os.path.basename(os.path.dirname(p)) if p.endswith("/__init__.py") else os.path.basename(p)[:-3] for p in _sealed
}


def _writer(fd, dumps, write, getpid, leave):
    owner = getpid()

    def emit(record):
        if getpid() != owner:  # a fork of the candidate's that returned into pytest: only this process reports
            leave(0)
        data = (dumps(record) + "\n").encode()  # ASCII: json.dumps escapes the rest
        while data:
            data = data[write(fd, data) :]

    return emit


_emit = _writer(_channel, json.dumps, os.write, os.getpid, os._exit)


def _reporter(emit, encode, plain, receipts):
    def __rollbox_seal__(seal_id, value, token=None):
        """Report the value a sealed assertion holds (the judge compares it with the expectation, after the run);
        answer with the seal's receipt."""
        record = {"seal": seal_id}
        if token is not None:
            record["token"] = str(token)
        try:
            record["value"] = encode(value, convert=plain)
        except Exception:  # not a plain value, nested too deeply, or its conversion failed
            kind = type(value)
            record["unsealable"] = f"{kind.__module__}.{kind.__qualname__}"[:200]
        emit(record)
        return receipts.get(seal_id)

    return __rollbox_seal__


def _stdin():
    read = []
    while chunk := os.read(0, 1 << 16):
        read.append(chunk)
    return b"".join(read)


__rollbox_seal__ = _reporter(_emit, _encode, _plain, json.loads(_stdin() or b"{}"))


class _SealedLoader(importlib.abc.Loader):
    def __init__(self, path):
        self.path = path

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__dict__["__rollbox_seal__"] = __rollbox_seal__
        exec(marshal.loads(_sealed[self.path][16:]), module.__dict__)  # a sourceless .pyc: its header first


class _SealedFinder:
    """Gives a sealed module's path its module from the judge's code, whatever the file there holds."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.rpartition(".")[2] not in _names:
            return None
        found = importlib.machinery.PathFinder.find_spec(fullname, path)
        origin = os.path.abspath(found.origin) if found is not None and found.origin else None
        if origin not in _sealed:
            return None
        package = [os.path.dirname(origin)] if os.path.basename(origin) == "__init__.py" else None
        return importlib.util.spec_from_file_location(
            fullname, origin, loader=_SealedLoader(origin), submodule_search_locations=package
        )


if _sealed:
    sys.meta_path.insert(0, _SealedFinder)


def pytest_collection_modifyitems(session, config, items) -> None:
    _emit({"collected": [item.nodeid for item in items]})


def pytest_collectreport(report) -> None:
    if report.failed:
        _emit({"collect_error": report.nodeid})


def pytest_runtest_logstart(nodeid, location) -> None:
    _emit({"start": nodeid})


def pytest_runtest_logreport(report) -> None:
    xfail = hasattr(report, "wasxfail")
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            outcome = "xpassed" if xfail else "passed"
        elif report.skipped:
            outcome = "xfailed" if xfail else "skipped"
        else:
            outcome = "failed" if report.when == "call" else "error"
        # A test's failed subtest fails the test: pytest (9 and later) reports a unittest test whose failures were
        # all inside `self.subTest(...)` as passed, after a failed report for each of those subtests.
        if _outcomes.get(report.nodeid) not in ("failed", "error"):
            _outcomes[report.nodeid] = outcome
    elif report.when == "teardown" and report.failed:
        _outcomes[report.nodeid] = "error"


def pytest_runtest_logfinish(nodeid, location) -> None:
    _emit({"id": nodeid, "outcome": _outcomes.pop(nodeid, "error")})
