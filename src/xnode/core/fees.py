"""The originator's fee schedule (XIP-49 3.2.1, 3.3.1): what a payer owes per envelope.

Both fees are integers in picodollars, signed into UnsignedOriginatorEnvelope fields 5
(`base_fee_picodollars`) and 6 (`congestion_fee_picodollars`).

    base_fee       = envelope_picodollars + byte_day_picodollars * bytes * days
    congestion_fee = 0                                              when rate <= target
                   = min(congestion_max, ceil(congestion_step * (rate - target) / target))

- `bytes` is the size of the payer envelope as signed (`payer_envelope_bytes`);
- `days` is the payer's `message_retention_days`, or the default retention when it is 0
  (what the node keeps is what it charges for);
- `rate` is this originator's recent publish rate (envelopes per second, see RateMeter),
  `target` the rate it serves without congestion. The congestion fee rises linearly with the
  excess: `congestion_step` per 100% above target, never above `congestion_max`.

A peer holds another originator to its published schedule: the base fee must be exactly
what the schedule gives (bytes and days are in the envelope); the congestion fee depends on
the originator's load, which a peer cannot see, so only its bounds are checked.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from xnode.core.constants import NS_PER_SECOND
from xnode.core.retention import DEFAULT_RETENTION_DAYS


@dataclass(frozen=True, slots=True)
class FeeSchedule:
    envelope_picodollars: int = 0
    byte_day_picodollars: int = 0
    target_rate: int = 1
    congestion_step_picodollars: int = 0
    congestion_max_picodollars: int = 0

    def __post_init__(self) -> None:
        if min(self.envelope_picodollars, self.byte_day_picodollars) < 0:
            raise ValueError("fees cannot be negative")
        if self.target_rate < 1:
            raise ValueError("the target rate must be at least 1 envelope per second")
        if min(self.congestion_step_picodollars, self.congestion_max_picodollars) < 0:
            raise ValueError("congestion fees cannot be negative")

    def base_fee(self, size: int, retention_days: int) -> int:
        days = retention_days or DEFAULT_RETENTION_DAYS
        return self.envelope_picodollars + self.byte_day_picodollars * size * days

    def congestion_fee(self, rate: int) -> int:
        excess = rate - self.target_rate
        if excess <= 0:
            return 0
        # ceil without floats: integers keep the fee exact at any size
        raw = -(-self.congestion_step_picodollars * excess // self.target_rate)
        return min(self.congestion_max_picodollars, raw)

    def problem(self, base: int, congestion: int, size: int, retention_days: int) -> str | None:
        """Why signed fees do not follow this schedule, or None."""
        expected = self.base_fee(size, retention_days)
        if base != expected:
            return (
                f"base_fee_picodollars is {base}, the schedule gives {expected} "
                f"for {size} bytes kept {retention_days or DEFAULT_RETENTION_DAYS} days"
            )
        if not 0 <= congestion <= self.congestion_max_picodollars:
            return (
                f"congestion_fee_picodollars is {congestion}, outside the schedule's "
                f"bounds [0, {self.congestion_max_picodollars}]"
            )
        return None


@dataclass(frozen=True, slots=True)
class Fees:
    base: int
    congestion: int


NO_FEES = Fees(0, 0)


class RateMeter:
    """This node's recent publish rate: envelopes per second over a sliding window.

    Counts are kept per whole second, so memory is bounded by the window, not the rate."""

    def __init__(self, window_s: int = 10) -> None:
        if window_s < 1:
            raise ValueError("the window is at least one second")
        self._window_s = window_s
        self._seconds: deque[list[int]] = deque()  # [second, count], oldest first
        self._total = 0

    def _expire(self, second: int) -> None:
        while self._seconds and self._seconds[0][0] <= second - self._window_s:
            self._total -= self._seconds.popleft()[1]

    def add(self, count: int, now_ns: int) -> None:
        second = now_ns // NS_PER_SECOND
        self._expire(second)
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1][1] += count
        else:
            self._seconds.append([second, count])
        self._total += count

    def rate(self, now_ns: int) -> int:
        """Envelopes per second, rounded up, over the last window."""
        self._expire(now_ns // NS_PER_SECOND)
        return -(-self._total // self._window_s)


class Pricing:
    """What the originator charges: its schedule, at the rate it has been publishing."""

    def __init__(self, schedule: FeeSchedule, window_s: int = 10) -> None:
        self.schedule = schedule
        self._meter = RateMeter(window_s)

    def batch(self, sizes: list[tuple[int, int]], now_ns: int) -> list[Fees]:
        """Fees for a batch of (payer envelope bytes, retention days) about to be signed:
        the batch counts towards the rate it pays congestion for."""
        self._meter.add(len(sizes), now_ns)
        congestion = self.schedule.congestion_fee(self._meter.rate(now_ns))
        return [Fees(self.schedule.base_fee(size, days), congestion) for size, days in sizes]
