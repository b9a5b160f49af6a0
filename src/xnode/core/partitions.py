"""The envelope table's partitions by expiry (migration 0009, docs/operations.md "Retention"):
which periods to add ahead of time and which have wholly expired, from the bounds Postgres
reports. Pure: the store reads the bounds and runs the statements.

Layout, in expiry order: `expired` (MINVALUE up to the first period), the periods, `later`
(the last period's end up to MAXVALUE), and the DEFAULT partition for what never expires.
An envelope is expired once its expiry is at or before now (xnode.core.retention), so a
period [lower, upper) has wholly expired once upper - 1 <= now."""

from __future__ import annotations

import itertools
import re
import time
from dataclasses import dataclass, field

from xnode.core.constants import SECONDS_PER_DAY

TABLE = "originator_envelopes"
EXPIRED = f"{TABLE}_expired"
LATER = f"{TABLE}_later"
NEVER = f"{TABLE}_never"
DEFAULT_PERIOD_DAYS = 30
DEFAULT_AHEAD_DAYS = 200  # past the XIP's default retention (183 days)

_RANGE = re.compile(r"FOR VALUES FROM \((.+)\) TO \((.+)\)")


@dataclass
class Maintenance:
    """What one run did; `skipped` when another process held the lock."""

    added: list[str] = field(default_factory=list)
    moved: int = 0  # rows of `later` moved into added periods
    dropped: list[str] = field(default_factory=list)
    keys_released: int = 0
    skipped: bool = False


class LayoutError(ValueError):
    """The partitions are not the layout this node keeps; nothing is changed."""


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    lower: int | None  # None: MINVALUE
    upper: int | None  # None: MAXVALUE


@dataclass(frozen=True, slots=True)
class Layout:
    expired: Partition
    periods: tuple[Partition, ...]
    later: Partition

    @property
    def first_kept(self) -> int:
        """Where `expired` ends: every envelope below it has expired."""
        assert self.expired.upper is not None
        return self.expired.upper

    @property
    def horizon(self) -> int:
        """Where `later` begins."""
        assert self.later.lower is not None
        return self.later.lower


def _bound(text: str) -> int | None:
    if text in ("MINVALUE", "MAXVALUE"):
        return None
    return int(text.strip("'"))


def parse_bound(name: str, bound: str) -> Partition | None:
    """A range partition from `pg_get_expr(relpartbound)`; None for the DEFAULT one."""
    if bound == "DEFAULT":
        return None
    match = _RANGE.fullmatch(bound)
    if match is None:
        raise LayoutError(f"partition {name} has bounds {bound!r}, not a single-column range")
    return Partition(name, _bound(match[1]), _bound(match[2]))


def layout(partitions: list[Partition]) -> Layout:
    """The layout the range partitions make, checked contiguous from MINVALUE to MAXVALUE."""
    ordered = sorted(partitions, key=lambda p: -(2**63) if p.lower is None else p.lower)
    if len(ordered) < 2 or ordered[0].lower is not None or ordered[-1].upper is not None:
        raise LayoutError(f"{TABLE} partitions do not run from MINVALUE to MAXVALUE: {ordered}")
    for before, after in itertools.pairwise(ordered):
        if before.upper != after.lower:
            raise LayoutError(f"{TABLE} partitions {before.name} and {after.name} do not meet")
    return Layout(ordered[0], tuple(ordered[1:-1]), ordered[-1])


def period_name(lower: int) -> str:
    return f"{TABLE}_" + time.strftime("%Y%m%d", time.gmtime(lower))


def periods_to_add(
    current: Layout, now: int, ahead_days: int, period_days: int
) -> list[tuple[int, int]]:
    """New periods from the horizon until `ahead_days` past now, aligned to whole periods
    since the epoch (the first one shorter if the period changed)."""
    period = period_days * SECONDS_PER_DAY
    target = -(-(now + ahead_days * SECONDS_PER_DAY) // period) * period
    added = []
    lower = current.horizon
    while lower < target:
        upper = (lower // period + 1) * period
        added.append((lower, upper))
        lower = upper
    return added


def periods_to_drop(current: Layout, now: int) -> list[Partition]:
    """The periods whose every envelope has expired at `now` (a prefix of them)."""
    dropped = []
    for p in current.periods:
        assert p.upper is not None
        if p.upper - 1 > now:
            break
        dropped.append(p)
    return dropped
