"""Retries of infrastructure failures: exponential backoff with jitter, so that retries of many jobs that failed
together (a worker died, the host ran out of descriptors) do not all come back at the same moment."""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["RetryPolicy"]

#: Jitter draws when the caller gives no generator: never the random module's own state, which is the user's.
_JITTER = random.Random()


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How long a job waits in the queue after its attempt ``n`` failed: ``base_s * factor ** (n - 1)``, at most
    ``max_s``, then scaled by a random factor in ``[1 - jitter, 1]``.

    How many attempts a job gets is its own :attr:`JobSpec.max_attempts`.
    """

    base_s: float = 0.5
    factor: float = 2.0
    max_s: float = 60.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.base_s < 0 or self.factor < 1 or self.max_s < self.base_s or not 0 <= self.jitter <= 1:
            raise ValueError(
                f"invalid RetryPolicy {self}: needs base_s >= 0, factor >= 1, max_s >= base_s, 0 <= jitter <= 1"
            )

    def delay_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """The wait before the attempt after ``attempt`` (1 for the first)."""
        ceiling = min(self.max_s, self.base_s * self.factor ** max(0, attempt - 1))
        return ceiling * (1 - self.jitter * (rng or _JITTER).random())
