"""rollbox.env: multi-turn agent episodes on tasks, with tools in a sandbox and the judge's reward at the end.

    async with rollbox.make("tasks/calc") as env:
        obs = await env.reset()
        obs, reward, done, info = await env.step({"name": "submit", "arguments": {}})

Imports :mod:`rollbox.judge`, :mod:`rollbox.tasks` and :mod:`rollbox.sandbox`. Trainer adapters live in
:mod:`rollbox.env.adapters` and import their trainer library only when used.
"""

from ._budget import Budget
from ._episode import Episode, make
from ._errors import EpisodeStateError, PolicyError
from ._openai import OpenAIPolicy, Usage
from ._policy import Agent, Decision, Policy, ScriptedPolicy, policy_from_name, run_episode
from ._tools import TOOLS
from ._trajectory import Trajectory, Turn, read_trajectories, write_trajectories
from ._types import EndReason, EpisodeState, Observation, StepInfo, StepResult

__all__ = [
    "TOOLS",
    "Agent",
    "Budget",
    "Decision",
    "EndReason",
    "Episode",
    "EpisodeState",
    "EpisodeStateError",
    "Observation",
    "OpenAIPolicy",
    "Policy",
    "PolicyError",
    "ScriptedPolicy",
    "StepInfo",
    "StepResult",
    "Trajectory",
    "Turn",
    "Usage",
    "make",
    "policy_from_name",
    "read_trajectories",
    "run_episode",
    "write_trajectories",
]
