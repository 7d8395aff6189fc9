"""verl's reward function, agent loop and tools over rollbox (the public face is :mod:`rollbox.env.adapters.verl`).

Single turn: :func:`compute_score` grades a response with the judge, on the task directory in ``ground_truth``
(or ``extra_info["task"]``), placed as :func:`rollbox.env.adapters._common.completion_files` says.

Multi-turn: :class:`RollboxAgentLoop` (registered as verl agent loop ``rollbox_agent``) is verl's
``ToolAgentLoop`` with a rollbox episode spanning each rollout, and :class:`RollboxTool` (one per rollbox tool,
:func:`tool_config`) runs the model's tool calls in it. The episode is made at the rollout's first tool call (from
``tools_kwargs[TOOL]["create_kwargs"]["task"]`` of the dataset row, or ``extra_info["task"]``); when the rollout
ends, however it ends (``submit``, verl's turn or length limits, a reply without a tool call), the loop judges the
workspace the agent left, in the process that holds its sandbox, releases the sandbox, and puts the verdict in the
rollout's extra fields, and its score (the verdict's reward) as the output's ``reward_score``, which verl takes as
is: no reward manager reads the verdict back from a row's extra info, which the samples of one prompt share. (A
reward function of verl's older path, given the extra fields, has :func:`compute_score` return the verdict.) A
rollout that failed (an exception in verl) releases its sandbox unjudged.

verl needs a number: an infrastructure failure scores 0.0 with ``rollbox_masked`` true (and ``rollbox_status``
``infra_error``) in the reward's extra info; drop such samples.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.tool_agent_loop import AgentData, AgentState, ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from rollbox.env import TOOLS, Episode, make
from rollbox.env._sync import blocking, on_rollbox_loop
from rollbox.env.adapters._common import grade_completion, task_of
from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.tasks import Task

__all__ = ["RollboxAgentLoop", "RollboxTool", "agent_loop_config", "compute_score", "tool_config"]

logger = logging.getLogger(__name__)

#: The agent loop's name in verl's registry (``actor_rollout_ref.rollout.agent.default_agent_loop``).
AGENT_LOOP = "rollbox_agent"
#: Where a rollout's state hangs on verl's ``AgentData`` (never in its extra fields, which verl ships elsewhere).
_ROLLOUT = "_rollbox_rollout"
_UNDER_OTHER_LOOP = (
    "RollboxTool runs only under rollbox's agent loop, which judges and releases each rollout's sandbox when the "
    f"rollout ends: set actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_LOOP} (or the rows' agent_name)"
)


def _score(status: str, reward: float | None) -> dict[str, Any]:
    """The reward function's result: always these keys (verl stacks each key over the batch)."""
    return {"score": reward if reward is not None else 0.0, "rollbox_status": status, "rollbox_masked": reward is None}


def compute_score(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None, **kwargs: Any
) -> dict[str, Any]:
    """verl's custom reward function: a score with rollbox's status beside it.

    After :class:`RollboxAgentLoop`: the verdict it recorded. Otherwise the response graded as a single completion.

    Raises:
        ValueError: the row names no task, or the response cannot be placed in its workspace.
    """
    extra = extra_info or {}
    if "rollbox_status" in extra:  # a rollout of the agent loop, judged when it ended
        return _score(str(extra["rollbox_status"]), extra.get("rollbox_reward"))
    if extra.get("rollbox_error"):  # a rollbox tool ran where its episode could not be judged: mask it
        logger.error("rollbox: a rollout is masked: %s", extra["rollbox_error"])
        return _score(VerdictStatus.INFRA_ERROR.value, None)
    task = task_of(extra if any(k in extra for k in ("task", "rollbox_task")) else ground_truth)
    verdict = blocking(grade_completion(task, solution_str))
    return _score(verdict.status.value, verdict.reward)


def tool_config() -> dict[str, Any]:
    """A verl tool configuration (dump it as YAML) naming every rollbox tool, each a :class:`RollboxTool`."""
    return {
        "tools": [
            {"class_name": "rollbox.env.adapters.verl.RollboxTool", "config": {"type": "native"}, "tool_schema": s}
            for s in TOOLS
        ]
    }


def agent_loop_config() -> list[dict[str, str]]:
    """A verl agent-loop configuration (``agent_loop_config_path``; dump it as YAML) naming
    :class:`RollboxAgentLoop` ``rollbox_agent``. Importing this module registers it too."""
    return [{"name": AGENT_LOOP, "_target_": "rollbox.env.adapters.verl.RollboxAgentLoop"}]


@dataclass
class _Rollout:
    """One rollout's episode: made at its first tool call, judged and released when the rollout ends."""

    task: Task | None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one tool call at a time in one episode
    episode: Episode | None = None


