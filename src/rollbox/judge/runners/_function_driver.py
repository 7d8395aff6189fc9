"""Runs inside a grading sandbox: call the candidate's function on each case's inputs, report strict outputs.

    python3 -s driver.pyc MODULE_FILE ENTRY_POINT < inputs.json

The inputs (a JSON list of ``{"args": [...], "kwargs": {...}}``, each with an optional ``"apply"``: ``bool`` or
``tuple``, applied to the returned value here, as the assertion it came from did) are all this process ever sees:
expected outputs stay with the judge. Reports go, one JSON object a line, to a duplicate of the original stdout taken
before the candidate's code is imported, by this process alone (a fork of the candidate's that returns here ends
at its first report); the candidate's own prints go to stderr. Only the standard library.

This runs in a fork of the sandbox's pre-started Python, where every object touched costs a copied page: the codec
and the candidate's module are loaded by plain ``exec``, without the import system's finders and specs.
"""

import json
import marshal
import os
import sys
import types

with open(os.path.join(os.path.dirname(__file__), "_values.pyc"), "rb") as _codec:
    _namespace = {"__name__": "_rollbox_values"}
    exec(marshal.loads(_codec.read()[16:]), _namespace)  # the judge's bytecode: magic, flags, 8 unused bytes
decode, encode = _namespace["decode"], _namespace["encode"]
_APPLY = {"bool": bool, "tuple": tuple}  # taken now: the candidate's module may rebind the builtins


def main() -> None:
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    module_file, entry_point = sys.argv[1], sys.argv[2]
    cases = json.load(sys.stdin)

    owner, getpid, leave = os.getpid(), os.getpid, os._exit

    def emit(record: dict) -> None:
        if getpid() != owner:  # a fork of the candidate's that returned into this loop: only the driver reports
            leave(0)
        channel.write(json.dumps(record) + "\n")
        channel.flush()

    sys.path.insert(0, os.path.dirname(os.path.abspath(module_file)))
    name = os.path.splitext(os.path.basename(module_file))[0]
    try:
        module = types.ModuleType(name)
        module.__file__ = module_file
        sys.modules[name] = module
        with open(module_file, "rb") as f:
            source = f.read()
        exec(compile(source, module_file, "exec", dont_inherit=True), module.__dict__)
        function = getattr(module, entry_point)
    except BaseException as exc:
        emit({"import_error": f"{type(exc).__name__}: {exc}"[:1000]})
        return
    for index, case in enumerate(cases):
        try:
            value = function(*decode(case["args"]), **decode(case["kwargs"]))
            if "apply" in case:
                value = _APPLY[case["apply"]](value)
        except BaseException as exc:
            emit({"case": index, "raised": f"{type(exc).__name__}: {exc}"[:1000]})
            continue
        try:
            emit({"case": index, "value": encode(value)})
        except (TypeError, ValueError, RecursionError) as exc:
            emit({"case": index, "unserializable": str(exc)[:1000]})


if __name__ == "__main__":
    main()
