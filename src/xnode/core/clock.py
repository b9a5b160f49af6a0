"""The time the node reads, behind one small interface so tests can set it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ns(self) -> int:
        """Unix time in nanoseconds (originator_ns, report times)."""
        ...

    def now_s(self) -> int:
        """Unix time in whole seconds (expiry_unixtime is in seconds)."""
        ...

    def monotonic_s(self) -> float:
        """Seconds on a clock that never goes back, for measuring how long something took."""
        ...


class SystemClock:
    def now_ns(self) -> int:
        return time.time_ns()

    def now_s(self) -> int:
        return int(time.time())

    def monotonic_s(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()
