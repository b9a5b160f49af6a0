"""Backoff: doubling waits with jitter, capped, and reset after a success."""

from __future__ import annotations

import random

from xnode.core.backoff import Backoff


class Extreme(random.Random):
    """Always the top (or bottom) of the range asked for: the jitter's bounds, exactly."""

    def __init__(self, top: bool) -> None:
        super().__init__()
        self._top = top

    def uniform(self, a: float, b: float) -> float:
        return b if self._top else a


def test_waits_double_up_to_the_cap_between_half_and_all_of_each_step() -> None:
    steps = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    longest = Backoff(0.5, 4.0, Extreme(top=True))
    shortest = Backoff(0.5, 4.0, Extreme(top=False))
    assert [longest.next_delay() for _ in steps] == steps
    assert [shortest.next_delay() for _ in steps] == [s / 2 for s in steps]


def test_random_waits_stay_within_the_step() -> None:
    backoff = Backoff(0.5, 4.0, random.Random(7))
    for step in [0.5, 1, 2, 4, 4, 4]:
        assert step / 2 <= backoff.next_delay() <= step


def test_reset_starts_over_from_the_first_step() -> None:
    backoff = Backoff(0.2, 10.0, Extreme(top=True))
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == 0.2


def test_a_seeded_source_gives_the_same_waits() -> None:
    first, second = Backoff(1.0, 60.0, random.Random(3)), Backoff(1.0, 60.0, random.Random(3))
    assert [first.next_delay() for _ in range(8)] == [second.next_delay() for _ in range(8)]


def test_very_many_failures_stay_at_the_cap() -> None:
    backoff = Backoff(0.2, 10.0, Extreme(top=True))
    assert [backoff.next_delay() for _ in range(200)][-1] == 10.0
