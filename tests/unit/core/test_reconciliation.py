"""Range-based reconciliation finds exactly the difference of two logs, in few round trips."""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left, bisect_right

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xnode.core.merkle import leaf_hash
from xnode.core.reconciliation import (
    Difference,
    Fingerprint,
    SequenceRange,
    Session,
    compare,
    difference,
    runs,
)


class Log(dict[int, bytes]):
    """Leaf hashes by sequence id, read by range through a sorted index of the ids (a scan of
    a large log for each of many ranges would make the large-log tests crawl)."""

    _ids: list[int] | None = None

    def within(self, r: SequenceRange) -> dict[int, bytes]:
        if self._ids is None or len(self._ids) != len(self):
            self._ids = sorted(self)
        ids = self._ids[bisect_left(self._ids, r.first) : bisect_right(self._ids, r.last)]
        return {s: self[s] for s in ids}


def fingerprint(log: Log, r: SequenceRange) -> Fingerprint:
    return Fingerprint.of(items(log, r).values())


def items(log: Log, r: SequenceRange) -> dict[int, bytes]:
    return log.within(r)


def reconcile(mine: dict[int, bytes], theirs: dict[int, bytes], top: int) -> tuple[Difference, int]:
    """Drives the protocol as the anti-entropy task does; counts round trips to the peer."""
    mine, theirs = Log(mine), Log(theirs)
    ranges, trips = [SequenceRange(1, top)], 0
    here: dict[int, bytes] = {}
    there: dict[int, bytes] = {}
    while ranges:
        trips += 1  # the peer answers fingerprints (and items of listed ranges) at once
        step = compare(
            ranges, [fingerprint(mine, r) for r in ranges], [fingerprint(theirs, r) for r in ranges]
        )
        for r in step.listed:
            here |= items(mine, r)
            there |= items(theirs, r)
        ranges = step.split
    return difference(here, there), trips


def log_of(seqs: set[int], salt: bytes = b"") -> dict[int, bytes]:
    return {s: leaf_hash(salt + s.to_bytes(8, "big")) for s in seqs}


def test_split_covers_the_range_without_overlap() -> None:
    parts = SequenceRange(1, 100).split(16)
    assert parts[0].first == 1 and parts[-1].last == 100 and len(parts) == 16
    assert all(a.last + 1 == b.first for a, b in itertools.pairwise(parts))
    assert SequenceRange(5, 7).split(16) == [SequenceRange(s, s) for s in (5, 6, 7)]
    with pytest.raises(ValueError):
        SequenceRange(0, 3)


def test_identical_logs_settle_in_one_round_trip() -> None:
    log = log_of(set(range(1, 100_001)))
    found, trips = reconcile(log, dict(log), 100_000)
    assert found == Difference([], [], []) and trips == 1


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 5_000),
    st.sets(st.integers(1, 5_000), max_size=60),
    st.sets(st.integers(1, 5_000), max_size=60),
    st.sets(st.integers(1, 5_000), max_size=5),
)
def test_finds_exactly_what_differs(
    top: int, gone_here: set[int], gone_there: set[int], forked: set[int]
) -> None:
    everything = set(range(1, top + 1))
    mine = log_of(everything - gone_here)
    theirs = log_of(everything - gone_there)
    for s in forked & set(mine) & set(theirs):
        theirs[s] = leaf_hash(b"another envelope for the same id")
    found, trips = reconcile(mine, theirs, top)
    assert found.missing_here == sorted(set(theirs) - set(mine))
    assert found.missing_there == sorted(set(mine) - set(theirs))
    assert found.forks == sorted(forked & set(mine) & set(theirs))
    assert trips <= 2 * math.log2(top) + 2


def test_one_percent_of_a_large_log_in_few_round_trips() -> None:
    top = 200_000
    gaps = {s for start in range(1_000, top, 2_000) for s in range(start, start + 20)}
    mine = log_of(set(range(1, top + 1)) - gaps)
    theirs = log_of(set(range(1, top + 1)))
    found, trips = reconcile(mine, theirs, top)
    assert found.missing_here == sorted(gaps)
    assert trips <= 2 * math.log2(top)
    assert trips <= 6, trips


def drive(
    mine: dict[int, bytes], theirs: dict[int, bytes], held: bool = True, name_max: int = 0
) -> tuple[set[int], set[int], int]:
    """Runs a Session as the anti-entropy task does: (missing here, forks, round trips). Its
    top is the tree size (the contiguous prefix held here); `held`: it is told the highest
    leaf held too. A named range's listing counts as a round trip."""
    mine, theirs = Log(mine), Log(theirs)
    top = 0
    while top + 1 in mine:
        top += 1
    session = Session(top, held=max(mine, default=0) if held else 0, name_max=name_max)
    missing: set[int] = set()
    forks: set[int] = set()
    listings = 0
    while not session.done:
        asked = session.asking
        fetch = session.answer(
            [fingerprint(mine, r) for r in asked], [fingerprint(theirs, r) for r in asked]
        )
        for r in fetch.whole:
            assert not items(mine, r)
            missing |= set(items(theirs, r))
        listed = list(fetch.listed)
        listings += bool(fetch.named)
        for r in fetch.named:
            absent = {s for s in range(r.first, r.last + 1) if s not in mine}
            assert len(absent) <= name_max
            theirs_there = {s: h for s, h in items(theirs, r).items() if s in absent}
            if session.settles(r, theirs_there):
                del session.named[r]
                missing |= set(theirs_there)
            else:
                listed += session.reopen(r)
        for r in listed:
            found = difference(items(mine, r), items(theirs, r))
            missing |= set(found.missing_here)
            forks |= set(found.forks)
    return missing, forks, session.round_trips + listings


