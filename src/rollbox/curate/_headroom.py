"""The time limit's headroom: a limit the reference barely meets fails correct solutions whenever a machine is
busy, and rewards speed that the task never asked for.

The rule, decided without the machine's load: the task's wall limit and its CPU limit must each be at least
``headroom`` (3) times the reference's worst CPU time over its runs (of its longest single run under the task's
limits: each case of a ``stdio`` task runs under them alone). CPU time counts only the time the reference's
processes ran, not the time they waited for a CPU, so a busy machine does not raise it (unlike wall time, which
the CPU-pressure check scales and so cannot judge by design). Time the reference spends sleeping or waiting on
I/O is not CPU time: the rule cannot see a limit too tight for that. ``--fix`` widens a tight limit to what the
rule asks, in whole seconds.
"""

from __future__ import annotations

import math

from rollbox.tasks import Task

from ._toml import set_key

__all__ = ["needed_s", "tight", "widen"]


def needed_s(worst_cpu_s: float, headroom: float) -> float:
    """The least limit the rule accepts, in whole seconds (at least one)."""
    return float(max(1, math.ceil(worst_cpu_s * headroom)))


def tight(task: Task, worst_cpu_s: float, headroom: float) -> str | None:
    """What is too tight (a sentence), or ``None`` when both limits leave the headroom."""
    need = worst_cpu_s * headroom
    limits = task.limits
    short = [
        f"{name} {value:g} s"
        for name, value in (("wall", limits.timeout_s), ("CPU", limits.cpu_time_s))
        if value < need
    ]
    if not short:
        return None
    return (
        f"the {' and '.join(short)} limit leaves less than {headroom:g}x the reference's worst CPU time "
        f"({worst_cpu_s:.2f} s): at least {needed_s(worst_cpu_s, headroom):g} s"
    )


def widen(task: Task, worst_cpu_s: float, headroom: float) -> str:
    """Raise the task's limits in its task.toml to what the rule asks (a limit above that stays); return what was
    written."""
    seconds = needed_s(worst_cpu_s, headroom)
    toml = task.path / "task.toml"
    written = []
    for key, value in (("timeout", task.limits.timeout_s), ("cpu_time", task.limits.cpu_time_s)):
        if value < seconds:
            set_key(toml, "limits", key, f'"{seconds:g}s"')
            written.append(f'{key} = "{seconds:g}s"')
    return ", ".join(written)
