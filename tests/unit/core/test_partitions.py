"""Which envelope partitions to add and drop (xnode.core.partitions)."""

from __future__ import annotations

import pytest

from xnode.core.partitions import (
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
