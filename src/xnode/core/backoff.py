"""Exponential backoff with jitter: the wait before retrying something that failed (a peer
stream reconnecting, the chain indexer after an RPC error)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# 2**62 steps are far past any cap; stopping there keeps the float exponent finite.
_MAX_DOUBLINGS = 62


@dataclass
class Backoff:
    """Waits grow from `initial_s`, doubling up to `max_s`; `reset()` after a success.

    `rng` is injectable so tests see fixed waits."""

    initial_s: float
    max_s: float
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def next_delay(self) -> float:
        """Half the exponential step fixed, half random: spread out, yet never near zero, so
        a whole network reconnecting to a restarted node does not arrive at once."""
        step = min(self.max_s, self.initial_s * float(2**self.attempts))
        self.attempts = min(self.attempts + 1, _MAX_DOUBLINGS)
        return step / 2 + float(self.rng.uniform(0, step / 2))

    def reset(self) -> None:
        self.attempts = 0
