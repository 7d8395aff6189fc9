"""The errors of rollbox.env. What the agent did is never an exception: it is an observation or a verdict.

::

    RollboxError
    ├── EpisodeStateError   an episode used out of order (step before reset, after the end, after close)
    └── PolicyError         a policy could not decide (its server failed past its retries, a replay ran out)
"""

from __future__ import annotations

from rollbox.sandbox import RollboxError

__all__ = ["EpisodeStateError", "PolicyError"]


class EpisodeStateError(RollboxError):
    """An episode was used out of order; the message says what to call instead."""


class PolicyError(RollboxError):
    """A policy could not produce an action; the message says why and what to do."""
