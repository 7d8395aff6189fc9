"""Runs inside a grading sandbox: the task's ``check(candidate)`` in this process, the candidate in another.

    python3 -s driver.pyc MODULE_FILE ENTRY_POINT [MODULE...] < request.json

This process (the judge's side) never runs any of the candidate's code. Before it reads anything of the check,
it makes itself unreadable to every other process of its user (``PR_SET_DUMPABLE`` 0: no ``/proc/PID/mem``,
``fd``, ``environ`` or ``cwd``, no ``process_vm_readv``, no ptrace) and forks the candidate's process, so that
nothing of the check was ever in that process's memory either. The candidate's process keeps only stderr (as its
stdout too) and a pair of pipes to this one; it loads the candidate's module and serves calls, one JSON object a
line: ``{"args": [...], "kwargs": {...}}`` in, and out ``{"value": ...}`` (a strict plain value, see
``rollbox.tasks._values``), ``{"raised": NAME, "message": ...}`` or ``{"unserializable": ...}``. Only then does
this process read the request (stdin: ``{"id": ..., "source": ...}``), and run the check with ``candidate``
standing for a function that sends its arguments over and returns the plain value that comes back: the check's
expectations, its locals and its code stay here, where the candidate cannot read them, and so does the
comparison. The modules the check imports (the judge names them after the entry point) are imported first, and
later imports come from the system's read-only directories alone: the candidate owns /workspace and /tmp, where
it could rename even this driver's directory and put a module of its own in its place. A check whose call passes
something that is not a plain value, or that counts on the candidate
changing an argument in place, cannot be graded so: the call raises ``TypeError``, or the change is not seen.

Reports go, one JSON object a line, to a duplicate of the original stdout that only this process holds:

    {"ready": true}                              the request was read; the check's own code runs next
    {"import_error": "..."}                      the candidate's module could not be imported
    {"id": "...", "outcome": "passed"|"failed"|"error"}
                                                 the completion record, once, after the check returned

Only the standard library; the codec is loaded privately, never put in ``sys.modules``.
"""

import builtins
import contextlib
import ctypes
import importlib
import json
import marshal
import os
import sys
import types

_PR_SET_DUMPABLE = 4
_WRITABLE = ("/workspace", "/tmp", "/dev/shm")


def load_codec(directory):
    namespace = {"__name__": "_rollbox_values"}
    with open(os.path.join(directory, "_values.pyc"), "rb") as f:
        exec(marshal.loads(f.read()[16:]), namespace)  # the judge's bytecode: magic, flags, 8 unused bytes
    return namespace["encode"], namespace["decode"]


def _rebuilt(name, message):
    """The builtin exception the candidate's call raised, rebuilt here (a ``RuntimeError`` when it was another)."""
    kind = getattr(builtins, name, None) if isinstance(name, str) else None
    if not (isinstance(kind, type) and issubclass(kind, Exception)):
        kind = RuntimeError
    try:
        return kind(str(message))
    except Exception:  # one that needs other arguments (UnicodeDecodeError)
        return RuntimeError(f"{name}: {message}")


def serve(calls, replies, module_file, entry_point, codec):
    """The candidate's process: load its module, then answer calls until the judge's side closes the pipe."""
    encode, decode = codec
    out = os.fdopen(replies, "w", encoding="utf-8")
    exceptions = {k: v for k, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, Exception)}
    dumps, loads, write, flush = json.dumps, json.loads, out.write, out.flush
    owner, getpid, leave = os.getpid(), os.getpid, os._exit

    def reply(record):
        if getpid() != owner:  # a fork of the candidate's that returned into this loop: it must not answer too
            leave(0)
        write(dumps(record) + "\n")
        flush()

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
    except BaseException as exc:  # SystemExit at import is the candidate's failure too
        reply({"import_error": f"{type(exc).__name__}: {exc}"[:1000]})
        return
    reply({"loaded": True})
    for line in os.fdopen(calls, encoding="utf-8"):
        request = loads(line)
        try:
            value = function(*decode(request["args"]), **decode(request["kwargs"]))
        except BaseException as exc:  # SystemExit too: the call failed, the judge's side goes on
            kind = type(exc)
            named = kind.__name__ if exceptions.get(kind.__name__) is kind else "RuntimeError"
            reply({"raised": named, "message": str(exc)[:1000]})
            continue
        try:
            reply({"value": encode(value)})
        except (TypeError, ValueError, RecursionError) as exc:
            reply({"unserializable": str(exc)[:1000]})


