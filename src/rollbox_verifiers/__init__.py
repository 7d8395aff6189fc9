"""rollbox's taskset for verifiers, under the id verifiers loads it by: ``rollbox-verifiers`` (a plugin is a
top-level module). Everything lives in :mod:`rollbox.env.adapters.verifiers`."""

from rollbox.env.adapters.verifiers import (
    RollboxEnv,
    RollboxEnvConfig,
    RollboxHarness,
    RollboxHarnessConfig,
    RollboxTask,
    RollboxTaskData,
    RollboxTaskset,
    RollboxTasksetConfig,
)

__all__ = [
    "RollboxEnv",
    "RollboxEnvConfig",
    "RollboxHarness",
    "RollboxHarnessConfig",
    "RollboxTask",
    "RollboxTaskData",
    "RollboxTaskset",
    "RollboxTasksetConfig",
]
