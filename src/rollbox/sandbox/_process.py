"""The ``process`` backend: the same agent, run directly, with rlimits only. Not a security boundary.

It exists for machines without user namespaces or cgroups (and for comparison in benchmarks). The program
runs as the calling user, sees the whole host, can reach the network, and is limited only in wall time, CPU
time per process, open files, file size and output. rollbox warns every time it is used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import warnings
from pathlib import Path

from ._errors import SandboxError
from ._limits import Limits
from ._scratch import make_temporary_directory, remove_tree
from .agent._build import agent_binary
from .agent._protocol import AgentConnection, ExecGroup, Exited, Usage
from .agent._spawner import Spawner

__all__ = ["InsecureBackendWarning", "ProcessSandbox"]


class InsecureBackendWarning(UserWarning):
    """Emitted every time the ``process`` backend starts: it is not a security boundary."""


class _ProcessGroupExecGroup:
    """A command's processes as the session its first process starts (daemons that leave it escape)."""

    cpu_watched = False

    def __init__(self) -> None:
        self.pid: int | None = None

    def adopt(self, pid: int) -> None:
        self.pid = pid

    def kill(self) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)

    async def ended(self) -> None:
        self.kill()  # what left the session is out of reach: this backend is no boundary

    def cpu_s(self) -> float:
        return 0.0  # RLIMIT_CPU, per process, is all this backend has

    def pids_limit_hits(self) -> int:
        return 0

    def memory_limit_exceeded(self) -> bool:
        return False

    def usage(self, exited: Exited | None) -> Usage:
        if exited is None:
            return Usage(0.0, None)
        return Usage(exited.cpu_s, exited.max_rss_bytes)


class ProcessSandbox:
    """A temporary directory and an agent running as the calling user."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.uid = os.getuid()
        self._root: Path | None = None
        self._agent: AgentConnection | None = None

    @property
    def writable_root(self) -> Path:
        """The host directory holding workspace/ and tmp/."""
        assert self._root is not None
        return self._root

    async def start(self) -> None:
        """Make the directories and start the agent."""
        warnings.warn(
            "rollbox's 'process' backend is NOT a security boundary: the program runs as you, sees your files "
            "and network, and only time, CPU, open files, file size and output are limited. Use the default "
            "'namespaces' backend for untrusted code.",
            InsecureBackendWarning,
            stacklevel=3,
        )
        self._root = self._make_root()
        try:
            await self._start_agent()
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _make_root() -> Path:
        root = make_temporary_directory("rollbox-process-")
        for name in ("workspace", "tmp"):
            (root / name).mkdir()
        return root

    async def _start_agent(self) -> None:
        assert self._root is not None
        host_end, agent_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            argv = [str(agent_binary()), "serve", "3"]
            process = await Spawner.get().spawn(argv, pass_fds=[agent_end.fileno()], cwd=str(self._root))
        except BaseException as exc:
            host_end.close()
            if isinstance(exc, SandboxError):
                raise SandboxError(f"cannot start rollbox's agent: {exc}") from exc
            raise  # cancelled: the spawner has ended what it started
        finally:
            agent_end.close()
        self._agent = AgentConnection(host_end, process)
        await self._agent.wait_ready()

    async def reset(self, *, fresh: bool = False) -> bool:
        """New, empty directories for the next user (no more: this backend is not a boundary, and has no
        namespaces to renew: it says it did all it can)."""
        assert self._root is not None
        old, self._root = self._root, self._make_root()
        remove_tree(old)
        return True

    def disk_full(self) -> bool:
        """This backend has no disk limit of its own."""
        return False

    async def exec_group(self, finished: ExecGroup | None = None) -> ExecGroup:
        """A process group for the next command (restarting the agent if it died)."""
        if self._agent is None or not self._agent.alive:
            if self._agent is not None:
                self._agent.close()
            await self._start_agent()
        return _ProcessGroupExecGroup()

    @property
    def agent(self) -> AgentConnection:
        """The running agent."""
        assert self._agent is not None
        return self._agent

    @property
    def agent_alive(self) -> bool:
        """Whether the agent is running and answering."""
        return self._agent is not None and self._agent.alive

    @property
    def zygote_alive(self) -> bool:
        """There is no zygote: as alive as the agent."""
        return self._agent is not None and self._agent.alive

    async def zygote(self) -> AgentConnection:
        """No zygote here: ``warm_python`` commands start Python as usual."""
        return self.agent

    def finish_exec(self, group: ExecGroup) -> None:
        """Nothing to remove: the process group is gone with its processes."""

    def close(self) -> None:
        """Stop the agent and delete the directories (idempotent)."""
        if self._agent is not None:
            self._agent.close()
            self._agent = None
        if self._root is not None:
            remove_tree(self._root)
            self._root = None
