"""verifiers (``verifiers.v1``): rollbox tasks as a verifiers taskset, played in rollbox sandboxes and rewarded
by the rollbox judge (``pip install 'rollbox[verifiers]'``).

    vf-eval rollbox-verifiers --env.taskset.tasks '["tasks/calc"]' -m MODEL --client.base-url URL/v1

verifiers finds a plugin by the name of a top-level module, so the id is ``rollbox-verifiers`` (the module
:mod:`rollbox_verifiers`, which re-exports this one). Its parts, in verifiers' terms:

- :class:`RollboxTaskset` loads rollbox task directories (``tasks``) as :class:`RollboxTask` rows.
- :class:`RollboxHarness`, the agent, is rollbox's tool loop (:class:`rollbox.env.OpenAIPolicy`) run in process:
  every model call goes through the rollout's interception endpoint, so the trace records each turn, and every
  tool call runs in the rollout's rollbox episode. One sandbox per rollout, released when the rollout ends (the
  harness's ``cleanup``, which verifiers runs after scoring, whether the rollout succeeded, failed or was cut).
- :class:`RollboxTask`'s reward ``judge`` is the rollbox judge's on the rollout's final workspace, graded in a
  fresh sandbox: at ``submit`` or when a rollbox budget ends the episode, or, when verifiers stopped the agent
  first (its turn, token or time limits), as the workspace stands then.
- :class:`RollboxEnv` is the single-agent env, its seat on the ``subprocess`` runtime by default: the harness
  runs nothing there, the model's commands run in rollbox's sandboxes. ``--env.warm-sandboxes N`` gives the
  agents and the judge warm pools while it serves (:func:`use_sandboxes` sets any sources, from Python).

The tools are not a ``vf.Toolset``: verifiers serves a task's tool servers in processes of their own and stops
them before it scores, so the sandbox they held would be gone before the judge could grade it. When rollbox or
the host fails (the verdict's status is ``infra_error``, or the agent's sandbox cannot be made) the rollout fails
with ``vf.SandboxError``: verifiers records the error, marks the trace not ``ok`` and leaves its reward
unscored (``None``), which is how it masks a rollout; ``--env.agent.retries`` retries it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import verifiers.v1 as vf
from pydantic import Field

from rollbox.env import Episode, OpenAIPolicy, make
from rollbox.judge import Verdict, VerdictStatus
from rollbox.sandbox import RollboxError, SandboxSource, WarmSandboxes

from ._common import task_of

__all__ = [
    "RollboxEnv",
    "RollboxEnvConfig",
    "RollboxHarness",
    "RollboxHarnessConfig",
    "RollboxTask",
    "RollboxTaskData",
    "RollboxTaskset",
    "RollboxTasksetConfig",
    "use_sandboxes",
]

#: Live episodes by verifiers trace id: made by the harness, judged by the task's reward, closed by the harness's
#: cleanup. A rollout is scored in the process that ran it, so a table in this module reaches all three.
_episodes: dict[str, Episode] = {}


@dataclass
class _Sources:
    sandboxes: SandboxSource | None = None
    judge_sandboxes: SandboxSource | None = None


_sources = _Sources()


def use_sandboxes(sandboxes: SandboxSource | None = None, *, judge_sandboxes: SandboxSource | None = None) -> None:
    """Where this process's later rollouts take their sandboxes: the agent's (``sandboxes``) and the judge's
    (``judge_sandboxes``), as :func:`rollbox.make` takes them; ``None`` is a fresh sandbox each time (the default).
    Warm pools (:class:`rollbox.sandbox.WarmSandboxes`) start rollouts faster. verifiers builds harnesses from
    configs, which hold no live objects, so the sources are set here, once per process.

    Raises:
        ValueError: one source for both: an agent holds its sandbox while the judge grades, so a shared pool
            can leave the judge waiting for the very sandbox the agent holds.
    """
    if sandboxes is not None and sandboxes is judge_sandboxes:
        raise ValueError(
            "give the judge a sandbox source of its own (judge_sandboxes): an agent holds its sandbox while the "
            "judge grades its workspace, so one shared pool can wait on itself forever"
        )
    _sources.sandboxes = sandboxes
    _sources.judge_sandboxes = judge_sandboxes


class RollboxTaskData(vf.TaskData):  # type: ignore[misc,unused-ignore]
    """One row: a rollbox task directory and a budget override; ``prompt`` is the task's instruction."""

    task: str
    """The rollbox task directory."""
    max_turns: int | None = None
    """Overrides the task's ``max_turns`` budget (``[metadata.episode]`` in its task.toml)."""


