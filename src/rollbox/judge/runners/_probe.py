"""Validation's hook into grading: the variables it varies, and the CPU time it reads back.

The judge grades with fixed variables (``GRADING_ENV``: ``PYTHONHASHSEED=0``, ``TZ=UTC``), so that the same
candidate gets the same verdict every time. That also hides a test that holds only under them (a set's iteration
order under one hash seed, today's date): validation grades the reference again under others, inside
:func:`probe`, and reads the grading's CPU time (which, unlike its wall time, does not grow with the machine's
load) to check the task's time limit. The probe is a context variable: only the asyncio task that opened it, and
those it starts, see it. Outside one, grading is exactly as always.

A fork of a sandbox's pre-started Python keeps the hash seed and the preloaded libraries it started with, so a
probe's grading asks for sandboxes whose zygote started under the probe's variables (:func:`sandbox_config`:
``SandboxConfig.interpreter_env``) and forks it only there (:func:`forks_apply`); elsewhere it runs a plain
interpreter under them.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from rollbox.sandbox import Sandbox, SandboxConfig

from ._channel import GRADING_ENV

__all__ = ["Probe", "forks_apply", "grading_env", "probe", "record_cpu", "sandbox_config"]


@dataclass
class Probe:
    """What one grading is run under, and what it measured."""

    #: Variables over the judge's own (its channel's variables still win).
    env: Mapping[str, str] = field(default_factory=dict)
    #: CPU seconds of the grading's longest single run under the task's limits (set when the grading ran).
    cpu_s: float | None = None


_CURRENT: contextvars.ContextVar[Probe | None] = contextvars.ContextVar("rollbox_judge_probe", default=None)


@contextlib.contextmanager
def probe(env: Mapping[str, str] | None = None) -> Iterator[Probe]:
    """Grade under ``env`` (over ``GRADING_ENV``) while the block runs, and measure: the yielded probe holds the
    CPU time of the last grading that ran inside it."""
    current = Probe(env=dict(env or {}))
    token = _CURRENT.set(current)
    try:
        yield current
    finally:
        _CURRENT.reset(token)


def grading_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a graded process gets: ``GRADING_ENV``, a probe's, then ``extra`` (the runner's own)."""
    current = _CURRENT.get()
    return {**GRADING_ENV, **(current.env if current is not None else {}), **(extra or {})}


def _probed() -> dict[str, str]:
    current = _CURRENT.get()
    return dict(current.env) if current is not None else {}


def sandbox_config(config: SandboxConfig) -> SandboxConfig:
    """``config`` for a grading sandbox: under a probe, with the probe's variables as those its zygote starts
    under (a started interpreter cannot take them: its hash seed is fixed, a preloaded library loads at exec)."""
    probed = _probed()
    return dataclasses.replace(config, interpreter_env=probed) if probed else config


def forks_apply(sb: Sandbox) -> bool:
    """Whether a fork of ``sb``'s Python zygote runs as :func:`grading_env` asks: its zygote started under exactly
    the probe's variables (none outside a probe; the judge's hash seed, 0, is the zygote's own)."""
    return dict(sb.config.interpreter_env) == _probed()


def record_cpu(cpu_s: float) -> None:
    """Tell an open probe the grading's CPU time (nothing happens outside one)."""
    current = _CURRENT.get()
    if current is not None:
        current.cpu_s = cpu_s
