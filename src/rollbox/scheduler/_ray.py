"""Workers on a Ray cluster: one actor per node owns that node's sandboxes and warm pools; the scheduler, in the
driver, places jobs on nodes by the resources Ray reports for each (CPU, memory, custom resources), and every
result and event comes back to its one job store.

Ray is an optional extra (``pip install 'rollbox[ray]'``): nothing else of rollbox imports it. Ray's token
authentication passes through as Ray reads it (``RAY_AUTH_MODE=token`` with ``RAY_AUTH_TOKEN``,
``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``); a cluster that cannot be reached, found or joined, or whose
nodes cannot run rollbox's actor, is a :class:`SchedulerError` that says what was tried and what to do.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

from ._episode_kind import API_KEY_VARIABLE
from ._errors import SchedulerError
from ._kinds import Outcome
from ._model import Job
from ._node import NodeActor, attempt_request, outcome_of
from ._placement import Capacity
from ._workers import Moved, WorkerLost

__all__ = ["RayWorker", "ray_workers"]

#: Resources Ray reports that are not for placing jobs.
_OWN = ("CPU", "memory", "object_store_memory", "GPU")
#: How long the head's port may take to accept a connection before the cluster is reported unreachable: where
#: nothing listens, ``ray.init`` retries for minutes, printing Ray's own warnings, and never says so.
_PROBE_S = 10.0


class RayWorker:
    """One node of a Ray cluster, as the scheduler sees it."""

    ahead = 0

    def __init__(self, name: str, capacity: Capacity, actor: Any) -> None:
        self.name, self.capacity, self.actor = name, capacity, actor
        self._alive = True

    async def start(self) -> None:
        import ray

        try:
            await self.actor.ready.remote()
        except ray.exceptions.RayError as exc:
            raise SchedulerError(
                f"Ray node {self.name} could not start rollbox's worker there ({_first_line(exc)}): every node needs "
                "this version of rollbox installed (pip install 'rollbox[ray]') and the rights to make sandboxes "
                "(rollbox doctor, on the node, says what is missing)"
            ) from None

    async def close(self) -> None:
        import ray

        ray.kill(self.actor, no_restart=True)

    async def run(self, job: Job, moved: Moved) -> Outcome:
        import ray

        try:
            reply: dict[str, Any] = await self.actor.run.remote(attempt_request(job))
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as exc:
            self._alive = False
            raise WorkerLost(f"Ray node {self.name} was lost: {type(exc).__name__}") from exc
        return outcome_of(reply, self.name, moved)

    def expect(self, queued: Mapping[str, int]) -> None:
        if self._alive:
            self.actor.expect.remote(dict(queued))

    def alive(self) -> bool:
        return self._alive


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else 'no message'}"[:400]


def _causes(exc: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def _unreachable(address: str, exc: Exception) -> str:
    """What to do about a cluster that ``ray.init`` could not connect to, in one line."""
    # Ray says so in a cause of its ConnectionError (an AuthenticationError, or its text in a RuntimeError's).
    if any(type(e).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(e) for e in _causes(exc)):
        return (
            f"the Ray cluster at {address} uses token authentication and refused this process (its token is "
            "missing or not the cluster's): give it the cluster's token, as every node of the cluster has it: "
            "RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token)"
        )
    if address == "auto" and not os.environ.get("RAY_ADDRESS"):
        return (
            "no Ray cluster found for --ray auto (looked for $RAY_ADDRESS, the cluster 'ray start' last started on "
            "this machine, and Ray processes running here): start one ('ray start --head' here, 'ray start "
            "--address HEAD:6379' on each node) or give its address: --ray HOST:PORT"
        )
    where = address if address != "auto" else f"$RAY_ADDRESS ({os.environ['RAY_ADDRESS']})"
    return (
        f"cannot connect to the Ray cluster at {where} ({_first_line(exc)}): check that it runs ('ray status "
        "--address HOST:PORT' on its head) and that this machine reaches its port"
    )


def _head(address: str) -> tuple[str, str] | None:
    """The head's ``HOST:PORT`` that ``ray.init(address)`` connects to, and where that came from; ``None`` for a Ray
    Client address (``ray://``), whose own connect gives up in time.

    Raises:
        ConnectionError: ``auto`` finds no cluster at all (Ray's own search).
    """
    from ray._private.services import get_ray_address_from_environment

    found: str = get_ray_address_from_environment(address, None)  # $RAY_ADDRESS first, as ray.init reads it
    if found.startswith("ray://"):
        return None
    if os.environ.get("RAY_ADDRESS"):
        return found, "from $RAY_ADDRESS"
    if address != "auto":
        return found, "from --ray"
    return found, "the cluster 'ray start' last started on this machine, or one whose processes run here"


def _not_answering(head: str) -> str | None:
    """Why nothing accepts a connection at ``head`` (``HOST:PORT``), or ``None`` when something does."""
    host, _, port = head.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=_PROBE_S):
            return None
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _check_head(address: str) -> None:
    """Refuse at once, in one line, a cluster whose head does not answer (``ray.init`` would wait for minutes).

    Raises:
        SchedulerError: nothing accepts a connection at the head's address.
        ConnectionError: ``auto`` finds no cluster at all.
    """
    found = _head(address)
    if found is None:
        return
    head, origin = found
    if (why := _not_answering(head)) is not None:
        raise SchedulerError(
            f"no Ray cluster answers at {head} ({origin}; {why}): start it ('ray start --head' on the head, 'ray "
            "start --address HEAD:6379' on each node) or give the address of one that runs: --ray HOST:PORT (a "
            "cluster stopped without 'ray stop' leaves its address behind, as does a stale $RAY_ADDRESS)"
        )


def ray_workers(address: str, *, grace_s: float = 30.0) -> list[RayWorker]:
    """Connect to the Ray cluster at ``address`` (``auto``: the one this machine belongs to) and start an actor on
    every node that offers CPUs; each becomes a worker whose capacity is what Ray reports for its node.

    Raises:
        SchedulerError: Ray is not installed, the cluster cannot be found or connected to (its token
            authentication refused this process, say), or it has no node with CPUs.
    """
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    except ImportError:
        raise SchedulerError("running on Ray needs the ray extra: pip install 'rollbox[ray]'") from None
    if not ray.is_initialized():
        try:
            _check_head(address)
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        except SchedulerError:
            raise
        except Exception as exc:  # Ray's own: ConnectionError, AuthenticationError, RuntimeError, ValueError
            raise SchedulerError(_unreachable(address, exc)) from None
    actor_class = ray.remote(NodeActor)
    # An openai: policy's key travels to the actors in their environment, never in a job's payload.
    key = os.environ.get(API_KEY_VARIABLE)
    options: dict[str, Any] = {"runtime_env": {"env_vars": {API_KEY_VARIABLE: key}}} if key else {}
    workers = []
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        resources = node["Resources"]
        if not node["Alive"] or resources.get("CPU", 0) <= 0:
            continue
        capacity = Capacity(
            cpus=float(resources["CPU"]),
            memory_bytes=int(resources.get("memory", 0)),
            resources={k: float(v) for k, v in resources.items() if k not in _OWN and not k.startswith("node:")},
        )
        actor = actor_class.options(
            num_cpus=0,
            max_concurrency=10_000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            **options,
        ).remote(2 * max(1, int(capacity.cpus)), grace_s)
        workers.append(RayWorker(f"ray:{node['NodeID'][:12]}", capacity, actor))
    if not workers:
        raise SchedulerError(f"the Ray cluster at {address} has no live node with CPUs to run jobs on")
    return workers