def _task_of_row(tools_kwargs: Any, extra_info: Any) -> Task | None:
    for value in (tools_kwargs or {}).values():
        if isinstance(value, dict) and (value.get("create_kwargs") or {}).get("task"):
            return task_of(value["create_kwargs"]["task"])
    if isinstance(extra_info, dict) and extra_info.get("task"):
        return task_of(extra_info["task"])
    return None


async def _verdict(rollout: _Rollout) -> tuple[Verdict, str]:
    """The judge's verdict on what the agent left, and how the episode ended; the sandbox released either way."""
    assert rollout.task is not None
    if rollout.episode is None:  # no tool call: the agent left the task's workspace as it was
        return await grade(rollout.task, {}), "no_tool_call"
    episode = rollout.episode
    try:
        verdict = await episode.end()
        return verdict, episode.trajectory.end_reason or "stopped"
    finally:
        await episode.close()


async def _conclude(rollout: _Rollout | None) -> dict[str, Any]:
    """The extra fields that carry a rollout's verdict to :func:`compute_score`, wherever verl runs it."""
    if rollout is None or rollout.task is None:
        return {}
    try:
        verdict, end_reason = await asyncio.shield(on_rollbox_loop(_verdict(rollout)))
    except Exception as exc:  # rollbox or the host failed: the verdict cannot be had, so the sample is masked
        logger.exception("rollbox: judging a rollout failed")
        return {
            "rollbox_reward": None,
            "rollbox_status": VerdictStatus.INFRA_ERROR.value,
            "rollbox_masked": True,
            "rollbox_end_reason": "infra_error",
            "rollbox_error": f"{type(exc).__name__}: {exc}",
        }
    return {
        "rollbox_reward": verdict.reward,
        "rollbox_status": verdict.status.value,
        "rollbox_masked": verdict.reward is None,
        "rollbox_end_reason": end_reason,
    }


@register(AGENT_LOOP)
class RollboxAgentLoop(ToolAgentLoop):  # type: ignore[misc,unused-ignore]
    """verl's tool agent loop, with each rollout's rollbox episode judged and released when the rollout ends."""

    _rollout: _Rollout | None = None

    async def run(self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any) -> AgentLoopOutput:
        """verl's tool loop; then the verdict on the workspace the agent left, in the output's extra fields."""
        self._rollout, self._row = None, (kwargs.get("tools_kwargs"), kwargs.get("extra_info"))
        try:
            output = await super().run(sampling_params, priority=priority, **kwargs)
        except BaseException:
            if self._rollout is not None and self._rollout.episode is not None:
                await asyncio.shield(on_rollbox_loop(self._rollout.episode.close()))
            raise
        verdict = await _conclude(self._rollout)
        output.extra_fields.update(verdict)
        if verdict:
            # The score rides on this very output: verl then asks no reward manager, some of which merge each
            # sample's extra fields into a row's extra_info dict that the samples of one prompt share (verl's
            # repeat copies references) and score them all after, each reading its last sibling's verdict.
            score = _score(verdict["rollbox_status"], verdict["rollbox_reward"])
            output.reward_score = score["score"]
            output.extra_fields["reward_extra_info"] = score
        return output

    async def _handle_pending_state(self, agent_data: AgentData, sampling_params: dict[str, Any]) -> AgentState:
        self._rollout = _Rollout(task=_task_of_row(*self._row))
        setattr(agent_data, _ROLLOUT, self._rollout)
        return await super()._handle_pending_state(agent_data, sampling_params)


class RollboxTool(BaseTool):  # type: ignore[misc,unused-ignore]
    """One rollbox tool for :class:`RollboxAgentLoop`; every tool call of a rollout acts in its one episode."""

    def __init__(self, config: dict[str, Any], tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        """Run this tool in the rollout's episode (made at its first call); the reward is the verdict's at
        ``submit``, 0.0 before.

        Raises:
            RuntimeError: not under :class:`RollboxAgentLoop` (nothing would judge or release the sandbox), or the
                row names no task.
        """
        agent_data = kwargs["agent_data"]
        rollout: _Rollout | None = getattr(agent_data, _ROLLOUT, None)
        if rollout is None:
            agent_data.extra_fields["rollbox_error"] = _UNDER_OTHER_LOOP
            logger.error("rollbox: %s", _UNDER_OTHER_LOOP)
            raise RuntimeError(_UNDER_OTHER_LOOP)
        if rollout.task is None:
            raise RuntimeError("the row names no rollbox task: set tools_kwargs[TOOL].create_kwargs.task")
        async with rollout.lock:
            if rollout.episode is None:
                rollout.episode = make(rollout.task, policy="verl")
                await on_rollbox_loop(rollout.episode.reset())
            episode = rollout.episode
            if episode.state.value != "running":
                return ToolResponse(text="The episode has ended; no more tool calls are taken."), 0.0, {}
            observation, reward, _done, info = await on_rollbox_loop(
                episode.step({"name": self.name, "arguments": parameters})
            )
        return ToolResponse(text=observation.text), reward or 0.0, {"turn": info.turn, "error": observation.error}
