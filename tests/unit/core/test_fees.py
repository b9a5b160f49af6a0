"""The fee schedule (core.fees): monotone in bytes, days and rate; no congestion fee at or
below the target; exact base fees; bounded congestion fees."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xnode.core.constants import NS_PER_SECOND
from xnode.core.fees import FeeSchedule, Pricing, RateMeter
from xnode.core.retention import DEFAULT_RETENTION_DAYS

prices = st.integers(0, 10**9)
schedules = st.builds(
    FeeSchedule,
    envelope_picodollars=prices,
    byte_day_picodollars=prices,
    target_rate=st.integers(1, 10**6),
    congestion_step_picodollars=prices,
    congestion_max_picodollars=prices,
)
sizes = st.integers(0, 10**7)
days = st.integers(0, 10**4)
rates = st.integers(0, 10**8)


@given(schedules, sizes, sizes, days)
def test_base_fee_is_monotone_in_bytes(schedule: FeeSchedule, a: int, b: int, d: int) -> None:
    small, large = sorted((a, b))
    assert schedule.base_fee(small, d) <= schedule.base_fee(large, d)


@given(schedules, sizes, st.integers(1, 10**4), st.integers(1, 10**4))
def test_base_fee_is_monotone_in_days(schedule: FeeSchedule, size: int, a: int, b: int) -> None:
    short, long = sorted((a, b))
    assert schedule.base_fee(size, short) <= schedule.base_fee(size, long)


@given(schedules, rates, rates)
def test_congestion_fee_is_monotone_in_rate(schedule: FeeSchedule, a: int, b: int) -> None:
    slow, fast = sorted((a, b))
    assert schedule.congestion_fee(slow) <= schedule.congestion_fee(fast)


@given(schedules, st.data())
def test_no_congestion_fee_at_or_below_target(schedule: FeeSchedule, data: st.DataObject) -> None:
    rate = data.draw(st.integers(0, schedule.target_rate))
    assert schedule.congestion_fee(rate) == 0


@given(schedules, rates)
def test_congestion_fee_stays_within_bounds(schedule: FeeSchedule, rate: int) -> None:
    fee = schedule.congestion_fee(rate)
    assert 0 <= fee <= schedule.congestion_max_picodollars
    assert schedule.problem(schedule.base_fee(10, 1), fee, 10, 1) is None


def test_formula() -> None:
    schedule = FeeSchedule(100, 2, 10, 50, 1000)
    assert schedule.base_fee(300, 30) == 100 + 2 * 300 * 30
    assert schedule.base_fee(300, 0) == 100 + 2 * 300 * DEFAULT_RETENTION_DAYS
    assert schedule.congestion_fee(15) == 25  # 50% above target: half a step
    assert schedule.congestion_fee(11) == 5  # rounded up
    assert schedule.congestion_fee(10_000) == 1000  # capped


def test_problems_name_the_rule() -> None:
    schedule = FeeSchedule(100, 2, 10, 50, 1000)
    assert "schedule gives 700" in (schedule.problem(701, 0, 300, 1) or "")
    assert "outside the schedule's bounds [0, 1000]" in (schedule.problem(700, 1001, 300, 1) or "")


def test_negative_prices_are_refused() -> None:
    with pytest.raises(ValueError):
        FeeSchedule(-1)
    with pytest.raises(ValueError):
        FeeSchedule(target_rate=0)


def test_rate_meter_forgets_what_left_the_window() -> None:
    meter = RateMeter(window_s=10)
    meter.add(100, 0)
    assert meter.rate(5 * NS_PER_SECOND) == 10
    meter.add(50, 9 * NS_PER_SECOND)
    assert meter.rate(9 * NS_PER_SECOND) == 15
    assert meter.rate(10 * NS_PER_SECOND) == 5  # second 0 left the window
    assert meter.rate(100 * NS_PER_SECOND) == 0


def test_pricing_charges_congestion_once_the_rate_passes_the_target() -> None:
    pricing = Pricing(FeeSchedule(1, 0, 10, 100, 10**6), window_s=1)
    calm = pricing.batch([(10, 1)] * 10, 0)
    busy = pricing.batch([(10, 1)] * 10, 1)  # 20 in the same second: 100% above target
    assert {f.congestion for f in calm} == {0}
    assert {f.congestion for f in busy} == {100}
    assert {f.base for f in busy} == {1}
