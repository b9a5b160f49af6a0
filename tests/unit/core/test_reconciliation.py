"""Range-based reconciliation finds exactly the difference of two logs, in few round trips."""

from __future__ import annotations

import itertools
import math

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

Log = dict[int, bytes]


def fingerprint(log: Log, r: SequenceRange) -> Fingerprint:
    return Fingerprint.of(h for s, h in log.items() if r.first <= s <= r.last)


def items(log: Log, r: SequenceRange) -> Log:
    return {s: h for s, h in log.items() if r.first <= s <= r.last}


def reconcile(mine: Log, theirs: Log, top: int) -> tuple[Difference, int]:
    """Drives the protocol as the anti-entropy task does; counts round trips to the peer."""
    ranges, trips = [SequenceRange(1, top)], 0
    here: Log = {}
    there: Log = {}
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


def log_of(seqs: set[int], salt: bytes = b"") -> Log:
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


def drive(mine: Log, theirs: Log, held: bool = True) -> tuple[set[int], set[int], int]:
    """Runs a Session as the anti-entropy task does: (missing here, forks, round trips). Its
    top is the tree size (the contiguous prefix held here); `held`: it is told the highest
    leaf held too."""
    top = 0
    while top + 1 in mine:
        top += 1
    session = Session(top, held=max(mine, default=0) if held else 0)
    missing: set[int] = set()
    forks: set[int] = set()
    while not session.done:
        asked = session.asking
        fetch = session.answer(
            [fingerprint(mine, r) for r in asked], [fingerprint(theirs, r) for r in asked]
        )
        for r in fetch.whole:
            assert not items(mine, r)
            missing |= set(items(theirs, r))
        for r in fetch.listed:
            found = difference(items(mine, r), items(theirs, r))
            missing |= set(found.missing_here)
            forks |= set(found.forks)
    return missing, forks, session.round_trips


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


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 3000),
    st.sets(st.integers(1, 3000), max_size=200),
    st.sets(st.integers(1, 3000), max_size=200),
    st.sets(st.integers(1, 3000), max_size=5),
)
def test_a_session_finds_exactly_what_is_missing_here_and_the_forks(
    top: int, lost_here: set[int], lost_there: set[int], forked: set[int]
) -> None:
    base = {s: leaf_hash(s.to_bytes(8, "big")) for s in range(1, top + 1)}
    mine = {s: h for s, h in base.items() if s not in lost_here}
    theirs = {s: h for s, h in base.items() if s not in lost_there}
    for s in forked & set(mine) & set(theirs):
        theirs[s] = leaf_hash(b"fork" + s.to_bytes(8, "big"))
    missing, forks, trips = drive(mine, theirs)
    assert missing == set(theirs) - set(mine)
    assert forks == {s for s in set(mine) & set(theirs) if mine[s] != theirs[s]}
    assert trips <= 2 * max(1, math.ceil(math.log2(top + 1))) + 2


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
