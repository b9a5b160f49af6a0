"""Exponential backoff with jitter for reconnecting peer streams."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial_s: float
    max_s: float
    rng: random.Random = field(default_factory=random.Random)
    attempts: int = 0

    def next_delay(self) -> float:
        """Half the exponential step fixed, half random: spread out, yet never near zero, so
        a whole network reconnecting to a restarted node does not arrive at once."""
        step = min(self.max_s, self.initial_s * float(2**self.attempts))
        self.attempts = min(self.attempts + 1, 62)
        return step / 2 + float(self.rng.uniform(0, step / 2))

    def reset(self) -> None:
        self.attempts = 0
