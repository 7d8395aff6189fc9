"""Runs inside a grading sandbox: ONE variant of the task's check (the real one or a canary) against the candidate.

    python3 -s driver.pyc MODULE_FILE ENTRY_POINT < variant.json

stdin is ``{"id": ..., "source": ..., "watch": [MODULE, ...]}``: one check module under a random id, and the
modules the check imports, to be imported and watched before the candidate's code runs. The judge starts one such
process, in a fresh sandbox, per variant: nothing here says whether this is the real check, and no other
variant is anywhere in this process. The check gets the candidate's function wrapped so that every value
it returns is a strict value, round-tripped through the judge's codec: an object that claims to equal everything
never reaches an assertion.

Reports go, one JSON object a line, to a duplicate of the original stdout taken before the candidate's code is
imported; the candidate's own prints go to stderr:

    {"ready": true}                              before any code of the task or the candidate runs
    {"import_error": "..."}                      the candidate's module could not be imported
    {"integrity": "..."}                         a builtin, or a name the check relies on, was rebound
    {"id": "...", "outcome": "passed"|"failed"|"error"}
                                                 the completion record, written once, after the check returned

The candidate runs in this process and can forge any of these; the judge tells forgeries apart only by
comparing variants (see ``_check.py``). Sources arrive on stdin, not as files, so there is nothing on disk for
the candidate to read. Only the standard library; the codec is loaded privately, never put in ``sys.modules``.
"""

import builtins
import importlib
import importlib.util
import json
import marshal
import os
import sys
import types

_MISSING = object()


def load_codec(directory):
    namespace = {"__name__": "_rollbox_values"}
    with open(os.path.join(directory, "_values.pyc"), "rb") as f:
        exec(marshal.loads(f.read()[16:]), namespace)  # the judge's bytecode: magic, flags, 8 unused bytes
    return namespace["encode"], namespace["decode"]


def snapshot(label, namespace, only_callables, keys=None):
    kept = {
        k: v
        for k, v in namespace.items()
        if (keys is None or k in keys) and (not only_callables or callable(v) or isinstance(v, types.ModuleType))
    }
    return label, namespace, kept


def watch_modules(names, snapshots):
    """Import the modules a check relies on before the candidate's code runs, and watch their callables."""
    watched = set()
    for name in sorted(names):
        try:
            importlib.import_module(name)
        except BaseException:  # not importable yet (the candidate's own module, say)
            continue
        for part in (name.split(".")[0], name):
            found = sys.modules.get(part)
            if isinstance(found, types.ModuleType) and part not in watched and found is not builtins:
                watched.add(part)
                snapshots.append(snapshot(part, found.__dict__, True))
    snapshots.append(snapshot("sys.modules", sys.modules, False, watched))


def rebound(snapshots):
    """The first name that no longer refers to what it did, or None."""
    for label, namespace, kept in snapshots:
        for key, value in kept.items():
            if namespace.get(key, _MISSING) is not value:
                return f"{label}.{key}"
    return None


def main():
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    module_file, entry_point = sys.argv[1], sys.argv[2]
    dumps, loads = json.dumps, json.loads
    encode, decode = load_codec(os.path.dirname(os.path.abspath(__file__)))
    flush_out, flush_err, exit_now = sys.stdout.flush, sys.stderr.flush, os._exit

    def emit(record):
        channel.write(dumps(record) + "\n")
        channel.flush()

    request = json.load(sys.stdin)
    variant_id = request["id"]
    emit({"ready": True})

    snapshots = [snapshot("builtins", builtins.__dict__, False)]
    watch_modules(request["watch"], snapshots)
    module = types.ModuleType("_rollbox_check")
    try:
        exec(compile(request["source"], "<check>", "exec"), module.__dict__)
        check = module.__dict__["check"]
    except BaseException:  # a broken check is this run's error, reported below
        check = None
    else:
        snapshots.append(snapshot("the check's module", module.__dict__, True))
    del request

    sys.path.insert(0, os.path.dirname(os.path.abspath(module_file)))
    name = os.path.splitext(os.path.basename(module_file))[0]
    try:
        spec = importlib.util.spec_from_file_location(name, module_file)
        candidate_module = importlib.util.module_from_spec(spec)
        sys.modules[name] = candidate_module
        spec.loader.exec_module(candidate_module)
        function = getattr(candidate_module, entry_point)
    except BaseException as exc:  # SystemExit at import is the candidate's failure too
        emit({"import_error": f"{type(exc).__name__}: {exc}"[:1000]})
        flush_out()
        flush_err()
        exit_now(0)

    def candidate(*args, **kwargs):
        # Only a strict value comes back: exact builtin types, rebuilt from their JSON form.
        return decode(loads(dumps(encode(function(*args, **kwargs)))))

    if check is None:
        outcome = "error"
    else:
        try:
            check(candidate)
            outcome = "passed"
        except AssertionError:
            outcome = "failed"
        except BaseException:  # SystemExit from the candidate fails the check, not the run
            outcome = "error"
    changed = rebound(snapshots)
    if changed is not None:
        emit({"integrity": f"{changed} was rebound while the check ran"})
    emit({"id": variant_id, "outcome": outcome})  # the completion record: the last thing this process writes
    try:
        flush_out()
        flush_err()
    finally:
        exit_now(0)  # no atexit handler or finalizer of the candidate's runs after the completion record


if __name__ == "__main__":
    main()