def main():
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    here = os.path.dirname(os.path.abspath(__file__))
    module_file, entry_point = sys.argv[1], sys.argv[2]
    encode, decode = load_codec(here)
    for name in sys.argv[3:]:
        with contextlib.suppress(BaseException):  # the candidate's own module, say: the check will say
            importlib.import_module(name)
    sys.path[:] = [p for p in sys.path if p.startswith("/") and not p.startswith(_WRITABLE)]
    calls_read, calls_write = os.pipe()
    replies_read, replies_write = os.pipe()
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    dumps, loads = json.dumps, json.loads

    def emit(record):
        channel.write(dumps(record) + "\n")
        channel.flush()

    emit({"ready": True})  # nothing of the task's or the candidate's has run yet
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork() == 0:
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)  # the request, still unread, is never the candidate's
            os.dup2(2, 1)  # nor the channel
            keep = {calls_read, replies_write}
            for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
                if fd > 2 and fd not in keep:
                    with contextlib.suppress(OSError):  # the listing's own descriptor, closed already
                        os.close(fd)
            serve(calls_read, replies_write, module_file, entry_point, (encode, decode))
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(0)
    os.close(calls_read)
    os.close(replies_write)
    os.dup2(2, 1)  # what the check prints is not a report
    flush_out, flush_err, exit_now = sys.stdout.flush, sys.stderr.flush, os._exit
    request = json.load(sys.stdin)
    if "random" in sys.modules:  # the candidate's process holds a copy of this process's state from before
        sys.modules["random"].seed()
    to_candidate = os.fdopen(calls_write, "w", encoding="utf-8")
    from_candidate = os.fdopen(replies_read, encoding="utf-8")

    def receive():
        line = from_candidate.readline()
        answer = loads(line) if line else None
        if not isinstance(answer, dict):
            raise RuntimeError("the candidate's process ended, or answered with something that is not a reply")
        return answer

    try:
        first = receive()
    except (RuntimeError, ValueError, RecursionError):
        first = {"import_error": "the candidate's process ended while its module was loading"}
    if "import_error" in first:
        emit({"import_error": str(first["import_error"])[:1000]})
        flush_out()
        flush_err()
        exit_now(0)

    def candidate(*args, **kwargs):
        # Arguments go over as plain values; only a plain value comes back.
        to_candidate.write(dumps({"args": encode(list(args)), "kwargs": encode(kwargs)}) + "\n")
        to_candidate.flush()
        answer = receive()
        if "value" in answer:
            return decode(answer["value"])
        if "raised" in answer:
            raise _rebuilt(answer.get("raised"), answer.get("message"))
        raise TypeError(f"the candidate returned a value that is not plain: {answer.get('unserializable')}")

    module = types.ModuleType("_rollbox_check")
    try:
        exec(compile(request["source"], "<check>", "exec"), module.__dict__)
        check = module.__dict__["check"]
    except BaseException:  # a broken check is this run's error, reported below
        check = None
    if check is None:
        outcome = "error"
    else:
        try:
            check(candidate)
            outcome = "passed"
        except AssertionError:
            outcome = "failed"
        except BaseException:
            outcome = "error"
    emit({"id": request["id"], "outcome": outcome})  # the completion record: the last thing this process writes
    try:
        flush_out()
        flush_err()
    finally:
        exit_now(0)


if __name__ == "__main__":
    main()
