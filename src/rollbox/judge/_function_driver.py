"""Runs inside a grading sandbox: call the candidate's function on each case's inputs, report strict outputs.

    python3 -s driver.pyc MODULE_FILE ENTRY_POINT < inputs.json

The inputs (a JSON list of ``{"args": [...], "kwargs": {...}}``) are all this process ever sees: expected
outputs stay with the judge. Reports go, one JSON object a line, to a duplicate of the original stdout taken
before the candidate's code is imported; the candidate's own prints go to stderr. Only the standard library.
"""

import importlib.util
import json
import os
import sys

from _values import decode, encode


def main() -> None:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    module_file, entry_point = sys.argv[1], sys.argv[2]
    cases = json.load(sys.stdin)

    def emit(record: dict) -> None:
        channel.write(json.dumps(record) + "\n")
        channel.flush()

    sys.path.insert(0, os.path.dirname(os.path.abspath(module_file)))
    name = os.path.splitext(os.path.basename(module_file))[0]
    try:
        spec = importlib.util.spec_from_file_location(name, module_file)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        function = getattr(module, entry_point)
    except BaseException as exc:
        emit({"import_error": f"{type(exc).__name__}: {exc}"[:1000]})
        return
    for index, case in enumerate(cases):
        try:
            value = function(*decode(case["args"]), **decode(case["kwargs"]))
        except BaseException as exc:
            emit({"case": index, "raised": f"{type(exc).__name__}: {exc}"[:1000]})
            continue
        try:
            emit({"case": index, "value": encode(value)})
        except (TypeError, ValueError, RecursionError) as exc:
            emit({"case": index, "unserializable": str(exc)[:1000]})


if __name__ == "__main__":
    main()
