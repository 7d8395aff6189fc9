"""rollbox: execution feedback for reinforcement learning on code.

Isolated sandboxes, a judge whose rewards cannot be gamed, and everything between a policy and its optimizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
    SandboxConfig,
    SandboxError,
    SandboxPool,
    SandboxStateError,
    Status,
    run,
)

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .client import Client
    from .env import Episode


def make(task: Any, **options: Any) -> Episode:
    """An agent episode of ``task`` (a task directory or a loaded task): see :func:`rollbox.env.make`.

    rollbox.env (and the judge it uses) is imported on the first call, so that ``import rollbox`` stays light.
    """
    from .env import make as make_episode

    return make_episode(task, **options)


def __getattr__(name: str) -> Any:
    # The client (and httpx) is imported on first use too.
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
    "SandboxConfig",
    "SandboxError",
    "SandboxPool",
    "SandboxStateError",
    "Status",
    "__version__",
    "make",
    "run",
]