class RollboxTask(vf.Task[RollboxTaskData]):  # type: ignore[misc,unused-ignore]
    """A rollbox task; its reward is the rollbox judge's."""

    @vf.reward  # type: ignore[misc,untyped-decorator,unused-ignore]
    async def judge(self, trace: vf.Trace) -> float:
        """The judge's reward on the rollout's final workspace: 1.0 when it passes, partial credit, or <= 0.

        Raises:
            vf.SandboxError: rollbox or the host failed (verdict ``infra_error``): the rollout is masked.
            RuntimeError: the rollout had no rollbox episode (a harness other than the rollbox one played it).
        """
        episode = _episodes.get(trace.id)
        if episode is None:
            raise RuntimeError(
                f"rollout {trace.id} has no rollbox episode: rollbox tasks are played by the rollbox harness "
                "(--env.agent.harness.id rollbox-verifiers), whose tools run in rollbox sandboxes"
            )
        verdict = await episode.end()
        _record(trace, episode, verdict)
        if verdict.status is VerdictStatus.INFRA_ERROR or verdict.reward is None:
            raise vf.SandboxError(f"rollbox infra_error grading task {verdict.task_id!r}: {verdict.error}")
        return verdict.reward


def _record(trace: vf.Trace, episode: Episode, verdict: Verdict) -> None:
    """What the trace keeps of the episode beside its messages: why it ended, and the verdict."""
    end = episode.trajectory.end_reason
    trace.info["rollbox"] = {
        "episode_id": episode.trajectory.episode_id,
        "end_reason": getattr(end, "value", end),
        "turns": episode.turns,
        "verdict": verdict.to_json(),
    }


class RollboxTasksetConfig(vf.TasksetConfig):  # type: ignore[misc,unused-ignore]
    """``tasks``: rollbox task directories, a row each; ``max_turns`` overrides every task's turn budget."""

    tasks: list[str] = Field(default_factory=list)
    max_turns: int | None = Field(None, ge=1)


class RollboxTaskset(vf.Taskset[RollboxTask, RollboxTasksetConfig]):  # type: ignore[misc,unused-ignore]
    """The rollbox tasks in ``config.tasks``, in that order."""

    def load(self) -> list[RollboxTask]:
        """A row per task directory.

        Raises:
            ValueError: ``tasks`` is empty.
            TaskFormatError: a directory is not a valid rollbox task.
        """
        if not self.config.tasks:
            raise ValueError(
                "the rollbox taskset has no tasks: set tasks (--env.taskset.tasks) to a list of rollbox task "
                "directories"
            )
        rows = []
        for where in self.config.tasks:
            task = task_of(where)
            data = RollboxTaskData(
                id=task.id,
                name=task.id,
                prompt=task.instruction.strip() or f"Solve the task {task.id} in /workspace.",
                task=str(task.path),
                max_turns=self.config.max_turns,
            )
            rows.append(RollboxTask(data, self.config.task))
        return rows


class RollboxHarnessConfig(vf.HarnessConfig):  # type: ignore[misc,unused-ignore]
    """``request_timeout``: one model request's limit in seconds; a request past it is retried, as a 5xx is."""

    request_timeout: float = Field(600.0, gt=0)


