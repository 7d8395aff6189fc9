"""The result of one command run in a sandbox, and the status taxonomy shared by every layer of rollbox."""

from __future__ import annotations

import enum
import signal as signals
from dataclasses import dataclass
from typing import Any

__all__ = ["ExecResult", "Status", "signal_name"]


def signal_name(number: int) -> str:
    """A signal's name: ``SIGKILL``, ``SIGRTMIN+6`` for the real-time ones (``kill -l``'s names), ``signal 32`` for
    a number with none (glibc keeps 32 and 33 for itself). Any number a command can die of has an answer."""
    try:
        return signals.Signals(number).name
    except ValueError:
        if signals.SIGRTMIN < number <= signals.SIGRTMAX:
            return f"SIGRTMIN+{number - signals.SIGRTMIN}"
        return f"signal {number}"


class Status(str, enum.Enum):
    """How a command ended. Exactly one per result; when several limits were hit, the first one wins."""

    #: The command exited with code 0 and no limit was hit.
    OK = "ok"
    #: The command exited with a non-zero code (127: not found, 126: not executable).
    NONZERO_EXIT = "nonzero_exit"
    #: The command was killed by a signal that no limit sent (``signal`` says which).
    SIGNALED = "signaled"
    #: The wall-clock limit ran out; every process of the command was killed.
    TIMEOUT = "timeout"
    #: The CPU time limit ran out (summed over every process of the command).
    CPU_TIME_LIMIT = "cpu_time_limit"
    #: The memory limit was reached and the kernel's OOM killer fired (or, on cgroup v1, the command's socket
    #: buffers went past it, which the kernel allows, and the host killed the command).
    MEMORY_LIMIT = "memory_limit"
    #: stdout or stderr went past the output limit; the command was killed.
    OUTPUT_LIMIT = "output_limit"
    #: The process and thread limit was reached; the command was killed.
    PIDS_LIMIT = "pids_limit"
    #: The writable disk filled up, or a file went past the file size limit.
    DISK_LIMIT = "disk_limit"
    #: rollbox or the host failed (``error`` says how); the command's outcome is unknown, never its fault.
    INFRA_ERROR = "infra_error"


@dataclass(frozen=True, kw_only=True)
class ExecResult:
    """What happened when one command ran, with its own resource report."""

    status: Status
    #: The exit code, when the command exited (``None`` when it was killed by a signal or never ran).
    exit_code: int | None = None
    #: The signal number that ended the command, when one did.
    signal: int | None = None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    #: Wall-clock seconds from the start of the command to the death of its last process.
    wall_s: float = 0.0
    #: CPU seconds used by every process of the command (user + system).
    cpu_s: float = 0.0
    #: Peak memory of the command's processes, including the tmpfs pages they wrote.
    peak_memory_bytes: int | None = None
    #: For ``infra_error``: what failed and what to do about it.
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True when the command exited 0 and hit no limit."""
        return self.status is Status.OK

    @property
    def stdout_text(self) -> str:
        """stdout decoded as UTF-8, invalid bytes replaced."""
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        """stderr decoded as UTF-8, invalid bytes replaced."""
        return self.stderr.decode("utf-8", "replace")

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the ``rollbox exec --json`` contract."""
        return {
            "status": self.status.value,
            "exit_code": self.exit_code,
            "signal": self.signal,
            "stdout": self.stdout_text,
            "stderr": self.stderr_text,
            "stdout_truncated": self.stdout_truncated,
            "stderr_truncated": self.stderr_truncated,
            "wall_s": round(self.wall_s, 6),
            "cpu_s": round(self.cpu_s, 6),
            "peak_memory_bytes": self.peak_memory_bytes,
            "error": self.error,
        }

    @classmethod
    def infra_error(cls, message: str, *, wall_s: float = 0.0) -> ExecResult:
        """A result that says rollbox or the host failed, and how."""
        return cls(status=Status.INFRA_ERROR, error=message, wall_s=wall_s)
