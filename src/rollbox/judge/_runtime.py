"""The runtime a graded task's sandboxes get: the layer its ``[environment]`` names, and its variables.

Every sandbox the judge takes for a task (its runners', the reference's, the checker's) comes through
:func:`task_sandboxes`, which builds the task's layer on first use (once per machine: see
:class:`rollbox.sandbox.runtime.LayerStore`) and hands each sandbox the layer and the task's variables. A layer
for a ``pytest`` task holds the pytest rollbox grades with (the version installed here) unless the task's
requirements name pytest themselves.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rollbox.sandbox import Limits, Network, Sandbox, SandboxSource
from rollbox.sandbox.runtime import Layer, LayerStore, RuntimeSpec
from rollbox.tasks import PytestGrading, Task

__all__ = ["runtime_spec", "task_sandboxes"]


def runtime_spec(task: Task) -> RuntimeSpec | None:
    """The runtime layer ``task`` runs on, or None for rollbox's own Python (a task with no ``[environment]``
    Python or requirements)."""
    environment = task.environment
    if environment.is_default:
        return None
    requirements = list(environment.requirements)
    named = {canonicalize_name(Requirement(line).name) for line in requirements}
    if isinstance(task.grading, PytestGrading) and "pytest" not in named:
        requirements.append(f"pytest=={metadata.version('pytest')}")
    return RuntimeSpec(python=environment.python, requirements=tuple(requirements))


class _TaskSandboxes:
    """``inner``'s sandboxes, each with the task's runtime layer and variables."""

    def __init__(self, inner: SandboxSource, runtime: Layer | None, env: Mapping[str, str]) -> None:
        self._inner = inner
        self._runtime = runtime
        self._env = dict(env)

    @contextlib.asynccontextmanager
    async def sandbox(
        self,
        *,
        limits: Limits,
        network: Network,
        runtime: Layer | None = None,
        workspace: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[Sandbox]:
        variables = {**self._env, **(env or {})}
        async with self._inner.sandbox(
            limits=limits, network=network, runtime=runtime or self._runtime, workspace=workspace, env=variables
        ) as sb:
            yield sb

    @contextlib.asynccontextmanager
    async def sandboxes(
        self,
        count: int,
        *,
        limits: Limits,
        network: Network,
        avoid: str | None = None,
        runtime: Layer | None = None,
        workspace: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> AsyncIterator[list[Sandbox]]:
        variables = {**self._env, **(env or {})}
        async with self._inner.sandboxes(
            count,
            limits=limits,
            network=network,
            avoid=avoid,
            runtime=runtime or self._runtime,
            workspace=workspace,
            env=variables,
        ) as boxes:
            yield boxes


async def task_sandboxes(task: Task, source: SandboxSource, store: LayerStore | None = None) -> SandboxSource:
    """``source`` as ``task``'s sandboxes get it: each with the task's runtime layer (built now if it is not yet)
    and its environment variables; ``source`` itself for a task that has neither.

    Raises:
        PythonNotFound: the task's Python is not installed here.
        LayerBuildError: its layer could not be built.
    """
    spec = runtime_spec(task)
    if spec is None and not task.environment.env:
        return source
    layer = await (store or LayerStore()).ensure(spec) if spec is not None else None
    return _TaskSandboxes(source, layer, task.environment.env)
