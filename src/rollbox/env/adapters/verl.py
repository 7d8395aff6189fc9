"""verl: a custom reward function and agent-loop tools backed by rollbox sandboxes (``pip install 'rollbox[verl]'``).

Reward function (``custom_reward_function.path`` = this file's path, ``.name`` = ``compute_score``): grades a
single-turn response with the judge, on the task directory in ``ground_truth`` (or ``extra_info["task"]``); after
an agent loop with :class:`RollboxTool`, returns the episode's verdict (the tools record it in the trajectory's
extra fields, which verl passes on in ``extra_info``).

Agent-loop tools: :func:`tool_config` writes the ``tools:`` list of a verl tool-config YAML, one entry per rollbox
tool, all of class :class:`RollboxTool`. The episode of a trajectory lives as long as it: made at its first tool
call (from ``tools_kwargs[TOOL]["create_kwargs"]["task"]`` of the dataset row), judged at ``submit`` (or, without
one, by ``compute_score`` in the same process), its sandbox released then. Episodes run on rollbox's own event loop
thread, so that the reward function, called from another thread, can still judge one.

verl needs a number: an infrastructure failure gives score 0.0 with ``rollbox_masked`` true in the reward's extra
info; drop such samples.
"""

from __future__ import annotations

from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollbox.env import TOOLS, Episode, make
from rollbox.env._sync import blocking, on_rollbox_loop
from rollbox.judge import Verdict

from ._common import grade_completion, task_of

__all__ = ["RollboxTool", "compute_score", "tool_config"]

#: Open episodes by verl request id (one per trajectory), in this process.
_episodes: dict[str, Episode] = {}


def _score(verdict: Verdict) -> dict[str, Any]:
    return {
        "score": verdict.reward if verdict.reward is not None else 0.0,
        "rollbox_status": verdict.status.value,
        "rollbox_masked": verdict.reward is None,
    }


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """verl's custom reward function: a score with rollbox's status beside it."""
    extra = extra_info or {}
    if "rollbox_status" in extra:  # an agent loop's episode, judged at its submit
        masked = bool(extra.get("rollbox_masked"))
        return {
            "score": float(extra.get("rollbox_reward") or 0.0),
            "rollbox_status": extra["rollbox_status"],
            "rollbox_masked": masked,
        }
    episode = _episodes.pop(str(extra.get("rollbox_episode")), None)
    if episode is not None:  # an agent loop that ended without a submit: judged as it stands
        return _score(blocking(_judge(episode)))
    task = task_of(extra if any(k in extra for k in ("task", "rollbox_task")) else ground_truth)
    return _score(blocking(grade_completion(task, solution_str)))


async def _judge(episode: Episode) -> Verdict:
    try:
        return await episode.end()
    finally:
        await episode.close()


def tool_config() -> dict[str, Any]:
    """A verl tool configuration (dump it as YAML) naming every rollbox tool, each a :class:`RollboxTool`."""
    return {
        "tools": [
            {"class_name": f"{__name__}.RollboxTool", "config": {"type": "native"}, "tool_schema": schema}
            for schema in TOOLS
        ]
    }


class RollboxTool(BaseTool):  # type: ignore[misc,unused-ignore]
    """One rollbox tool for verl's tool agent loop; every tool of a trajectory acts in the same episode."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        self._created: dict[str, dict[str, Any]] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Remember the row's ``create_kwargs`` (``task``) for this call."""
        instance_id, response = await super().create(instance_id)
        self._created[instance_id] = dict(kwargs.get("create_kwargs") or {})
        return instance_id, response

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Run this tool in the trajectory's episode (made at its first call); the reward is the verdict's at
        the end, 0.0 before."""
        agent_data = kwargs["agent_data"]
        key = str(agent_data.request_id)
        episode = _episodes.get(key)
        if episode is None:
            found = self._created.get(instance_id, {}).get("task") or next(
                (
                    v.get("create_kwargs", {}).get("task")
                    for v in agent_data.tools_kwargs.values()
                    if isinstance(v, dict)
                ),
                None,
            )
            episode = make(task_of(found), policy="verl")
            await on_rollbox_loop(episode.reset())
            _episodes[key] = episode
            agent_data.extra_fields["rollbox_episode"] = key
        if episode.state.value != "running":
            return ToolResponse(text="The episode has ended; no more tool calls are taken."), 0.0, {}
        observation, reward, done, info = await on_rollbox_loop(
            episode.step({"name": self.name, "arguments": parameters})
        )
        if done:
            _episodes.pop(key, None)
            await on_rollbox_loop(episode.close())
            assert info.verdict is not None
            agent_data.extra_fields.update(
                rollbox_reward=reward, rollbox_status=info.verdict.status.value, rollbox_masked=reward is None
            )
        return ToolResponse(text=observation.text), reward or 0.0, {"turn": info.turn, "error": observation.error}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget this call's ``create_kwargs``; the episode lives on until its end."""
        self._created.pop(instance_id, None)
