"""Exceptions raised by the sandbox layer.

Blame decides the channel: what the sandboxed program did (a limit hit, a non-zero exit, a signal) is
a result value (:class:`rollbox.ExecResult` with a :class:`rollbox.Status`). Exceptions are for faults of
rollbox or its host that happen before anything ran, and for misuse of the API::

    RollboxError
    ├── IsolationUnavailable     this machine cannot give the isolation asked for (not root, no C
    │                            compiler, no user namespaces, no usable cgroup, unsupported architecture, ...)
    ├── SandboxError             the sandbox could not be built, or broke in a way that is rollbox's fault
    ├── SandboxStateError        the API was misused (exec on a closed sandbox, re-entering a sandbox)
    └── TreeTooLarge             a tree copied out of a sandbox held more than the caller allowed: what the
                                 program wrote, never a fault of rollbox's

Once a sandbox is running, an infrastructure fault during an ``exec`` comes back as a result with status
``infra_error`` and a readable ``error``, so that batch callers never lose the other results.
"""

from __future__ import annotations


class RollboxError(Exception):
    """The root of every exception rollbox raises."""


class IsolationUnavailable(RollboxError):
    """The machine cannot provide the isolation that was asked for; the message says how to fix it."""


class SandboxError(RollboxError):
    """rollbox or the host failed to build or run a sandbox (never the sandboxed program's fault)."""


class SandboxStateError(RollboxError):
    """A sandbox was used in a state that does not allow the operation (for example, after close)."""


class TreeTooLarge(RollboxError):
    """A sandbox tree being copied out held more files or bytes than allowed (the program's doing)."""
