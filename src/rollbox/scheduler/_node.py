"""The far side of a worker that runs its attempts in another process (a Ray node's actor, a local worker
process): :class:`NodeActor` runs one attempt in its own warm pools and sends back the outcome with the events the
attempt emitted; :func:`attempt_request` and :func:`outcome_of` are the two ends of that exchange on the
scheduler's side.
"""

from __future__ import annotations

import os
import time
from typing import Any

from rollbox import telemetry

from ._errors import PayloadError
from ._kinds import JobContext, Outcome, failed_attempt, get_kind, kind_target, own_cancellation, register_kind
from ._model import Job
from ._pools import ElasticSandboxes
from ._states import JobState
from ._workers import Moved

__all__ = ["NodeActor", "attempt_request", "outcome_of"]


class _Buffer:
    """Keeps a job's events on its node, to travel back with its outcome."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def write(self, event: telemetry.Event) -> None:
        self.events.append(event.to_json())


def attempt_request(job: Job) -> dict[str, Any]:
    """What a node needs to run one attempt of ``job`` (plain values, for any transport)."""
    return {
        "id": job.id,
        "attempt": job.attempts,
        "run_id": job.run_id,
        "kind": job.kind,
        # A kind registered in the driver (rollbox.train's rollout) is registered on the node from its name.
        "target": kind_target(job.kind),
        "payload": job.payload,
    }


class NodeActor:
    """Lives on one node (pinned there): runs the jobs placed on that node in its own elastic warm pools."""

    def __init__(self, max_pool: int, grace_s: float) -> None:
        # As a LocalWorker's pools: a sandbox starts its Python zygote once a job asks for one (a zygote costs more
        # than the programs of most jobs that never use it).
        self.sandboxes = ElasticSandboxes(max_size=max_pool, grace_s=grace_s, warm_python=False)
        self.started = False

    async def ready(self) -> int:
        """Open the pools; returns the actor's pid."""
        if not self.started:
            await self.sandboxes.__aenter__()
            self.started = True
        return os.getpid()

    async def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Run one attempt; returns the outcome with the events it emitted and when grading began."""
        buffer, graded = _Buffer(), []
        context = JobContext(
            job_id=job["id"],
            attempt=job["attempt"],
            run_id=job["run_id"],
            sandboxes=self.sandboxes,
            grading=lambda: graded.append(time.time()),
        )
        with telemetry.recording(buffer):
            try:
                if job.get("target") and kind_target(job["kind"]) != job["target"]:
                    register_kind(job["kind"], job["target"])
                outcome = await get_kind(job["kind"]).run(job["payload"], context)
            except PayloadError as exc:
                return {"payload_error": str(exc), "events": buffer.events}
            except BaseException as exc:  # rollbox's failure on this node, SystemExit included: the actor lives on
                if own_cancellation(exc):
                    raise
                outcome = failed_attempt(exc)
        return {
            "status": outcome.status,
            "reward": outcome.reward,
            "output": outcome.output,
            "error": outcome.error,
            "trajectory": outcome.trajectory,
            "events": buffer.events,
            "graded_at": graded[0] if graded else None,
            "pid": os.getpid(),
        }

    def expect(self, queued: dict[str, int]) -> None:
        """The driver's word on queued jobs per warm pool."""
        self.sandboxes.expect(queued)


def outcome_of(reply: dict[str, Any], node: str, moved: Moved) -> Outcome:
    """The outcome of an attempt that :meth:`NodeActor.run` ran on ``node``: its events emitted here (each with
    its node), its move to grading reported.

    Raises:
        PayloadError: the node could not run the job's payload.
    """
    for event in reply.pop("events"):
        fields = {k: v for k, v in event.items() if k not in ("kind", "at")}
        telemetry.emit(event["kind"], node=node, emitted_at=event["at"], **fields)
    if "payload_error" in reply:
        raise PayloadError(reply["payload_error"])
    if reply["graded_at"] is not None:
        moved(JobState.GRADING, reply["graded_at"])
    return Outcome(
        status=reply["status"],
        reward=reply["reward"],
        output={**reply["output"], "node": node},
        error=reply["error"],
        trajectory=reply["trajectory"],
    )
