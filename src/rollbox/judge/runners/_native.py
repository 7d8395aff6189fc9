"""The judge's native pieces (``_reward_shim.c``): built once per source version with the system C compiler, as
rollbox's sandbox agent is, and cached beside it."""

from __future__ import annotations

import functools
from importlib import resources

from rollbox.sandbox.agent._build import compile_c

__all__ = ["reward_shim"]


@functools.cache
def reward_shim() -> bytes:
    """The compiled reward shim (a shared object), built on first use.

    Raises:
        RollboxError: no C compiler, or the build failed; the message says what to install.
    """
    source = resources.files("rollbox.judge.runners").joinpath("_reward_shim.c").read_bytes()
    built = compile_c(
        source,
        name="reward-shim.so",
        flags=("-O2", "-shared", "-fPIC"),
        libraries=("-ldl",),
        what="the script runner's reward shim (a small shared object)",
    )
    return built.read_bytes()