class RollboxHarness(vf.Harness[RollboxHarnessConfig]):  # type: ignore[misc,unused-ignore]
    """rollbox's tool loop, in process: the model (through the rollout's interception endpoint) calls the rollbox
    tools, each run in the rollout's sandbox, until it submits or a budget ends the episode. The conversation
    opens with the episode's first observation (the instruction and the workspace's listing)."""

    APPENDS_SYSTEM_PROMPT: ClassVar[bool] = True
    #: The model's commands run in rollbox's sandboxes, never in the runtime (which stays idle on the host).
    EXECUTES_CODE: ClassVar[bool] = False
    NEEDS_CONTAINER: ClassVar[bool] = False

    async def launch(  # noqa: PLR0917  (verifiers calls it positionally)
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
    ) -> vf.ProgramResult:
        """Play one rollout: a new episode of the row's task, acted in until it ends (the reward judges it).

        Raises:
            vf.SandboxError: the episode's sandbox could not be made.
            ValueError: the row names no rollbox task.
        """
        where = getattr(data, "task", None)
        if not isinstance(where, str):
            raise ValueError(f"the rollbox harness plays rollbox tasks: the row has no 'task' directory ({data!r})")
        budget = {"max_turns": data.max_turns} if getattr(data, "max_turns", None) else {}
        episode = make(
            task_of(where),
            sandboxes=_sources.sandboxes,
            judge_sandboxes=_sources.judge_sandboxes,
            episode_id=trace.id,
            policy=f"verifiers:{ctx.model}",
            **budget,
        )
        _episodes[trace.id] = episode
        try:
            observation = await episode.reset()
        except RollboxError as exc:  # rollbox's or the host's failure, never the model's
            raise vf.SandboxError(f"rollbox could not start the episode's sandbox: {exc}") from exc
        policy = OpenAIPolicy(
            ctx.model,
            base_url=endpoint,
            api_key=secret,
            timeout_s=self.config.request_timeout,
            system_prompt=data.system_prompt,
        )
        async with policy:
            agent = policy.start(episode)
            done = False
            while not done:
                decision = await agent.act(observation)
                observation, _reward, done, _info = await episode.step(decision.action, record=decision.record)
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    async def cleanup(self, trace: vf.Trace, runtime: vf.Runtime) -> None:
        """Release the rollout's sandbox: after scoring, and also when the rollout failed or was cancelled."""
        episode = _episodes.pop(trace.id, None)
        if episode is not None:
            await episode.close()


class RollboxEnvConfig(vf.EnvConfig):  # type: ignore[misc,unused-ignore]
    """The one ``agent`` seat, on the ``subprocess`` runtime by default (the rollbox harness runs nothing there);
    ``warm_sandboxes``: the size of the warm pools the agents, and apart from them the judge, take sandboxes from,
    a pool per configuration of limits (0: a fresh sandbox each time)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    warm_sandboxes: int = Field(0, ge=0)


class RollboxEnv(vf.Env[RollboxEnvConfig]):  # type: ignore[misc,unused-ignore]
    """An episode is one agent's rollout of one rollbox task. While the env serves, its warm pools (when
    ``warm_sandboxes`` is set) are where this process's rollouts take their sandboxes."""

    _warm: tuple[WarmSandboxes, WarmSandboxes] | None = None

    async def start(self) -> None:
        """Open the warm pools (each fills on first use) in the loop the rollouts run in: the agents' and the
        judge's."""
        if self.config.warm_sandboxes:
            self._warm = WarmSandboxes(size=self.config.warm_sandboxes), WarmSandboxes(size=self.config.warm_sandboxes)
            use_sandboxes(self._warm[0], judge_sandboxes=self._warm[1])

    async def stop(self) -> None:
        """Close the warm pools, and go back to fresh sandboxes."""
        warm, self._warm = self._warm, None
        if warm is not None:
            use_sandboxes()
            try:
                await warm[0].close()
            finally:
                await warm[1].close()

    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        """Run the seat's agent once on ``task``."""
        await agents.agent.run(task)
