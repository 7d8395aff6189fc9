"""rollbox.sandbox: isolated execution with kernel-enforced limits, and the status taxonomy.

The lowest layer of rollbox; it imports nothing else of rollbox.
"""

from ._changes import WorkspaceChanges
from ._config import SandboxConfig
from ._errors import IsolationUnavailable, RollboxError, SandboxError, SandboxStateError, TreeTooLarge
from ._limits import Limits, Network, parse_duration, parse_size
from ._process import InsecureBackendWarning
from ._result import ExecResult, Status, signal_name
from ._sandbox import Backend, Sandbox, run
from ._scratch import make_temporary_directory, scratch_directory, temporary_directory
from .namespaces._backend import reap_orphans
from .pool._batch import Program, run_batch
from .pool._openings import Openings
from .pool._pool import FreshSandboxes, PoolExhausted, SandboxPool, SandboxSource, WarmSandboxes
from .pool._resizable import ResizablePool

__all__ = [
    "Backend",
    "ExecResult",
    "FreshSandboxes",
    "InsecureBackendWarning",
    "IsolationUnavailable",
    "Limits",
    "Network",
    "Openings",
    "PoolExhausted",
    "Program",
    "ResizablePool",
    "RollboxError",
    "Sandbox",
    "SandboxConfig",
    "SandboxError",
    "SandboxPool",
    "SandboxSource",
    "SandboxStateError",
    "Status",
    "TreeTooLarge",
    "WarmSandboxes",
    "WorkspaceChanges",
    "make_temporary_directory",
    "parse_duration",
    "parse_size",
    "reap_orphans",
    "run",
    "run_batch",
    "scratch_directory",
    "signal_name",
    "temporary_directory",
]