def test_runs_group_contiguous_ids() -> None:
    assert runs([5, 1, 2, 3, 7, 8]) == [
        SequenceRange(1, 3),
        SequenceRange(5, 5),
        SequenceRange(7, 8),
    ]


def test_identical_logs_settle_in_one_session_round_trip() -> None:
    log = {s: leaf_hash(s.to_bytes(8, "big")) for s in range(1, 100_001)}
    assert drive(log, dict(log)) == (set(), set(), 1)


def test_a_peer_ahead_is_caught_up_with_whole_fetches() -> None:
    theirs = {s: leaf_hash(s.to_bytes(8, "big")) for s in range(1, 5001)}
    mine = {s: h for s, h in theirs.items() if s <= 1000}
    missing, forks, trips = drive(mine, theirs)
    assert missing == set(range(1001, 5001)) and not forks and trips <= 3


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3000),
    st.sets(st.integers(1, 3000), max_size=200),
    st.sets(st.integers(1, 3000), max_size=200),
    st.sets(st.integers(1, 3000), max_size=5),
    st.sampled_from([0, 16, 4096]),
)
def test_a_session_finds_exactly_what_is_missing_here_and_the_forks(
    top: int, lost_here: set[int], lost_there: set[int], forked: set[int], name_max: int
) -> None:
    base = {s: leaf_hash(s.to_bytes(8, "big")) for s in range(1, top + 1)}
    mine = {s: h for s, h in base.items() if s not in lost_here}
    theirs = {s: h for s, h in base.items() if s not in lost_there}
    for s in forked & set(mine) & set(theirs):
        theirs[s] = leaf_hash(b"fork" + s.to_bytes(8, "big"))
    missing, forks, trips = drive(mine, theirs, name_max=name_max)
    assert missing == set(theirs) - set(mine)
    assert forks == {s for s in set(mine) & set(theirs) if mine[s] != theirs[s]}
    assert trips <= 2 * max(1, math.ceil(math.log2(top + 1))) + 2


def test_gaps_named_here_settle_in_one_round_trip_and_a_listing() -> None:
    """What repair does after a relay left gaps: this node names the ids it lacks in each
    differing part, the peer lists their leaves, and nothing descends."""
    top = 40_000
    gaps = {s for start in range(1_500, top, 4_000) for s in range(start, start + 30)}
    theirs = log_of(set(range(1, top + 1)))
    mine = {s: h for s, h in theirs.items() if s not in gaps}
    assert drive(mine, theirs, name_max=4096) == (gaps, set(), 2)


def test_a_fork_inside_a_named_range_reopens_it_and_is_found() -> None:
    top = 40_000
    gaps = set(range(10_000, 10_030))
    theirs = log_of(set(range(1, top + 1)))
    mine = {s: h for s, h in theirs.items() if s not in gaps}
    theirs[10_100] = leaf_hash(b"the other envelope")  # next to the gap, in the same part
    missing, forks, trips = drive(mine, theirs, name_max=4096)
    assert missing == gaps and forks == {10_100}
    assert trips > 2  # the named range did not settle: it descended


def test_a_leaf_held_only_here_inside_a_named_range_does_not_hide_a_gap() -> None:
    """Their count is larger, but one of the ids they lack is held here: the named ids'
    leaves alone do not make the fingerprints meet, and descending finds every gap."""
    top = 20_000
    theirs = log_of(set(range(1, top + 1)) - {5_050})
    mine = log_of(set(range(1, top + 1)) - set(range(5_000, 5_040)))
    missing, forks, _ = drive(mine, theirs, name_max=4096)
    assert missing == set(range(5_000, 5_040)) and not forks


def test_leaves_held_past_a_gap_are_asked_in_parts_at_once() -> None:
    """A log with gaps spread over it: one round trip and one read of all it holds past
    its first gap fewer than asking that stretch whole first."""
    top = 40_000  # past the gap: more than DEFAULT_SMALL * DEFAULT_FANOUT^2 leaves
    gaps = {s for start in range(1_500, top, 4_000) for s in range(start, start + 30)}
    theirs = log_of(set(range(1, top + 1)))
    mine = {s: h for s, h in theirs.items() if s not in gaps}
    missing, forks, trips = drive(mine, theirs)
    assert missing == gaps and not forks
    assert drive(mine, theirs, held=False) == (gaps, set(), trips + 1)


def test_a_differing_range_is_split_into_no_more_parts_than_listing_needs() -> None:
    r = SequenceRange(1, 1_000)
    # 200 items on the larger side: 4 parts of ~50 (each listable next), not 16 of ~12.
    step = compare([r], [Fingerprint(199, 1)], [Fingerprint(200, 2)])
    assert step.split == r.split(4) and not step.listed
    step = compare([r], [Fingerprint(999, 1)], [Fingerprint(1_000, 2)])
    assert step.split == r.split(16)
