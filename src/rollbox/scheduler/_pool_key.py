"""The name of a warm pool: the whole configuration its sandboxes are made with, as plain JSON.

Jobs carry it from submission (``Requirements.pool``, stored with each queued job), so that the queue can say how
many jobs wait for each pool and the pools grow ahead of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import fields

from rollbox.sandbox import Limits, Network
from rollbox.sandbox.runtime import RuntimeSpec

from ._model import canonical_json

__all__ = ["pool_key"]


def pool_key(
    limits: Limits,
    network: Network | str,
    *,
    runtime: RuntimeSpec | None = None,
    workspace: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    image: str | None = None,
) -> str:
    """The name of the warm pool for sandboxes of this configuration (plain JSON, so it can be stored with each
    queued job). The runtime is named by its :class:`RuntimeSpec` (what a task asks for), not by the layer built
    from it, so that the name is the same where the job is submitted and on whichever node builds the layer; the
    image by its digest.
    Made once for each configuration (a scheduler asks for every job it submits and every sandbox it borrows)."""
    key = (limits, Network(network), runtime, None if workspace is None else os.fspath(workspace))
    if env or image:
        return _key(*key, env, image=image)
    found = _keys.get(key)
    if found is None:
        if len(_keys) >= 4096:
            _keys.clear()
        found = _keys[key] = _key(*key, None, image=None)
    return found


_keys: dict[tuple[Limits, Network, RuntimeSpec | None, str | None], str] = {}


def _key(
    limits: Limits,
    network: Network,
    runtime: RuntimeSpec | None,
    workspace: str | None,
    env: Mapping[str, str] | None,
    *,
    image: str | None = None,
) -> str:
    values = {f.name: getattr(limits, f.name) for f in fields(limits) if getattr(limits, f.name) is not None}
    config: dict[str, object] = {"limits": values, "network": network.value}
    if runtime is not None:
        config["runtime"] = {
            "python": runtime.python,
            "requirements": list(runtime.requirements),
            "sdists": runtime.allow_sdists,
        }
    if workspace is not None:
        config["workspace"] = workspace
    if env:
        config["env"] = dict(env)
    if image is not None:
        config["image"] = image
    return canonical_json(config)
