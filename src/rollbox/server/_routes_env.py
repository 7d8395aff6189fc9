"""Episodes over HTTP (``rollbox.env``'s reset and step) for trainers whose rollouts run elsewhere: an episode
lives on the service across requests, one tenant's, closed when idle like a sandbox.

Whatever a step's ``action`` holds is the model's turn (an error observation, a counted turn), never a 4xx or a
5xx: even valid JSON that Python's parser cannot hold (nested thousands deep, a number of thousands of digits).
Only a body that is not a JSON object ``{"action": ...}`` at all is the caller's error (422). Steps of one
episode that arrive together are taken one at a time, in order; one that finds the episode ended meanwhile is
409.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from rollbox import telemetry
from rollbox.env import Episode, EpisodeStateError, make
from rollbox.sandbox import RollboxError

from ._app import current_tenant, idempotent, service_of
from ._guard import Refused
from ._models import CreateEpisode, StepRequest
from ._peers import new_id
from ._registry import Entry
from ._tenants import Tenant

__all__ = ["router"]

router = APIRouter(tags=["episodes"])
TenantDep = Annotated[Tenant, Depends(current_tenant)]


def _summary(entry: Entry[Episode]) -> dict[str, Any]:
    episode = entry.thing
    return {
        "id": entry.id,
        "task": episode.task.id,
        "state": episode.state.value,
        "turns": episode.turns,
        "created_at": entry.created_at,
        "last_used_at": entry.last_used_at,
    }


@router.post("/v1/episodes", status_code=201)
async def create_episode(body: CreateEpisode, request: Request, tenant: TenantDep) -> Response:
    """Make an episode of a served task and reset it: its first observation, the tools (OpenAI function schemas)
    and the visible tests."""
    service = service_of(request)
    if body.command_timeout_s is not None and body.command_timeout_s > service.config.max_timeout_s:
        raise Refused(400, f"command_timeout_s={body.command_timeout_s:g} is above this server's maximum")
    task = await service.grader.task(body.task)
    budget = {
        name: getattr(body, name)
        for name in ("max_turns", "wall_s", "command_timeout_s", "output_bytes", "observation_bytes")
        if getattr(body, name) is not None
    }
    run = body.run or service.config.run

    async def call() -> tuple[int, Any]:
        async with service.episodes.opening(tenant):
            episode_id = new_id("ep", service.owner)
            try:
                episode = make(
                    task,
                    judge_sandboxes=service.grader.sandboxes,
                    shaped_rewards=body.shaped_rewards,
                    episode_id=episode_id,
                    policy=f"remote:{tenant.name}",
                    **budget,
                )
            except ValueError as exc:
                raise Refused(400, str(exc)) from None
            async with service.guard.executing(tenant):
                with telemetry.bound(tenant=tenant.name, run=run):
                    try:
                        observation = await episode.reset()
                    except (RollboxError, OSError) as exc:
                        message = f"rollbox or the host failed to start the episode: {exc}"
                        raise Refused(503, message, retry_after_s=1.0) from None
            entry = service.episodes.add(tenant.name, episode_id, episode, run=run)
        created = {
            **_summary(entry),
            "observation": observation.to_json(),
            "tools": episode.tools,
            "visible_tests": episode.visible_tests,
        }
        return 201, created

    return await idempotent(request, tenant, call)


def _action(body: bytes) -> Any:
    """The action a step's body carries.

    Read here rather than by FastAPI, which answers 400 to valid JSON its parser cannot hold: such a body carries
    the model's own tool call (arguments nested thousands deep, a number of thousands of digits), so its text is
    the action, which the episode answers with an error observation like any malformed one.

    Raises:
        Refused: 422, the body is not UTF-8 JSON, or not an object whose one key is ``action``.
    """
    usage = 'send {"action": TOOL_CALL}, the tool call as {"name": ..., "arguments": {...}}'
    try:
        data = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Refused(422, f"the body is not UTF-8 text ({exc.reason} at byte {exc.start}): {usage}") from None
    except json.JSONDecodeError as exc:
        raise Refused(422, f"the body is not JSON ({exc}): {usage}") from None
    except (RecursionError, ValueError):  # valid JSON beyond the parser: the model's turn
        return body.decode("utf-8")
    if not isinstance(data, dict) or "action" not in data or len(data) != 1:
        keys = sorted(data)[:5] if isinstance(data, dict) else type(data).__name__
        raise Refused(422, f"the body must be an object with the one key 'action', got {keys}: {usage}")
    return data["action"]


_STEP_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": StepRequest.model_json_schema()}},
    }
}


@router.post("/v1/episodes/{episode_id}/step", openapi_extra=_STEP_BODY)
async def step(episode_id: str, request: Request, tenant: TenantDep) -> Response:
    """Take one tool call (the body: ``{"action": TOOL_CALL}``): the observation, the reward (the verdict's on the
    last step; ``null`` for an infra error: mask it), whether the episode is done, and the step's info (``verdict``
    on the last step). Whatever the action holds is the model's turn. Steps of one episode are taken one at a
    time: a step sent while another runs waits for it. A retry with the same ``Idempotency-Key`` gets the first
    answer: the step is taken once."""
    service = service_of(request)
    action = _action(await request.body())

    async def call() -> tuple[int, Any]:
        async with service.guard.executing(tenant), service.episodes.use(tenant, episode_id) as entry:
            with telemetry.bound(tenant=tenant.name, run=entry.run or service.config.run):
                try:
                    result = await entry.thing.step(action)
                except EpisodeStateError as exc:
                    raise Refused(409, str(exc)) from None
        stepped = {
            "observation": result.observation.to_json(),
            "reward": result.reward,
            "done": result.done,
            "info": result.info.to_json(),
        }
        return 200, stepped

    return await idempotent(request, tenant, call)


@router.get("/v1/episodes")
async def list_episodes(request: Request, tenant: TenantDep) -> list[dict[str, Any]]:
    """The caller's open episodes."""
    return [_summary(e) for e in service_of(request).episodes.list(tenant)]


@router.get("/v1/episodes/{episode_id}")
async def get_episode(episode_id: str, request: Request, tenant: TenantDep) -> dict[str, Any]:
    """One of the caller's episodes."""
    return _summary(service_of(request).episodes.get(tenant, episode_id))


@router.get("/v1/episodes/{episode_id}/trajectory")
async def trajectory(episode_id: str, request: Request, tenant: TenantDep) -> dict[str, Any]:
    """The episode's trajectory so far (every turn; the verdict once it has ended), as the library records it but
    for ``task_path``: the task's directory on the server's host is no caller's business (``task_id`` names it)."""
    trajectory: dict[str, Any] = service_of(request).episodes.get(tenant, episode_id).thing.trajectory.to_json()
    del trajectory["task_path"]
    return trajectory


@router.delete("/v1/episodes/{episode_id}", status_code=204)
async def close_episode(episode_id: str, request: Request, tenant: TenantDep) -> Response:
    """Close an episode and its sandbox (one closed before its end is not judged)."""
    await service_of(request).episodes.close(tenant, episode_id)
    return Response(status_code=204)
