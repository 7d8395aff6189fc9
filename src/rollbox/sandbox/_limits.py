"""Limits: what a sandboxed command may use, and the parsers for human-friendly sizes and durations."""

from __future__ import annotations

import enum
import math
import numbers
import operator
import re
from dataclasses import dataclass, fields

__all__ = ["Limits", "Network", "parse_duration", "parse_size"]

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$", re.IGNORECASE)


def _shown(text: str) -> str:
    """``text`` for an error message: digits enough to overflow a float are not worth printing all."""
    return repr(text) if len(text) <= 40 else f"{text[:16]!r}...({len(text)} characters)"


def parse_size(text: str | int) -> int:
    """Parse ``"256M"``, ``"1.5G"``, ``"64k"``, ``"4096"`` (bytes) into a byte count; suffixes are binary.

    Raises:
        ValueError: the text is not a size; the message shows it and the accepted forms.
    """
    if isinstance(text, int | float) and not isinstance(text, bool) and float(text).is_integer():
        return int(text)
    match = _SIZE.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(
            f"invalid size {text!r}: expected a whole number of bytes, or a string with an optional K, M, G or T "
            "suffix ('1.5G')"
        )
    size = float(match.group(1)) * {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1024 * GiB}[match.group(2).lower()]
    if not math.isfinite(size):
        raise ValueError(f"invalid size {_shown(match.string)}: too large; give a size such as '2G'")
    return int(size)


def parse_duration(text: str | float) -> float:
    """Parse ``"10"``, ``"2.5s"``, ``"500ms"``, ``"1m"`` into seconds.

    Raises:
        ValueError: the text is not a duration; the message shows it and the accepted forms.
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    match = _DURATION.match(text) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"invalid duration {text!r}: expected seconds, optionally with ms, s, m or h")
    seconds = float(match.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[(match.group(2) or "s").lower()]
    if not math.isfinite(seconds):
        raise ValueError(f"invalid duration {_shown(match.string)}: too large; give one such as '10s'")
    return seconds


class Network(str, enum.Enum):
    """What network a sandbox has. Neither choice ever reaches the host's network."""

    #: No network at all: only unix and netlink sockets (the latter see only the sandbox's own, empty, network
    #: namespace) can be created.
    NONE = "none"
    #: A loopback interface of the sandbox's own (127.0.0.1 and ::1 inside are not the host's).
    LOOPBACK = "loopback"


#: The limits counted in seconds; every other one is a whole number (of bytes, processes or descriptors).
_SECONDS = frozenset({"timeout_s", "cpu_time_s"})
#: Beyond any machine, and within the 64-bit fields the agent takes limits in.
_MOST = 2**62


@dataclass(frozen=True, kw_only=True)
class Limits:
    """Resource limits for every command run in a sandbox. The kernel enforces each one.

    Each limit, when hit, ends the command with the status named in its description; when several are hit,
    the first one wins.
    """

    #: Wall-clock seconds a command may run; then every process of it is killed (status ``timeout``).
    timeout_s: float = 10.0
    #: CPU seconds, summed over all processes and threads of a command (status ``cpu_time_limit``).
    cpu_time_s: float = 5.0
    #: Memory including swap and tmpfs pages the command wrote; the kernel's OOM killer fires at the limit
    #: (status ``memory_limit``).
    memory_bytes: int = 512 * MiB
    #: Processes plus threads alive at once; the first fork or thread beyond it fails, and the command is
    #: killed (status ``pids_limit``).
    pids: int = 64
    #: Bytes kept of each of stdout and stderr; the command is killed when either stream goes past it
    #: (status ``output_limit``, with the stream marked truncated).
    output_bytes: int = 1 * MiB
    #: Bytes writable in /workspace, /tmp and /dev/shm together; writes beyond it fail with ENOSPC
    #: (status ``disk_limit``).
    disk_bytes: int = 256 * MiB
    #: Open file descriptors per process; beyond it ``open`` fails with EMFILE (the program's own error).
    open_files: int = 1024
    #: Largest file a process may write; beyond it the write raises SIGXFSZ (status ``disk_limit``).
    #: ``None`` means the disk limit.
    file_size_bytes: int | None = None

    def __post_init__(self) -> None:
        for field in fields(self):
            name, value = field.name, getattr(self, field.name)
            if value is None:
                if name == "file_size_bytes":  # the one limit that may be unset (then the disk limit applies)
                    continue
                raise ValueError(f"Limits.{name} must be a finite number, got None (leave it out for its default)")
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise ValueError(f"Limits.{name} must be a finite number, got {value!r}")
            # An int (or a numpy integer) exactly; anything else as a float.
            number = operator.index(value) if isinstance(value, numbers.Integral) else float(value)
            if isinstance(number, float) and not math.isfinite(number):
                raise ValueError(f"Limits.{name} must be a finite number, got {value!r}")
            if number <= 0:
                raise ValueError(f"Limits.{name} must be positive, got {value!r}")
            if number > _MOST:
                raise ValueError(f"Limits.{name} must be at most 2**62, got {value!r}")
            if name in _SECONDS:
                number = float(number)
            elif isinstance(number, float):
                if not number.is_integer():
                    raise ValueError(f"Limits.{name} must be a whole number, got {value!r}")
                number = int(number)  # 1e9: a plain int, as the kernel takes it
            object.__setattr__(self, name, number)
        if self.pids < 2:
            raise ValueError(f"Limits.pids must be at least 2 (the command and one child), got {self.pids}")
        if self.memory_bytes < 8 * MiB:
            raise ValueError(f"Limits.memory_bytes must be at least 8 MiB, got {self.memory_bytes}")

    @property
    def effective_file_size_bytes(self) -> int:
        """The file size limit in force: ``file_size_bytes``, or the disk limit when unset."""
        return self.file_size_bytes if self.file_size_bytes is not None else self.disk_bytes
