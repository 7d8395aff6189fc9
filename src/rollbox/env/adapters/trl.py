"""TRL: a reward function that grades completions through rollbox, and an environment for ``GRPOTrainer``'s
``environment_factory`` (``pip install 'rollbox[trl]'``).

    from rollbox.env.adapters.trl import RollboxTRLEnv, ray_reward, rollbox_reward
    trainer = GRPOTrainer(model=..., reward_funcs=rollbox_reward, train_dataset=ds)      # one completion = one file
    trainer = GRPOTrainer(model=..., reward_funcs=ray_reward(), train_dataset=ds)       # graded on a Ray cluster
    trainer = GRPOTrainer(model=..., environment_factory=RollboxTRLEnv, train_dataset=ds)  # multi-turn, tools

The dataset columns read (TRL passes dataset columns to reward functions as keyword arguments, and each row to
the environment's ``reset``):

- ``task`` (required): each row's task directory.
- ``file`` (optional, reward function only): the workspace file a completion replaces, for a task whose target
  rollbox cannot tell (see :func:`rollbox.env.adapters._common.completion_files`); ``None`` in a row: the default.

A reward of ``None`` (rollbox or the host failed: ``infra_error``) is one TRL leaves out of the sample's reward, as
it does for any reward function's ``None``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from rollbox.env import Episode, make
from rollbox.env._sync import blocking
from rollbox.judge import grade
from rollbox.tasks import Task

from ._common import completion_files, task_of

__all__ = ["RollboxTRLEnv", "ray_reward", "rollbox_reward"]


def _text(completion: Any) -> str:
    """A completion as text: TRL gives a string, or (conversational datasets) a list of messages."""
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")


def _placed(completions: Sequence[Any], columns: dict[str, Any]) -> list[tuple[Task, dict[str, str]]]:
    """Each completion's task and files, every one placed before any is graded (a refusal costs no sandbox).

    Raises:
        ValueError: no ``task`` column, or a completion that cannot be placed (:class:`CompletionError`).
    """
    tasks = columns.get("task")
    if tasks is None:
        raise ValueError("rollbox_reward needs a 'task' column in the dataset: each row's task directory")
    files = columns.get("file") or [None] * len(completions)
    placed = []
    for where, completion, file in zip(tasks, completions, files, strict=True):
        task = task_of(where)
        placed.append((task, completion_files(task, _text(completion), file)))
    return placed


def rollbox_reward(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
    """TRL's reward-function signature: each completion graded by the rollbox judge on its row's ``task``.

    A completion's last fenced code block (or its whole text) is placed where its task expects it: a function
    task's module (a completion holding only the function's body follows the module's prompt), a stdio task's
    script, a pytest task's one solution file; a ``file`` column names the target instead.

    Raises:
        ValueError: no ``task`` column, or a completion that cannot be placed (:class:`CompletionError`, which says
            what to do): a clear error rather than a zero reward for an answer graded in the wrong file.
    """
    placed = _placed(completions, kwargs)

    async def grade_all() -> list[float | None]:
        verdicts = await asyncio.gather(*(grade(task, files) for task, files in placed))
        return [v.reward for v in verdicts]

    return blocking(grade_all())


def _grade_on_node(task_path: str, files: dict[str, str]) -> float | None:
    """One grading, run as a Ray task on whichever node Ray places it."""
    return blocking(grade(task_of(task_path), files)).reward


def ray_reward(*, num_cpus: float = 1.0) -> Callable[..., list[float | None]]:
    """:func:`rollbox_reward` with each completion graded in a Ray task (``num_cpus`` each) on the cluster this
    process joined with ``ray.init()``: the gradings of a batch spread over the cluster's nodes. Every node needs
    rollbox installed and the task directories at the same path (a shared file system)."""
    import ray

    remote = ray.remote(num_cpus=num_cpus)(_grade_on_node)

    def rollbox_reward_on_ray(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        refs = [remote.remote(str(task.path), files) for task, files in _placed(completions, kwargs)]
        return list(ray.get(refs))

    return rollbox_reward_on_ray


class RollboxTRLEnv:
    """The environment shape ``GRPOTrainer(environment_factory=...)`` expects: ``reset(**row)``, tools as
    public methods (type hints and docstrings make their schemas), and ``get_reward``. One episode at a time;
    TRL makes one instance per concurrent rollout and resets it between rollouts."""

    def __init__(self) -> None:
        self.episode: Episode | None = None

    def reset(self, **row: Any) -> str:
        """Start an episode of the row's ``task``; returns its first observation (instruction and workspace),
        which TRL appends to the prompt."""
        if self.episode is not None:
            blocking(self.episode.close())
        self.episode = make(task_of(row), policy="trl")
        return blocking(self.episode.reset()).text

    def _step(self, name: str, **arguments: Any) -> str:
        if self.episode is None:
            return "Error: the environment was not reset."
        if self.episode.state.value != "running":
            return "The episode has ended; no more tool calls are taken."
        result = blocking(self.episode.step({"name": name, "arguments": arguments}))
        return result.observation.text

    def bash(self, command: str) -> str:
        """Run a shell command in /workspace and show its output and exit status.

        Args:
            command: The command line, run by bash -c.

        Returns:
            The command's output and how it ended.
        """
        return self._step("bash", command=command)

    def read_file(self, path: str, start: int | None = None, end: int | None = None) -> str:
        """Show a text file of /workspace, whole or lines start..end (1-based, inclusive).

        Args:
            path: A path relative to /workspace.
            start: First line to show (default 1).
            end: Last line to show (default: the last).

        Returns:
            The file's text.
        """
        return self._step("read_file", path=path, start=start, end=end)

    def write_file(self, path: str, content: str) -> str:
        """Create or replace a text file of /workspace.

        Args:
            path: A path relative to /workspace.
            content: The whole new content.

        Returns:
            What was written.
        """
        return self._step("write_file", path=path, content=content)

    def edit(self, path: str, old: str, new: str) -> str:
        """Replace the one occurrence of old in a file with new; fails unless old occurs exactly once.

        Args:
            path: A path relative to /workspace.
            old: The exact text to replace.
            new: The text to put in its place.

        Returns:
            What was written, or why nothing was.
        """
        return self._step("edit", path=path, old=old, new=new)

    def apply_patch(self, unified_diff: str) -> str:
        """Apply a unified diff to files of /workspace; every hunk applies, or nothing changes.

        Args:
            unified_diff: The diff, as diff -u or git diff print it.

        Returns:
            What was written, or why the patch does not apply.
        """
        return self._step("apply_patch", unified_diff=unified_diff)

    def run_tests(self) -> str:
        """Run the task's visible tests against the workspace.

        Returns:
            The tests' output.
        """
        return self._step("run_tests")

    def submit(self) -> str:
        """Submit the workspace for grading; this ends the episode.

        Returns:
            A confirmation.
        """
        return self._step("submit")

    def get_reward(self) -> float | None:
        """The judge's reward for the episode, judged as it stands when the rollout ended without a submit;
        ``None`` (left out by TRL) when rollbox or the host failed."""
        if self.episode is None:
            return None
        return blocking(self.episode.end()).reward
