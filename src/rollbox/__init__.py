"""rollbox: execution feedback for reinforcement learning on code.

Isolated sandboxes, a judge whose rewards cannot be gamed, and everything between a policy and its optimizer.
"""

from .sandbox import (
    Backend,
    ExecResult,
    InsecureBackendWarning,
    IsolationUnavailable,
    Limits,
    Network,
    PoolExhausted,
    RollboxError,
    Sandbox,
    SandboxError,
    SandboxPool,
    SandboxStateError,
    Status,
    run,
)

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "ExecResult",
    "InsecureBackendWarning",
    "IsolationUnavailable",
    "Limits",
    "Network",
    "PoolExhausted",
    "RollboxError",
    "Sandbox",
    "SandboxError",
    "SandboxPool",
    "SandboxStateError",
    "Status",
    "__version__",
    "run",
]
