"""rollbox: execution feedback for reinforcement learning on code.

Isolated sandboxes, a judge whose rewards cannot be gamed, and everything between a policy and its optimizer.
"""

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from .client import Client

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The client needs httpx (the ``client`` extra): imported on first use, so that ``import rollbox`` never does.
    if name == "Client":
        from .client import Client

        return Client
    raise AttributeError(f"module 'rollbox' has no attribute {name!r}")


__all__ = [
    "Backend",
    "Client",
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
