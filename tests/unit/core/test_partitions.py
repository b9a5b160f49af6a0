"""Which envelope partitions to add and drop (xnode.core.partitions)."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from xnode.core.partitions import (
    Layout,
    LayoutError,
    Partition,
    layout,
    parse_bound,
    period_name,
    periods_to_add,
    periods_to_drop,
)

DAY = 86_400
WEEK = 7 * DAY
BASE = 2900 * WEEK  # a week boundary (weeks since the epoch)


def weeks(first: int, count: int) -> list[Partition]:
    lower = [BASE + (first + i) * WEEK for i in range(count)]
    return [Partition(period_name(x), x, x + WEEK) for x in lower]


def current(first: int = 0, count: int = 3) -> list[Partition]:
    periods = weeks(first, count)
    expired = Partition("e", None, periods[0].lower)
    later = Partition("l", periods[-1].upper, None)
    return [later, *periods, expired]  # in no particular order, as Postgres lists them


def test_bounds_as_postgres_prints_them() -> None:
    assert parse_bound("n", "DEFAULT") is None
    assert parse_bound("e", "FOR VALUES FROM (MINVALUE) TO ('1764806400')") == Partition(
        "e", None, 1764806400
    )
    assert parse_bound("p", "FOR VALUES FROM ('10') TO ('20')") == Partition("p", 10, 20)
    assert parse_bound("l", "FOR VALUES FROM ('20') TO (MAXVALUE)") == Partition("l", 20, None)
    with pytest.raises(LayoutError, match="not a single-column range"):
        parse_bound("x", "FOR VALUES IN (1)")


def test_a_layout_runs_from_minvalue_to_maxvalue_without_holes() -> None:
    found = layout(current())
    assert [p.lower for p in found.periods] == [BASE, BASE + WEEK, BASE + 2 * WEEK]
    assert (found.first_kept, found.horizon) == (BASE, BASE + 3 * WEEK)
    holed = [p for p in current() if p.lower != BASE + WEEK]
    with pytest.raises(LayoutError, match="do not meet"):
        layout(holed)
    with pytest.raises(LayoutError, match="MINVALUE to MAXVALUE"):
        layout(weeks(0, 2))


def test_a_period_goes_once_its_last_second_has_passed() -> None:
    found = layout(current())
    assert periods_to_drop(found, BASE + WEEK - 2) == []
    # Expired means expiry <= now: the last expiry a period holds is upper - 1.
    assert [p.lower for p in periods_to_drop(found, BASE + WEEK - 1)] == [BASE]
    assert len(periods_to_drop(found, BASE + 10 * WEEK)) == 3


def test_periods_are_added_up_to_ahead_days_aligned_to_whole_periods() -> None:
    found = layout(current())
    assert periods_to_add(found, BASE, ahead_days=14, period_days=7) == []
    added = periods_to_add(found, BASE + DAY, ahead_days=21, period_days=7)
    assert added == [(BASE + 3 * WEEK, BASE + 4 * WEEK)]
    # A period changed to one day: daily periods from the horizon.
    daily = periods_to_add(found, BASE, ahead_days=23, period_days=1)
    assert daily == [(BASE + 3 * WEEK + i * DAY, BASE + 3 * WEEK + (i + 1) * DAY) for i in range(2)]
    # From a 7-day alignment to 5 days: the first new period is cut short to realign.
    five = periods_to_add(found, BASE, ahead_days=25, period_days=5)
    assert five[0] == (BASE + 3 * WEEK, (BASE + 3 * WEEK) // (5 * DAY) * 5 * DAY + 5 * DAY)
    assert all(upper % (5 * DAY) == 0 for _, upper in five)


# The plan over time: whatever day the first run happens, and whatever the schedule of runs
# and the period setting after it, the layout stays whole, nothing unexpired is dropped,
# nothing wholly expired is kept past a run, and the horizon stays ahead.

YEAR_START = 1_798_761_600  # 2027-01-01T00:00:00Z: any year works, the plan reads no clock
MIGRATION_PERIOD_DAYS = 30  # the periods migration 0009 creates
MIGRATION_AHEAD_DAYS = 200


def migrated(now: int) -> Layout:
    """The layout migration 0009 creates when it runs at `now`."""
    period = MIGRATION_PERIOD_DAYS * DAY
    low = now // period * period
    high = -(-(now + MIGRATION_AHEAD_DAYS * DAY) // period) * period
    periods = [Partition(period_name(x), x, x + period) for x in range(low, high, period)]
    return layout([Partition("e", None, low), *periods, Partition("l", high, None)])


def maintained(current: Layout, now: int, ahead_days: int, period_days: int) -> Layout:
    """What the store's `maintain` leaves: the periods added, then the expired ones dropped."""
    added = [
        Partition(period_name(lo), lo, up)
        for lo, up in periods_to_add(current, now, ahead_days, period_days)
    ]
    if added:
        current = layout(
            [current.expired, *current.periods, *added, Partition("l", added[-1].upper, None)]
        )
    dropped = periods_to_drop(current, now)
    assert all(p.upper is not None and p.upper - 1 <= now for p in dropped), (
        "an unexpired period dropped"
    )
    if dropped:
        kept = current.periods[len(dropped) :]
        current = layout([Partition("e", None, dropped[-1].upper), *kept, current.later])
    return current


runs = st.lists(
    st.tuples(st.integers(0, 45 * DAY), st.integers(1, 400), st.integers(1, 60)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=400)
@given(first_day=st.integers(0, 365), second=st.integers(0, DAY - 1), schedule=runs)
@example(first_day=0, second=0, schedule=[(40 * DAY, 200, 7)])
@example(first_day=364, second=DAY - 1, schedule=[(DAY, 200, 7)] * 40)
def test_the_plan_holds_from_any_start_day_under_any_schedule(
    first_day: int, second: int, schedule: list[tuple[int, int, int]]
) -> None:
    now = YEAR_START + first_day * DAY + second
    current = migrated(now)
    names: set[str] = {p.name for p in current.periods}
    for gap, ahead_days, period_days in schedule:
        now += gap
        before = {p.name for p in current.periods}
        current = maintained(current, now, ahead_days, period_days)
        new = {p.name for p in current.periods} - before
        assert not new & names, "a period's table name used twice"
        names |= new
        assert current.horizon >= now + ahead_days * DAY
        # Nothing wholly expired is kept: an expired envelope waits at most one period.
        first = current.periods[0].upper
        assert first is not None and first - 1 > now
        # What `expired` takes (new envelopes already expired) has expired indeed.
        assert current.first_kept - 1 <= now
