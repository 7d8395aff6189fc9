"""The runtime a graded task's sandboxes get: the layer its ``[environment]`` names, and its variables.

Every sandbox the judge takes for a task (its runners', the reference's, the checker's) comes through
:func:`task_sandboxes`, which builds the task's layer on first use (once per machine: see
:class:`rollbox.sandbox.runtime.LayerStore`) and hands each sandbox the layer and the task's variables. A layer
for a ``pytest`` task holds the pytest rollbox grades with (the version installed here) unless the task's
requirements name pytest themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import os
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from rollbox.sandbox import Sandbox, SandboxConfig, SandboxSource
from rollbox.sandbox.images import Image, ImageError, ImageStore
from rollbox.sandbox.images._layout import read_index
from rollbox.sandbox.runtime import Layer, LayerStore, RuntimeSpec
from rollbox.tasks import PytestGrading, Task

__all__ = ["runtime_spec", "sandboxes_image", "task_image", "task_sandboxes"]

#: Images named by a path, imported once per process: (store, path, its content's identity) -> the image.
_imported: dict[tuple[str, str, str], Image] = {}


def task_image(task: Task, store: ImageStore | None = None) -> Image | None:
    """The image ``task``'s sandboxes run on (``[environment] image``), or None: an image layout directory or a
    docker-save / OCI archive at that path (relative to the task's directory) is imported into the store, once per
    process while it is unchanged (a layout while its index.json names the same digests, an archive while its file
    is the same) and its root is there; anything else is a reference or digest the store resolves.

    Raises:
        ImageError: the image is not in the store, or cannot be imported (the message says what to do).
    """
    ref = task.environment.image
    if ref is None:
        return None
    store = store or ImageStore()
    path = task.path / ref
    try:
        st = path.stat()
    except OSError:
        return store.resolve(ref)
    key = (str(store.home), str(path.resolve()), _identity(path, st))
    image = _imported.get(key)
    if image is not None:
        try:
            os.close(image.hold())
        except (FileNotFoundError, BlockingIOError):  # its root collected since, or being now: imported again
            image = None
    if image is None:
        image = _imported[key] = store.import_layout(path) if path.is_dir() else store.import_archive(path)
    return image


def _identity(path: Path, st: os.stat_result) -> str:
    """What tells the image at ``path`` from another there: a layout's index.json (the digests it names; a layout
    updated in place keeps its directory's inode and, often, its time), an archive's file and time."""
    if not path.is_dir():
        return f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"
    try:
        # Bounded, and never a fifo waited on or a device read without end: the task's files are anyone's.
        return hashlib.sha256(read_index(path)).hexdigest()
    except ImageError:
        return ""  # no index to read: the import says what is wrong


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
    """``inner``'s sandboxes, each with the task's runtime layer, image and variables (where the configuration
    asked for has none of its own)."""

    def __init__(
        self, inner: SandboxSource, runtime: Layer | None, env: Mapping[str, str], image: Image | None = None
    ) -> None:
        self._inner = inner
        self._runtime = runtime
        self._image = image
        self._env = dict(env)

    def _task(self, config: SandboxConfig) -> SandboxConfig:
        return dataclasses.replace(
            config,
            runtime=config.runtime or self._runtime,
            image=config.image or self._image,
            env={**self._env, **config.env},
        )

    def sandbox(self, config: SandboxConfig) -> contextlib.AbstractAsyncContextManager[Sandbox]:
        return self._inner.sandbox(self._task(config))

    def sandboxes(
        self, count: int, config: SandboxConfig, *, avoid: str | None = None
    ) -> contextlib.AbstractAsyncContextManager[list[Sandbox]]:
        return self._inner.sandboxes(count, self._task(config), avoid=avoid)


def sandboxes_image(source: SandboxSource) -> Image | None:
    """The image the sandboxes of ``source`` (as :func:`task_sandboxes` returned it) run on, or None: the one they
    were made with, never the task's image looked up again (which may name another by now)."""
    return source._image if isinstance(source, _TaskSandboxes) else None


async def task_sandboxes(task: Task, source: SandboxSource, store: LayerStore | None = None) -> SandboxSource:
    """``source`` as ``task``'s sandboxes get it: each with the task's runtime layer (built now if it is not yet),
    its image (imported now if it is a path: :func:`task_image`) and its environment variables; ``source`` itself
    for a task that has none of them.

    Raises:
        PythonNotFound: the task's Python is not installed here.
        LayerBuildError: its layer could not be built.
        ImageError: its image is unknown or cannot be imported.
    """
    spec = runtime_spec(task)
    image = await asyncio.to_thread(task_image, task)  # a first import unpacks: off the event loop
    if spec is None and not task.environment.env and image is None:
        return source
    layer = await (store or LayerStore()).ensure(spec) if spec is not None else None
    return _TaskSandboxes(source, layer, task.environment.env, image)
