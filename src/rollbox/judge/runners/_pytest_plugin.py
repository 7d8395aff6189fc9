"""The judge's pytest plugin: runs inside the grading sandbox, loaded with ``-p`` before any test module.

It reports one JSON object a line on a duplicate of the original stdout, taken at import, before the candidate's
code is imported; everything else written to stdout goes to stderr. Records::

    {"collected": ["tests/test_x.py::test_a", ...]}
    {"collect_error": "tests/test_x.py"}
    {"id": "tests/test_x.py::test_a", "outcome": "passed"|"failed"|"error"|"skipped"|"xfailed"|"xpassed"}

Only the standard library and pytest's public hooks.
"""

import json
import os

_channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
_outcomes: dict = {}


def _emit(record: dict) -> None:
    _channel.write(json.dumps(record) + "\n")
    _channel.flush()


def pytest_collection_modifyitems(session, config, items) -> None:
    _emit({"collected": [item.nodeid for item in items]})


def pytest_collectreport(report) -> None:
    if report.failed:
        _emit({"collect_error": report.nodeid})


def pytest_runtest_logreport(report) -> None:
    xfail = hasattr(report, "wasxfail")
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if report.passed:
            outcome = "xpassed" if xfail else "passed"
        elif report.skipped:
            outcome = "xfailed" if xfail else "skipped"
        else:
            outcome = "failed" if report.when == "call" else "error"
        _outcomes[report.nodeid] = outcome
    elif report.when == "teardown" and report.failed:
        _outcomes[report.nodeid] = "error"


def pytest_runtest_logfinish(nodeid, location) -> None:
    _emit({"id": nodeid, "outcome": _outcomes.pop(nodeid, "error")})
