"""Range-based set reconciliation of one originator's log between two nodes.

Each side holds a set of (sequence id, leaf hash). A range's fingerprint is its count and the
XOR of the first 8 bytes of its leaf hashes (a leaf hash commits to the whole signed envelope,
sequence id included), cheap for the store to aggregate over an index range. The side that
starts asks the other for the fingerprints of some ranges, compares them with its own and,
where they differ, either splits the range (`fanout` parts) or, once it is small, asks for
its items and compares them one by one. Identical logs settle in one round trip; logs that
differ in d ranges of a log of n take about log_fanout(n / small) + 1 round trips, each
carrying at most d * fanout fingerprints.

A leaf present on both sides with different hashes is a fork: two envelopes signed for one
(originator, sequence id). `Difference` names them; the caller fetches both and keeps the
evidence (xnode.core.forks decides which one stays in the log)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

FINGERPRINT_BYTES = 8
DEFAULT_FANOUT = 16
DEFAULT_SMALL = 64  # ranges holding at most this many items on either side are listed


@dataclass(frozen=True, slots=True, order=True)
class SequenceRange:
    """Sequence ids first..last, both included."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 1 <= self.first <= self.last:
            raise ValueError(f"bad sequence range {self.first}..{self.last}")

    @property
    def span(self) -> int:
        return self.last - self.first + 1

    def split(self, parts: int) -> list[SequenceRange]:
        """Up to `parts` contiguous ranges of (nearly) equal span covering this one."""
        parts = max(1, min(parts, self.span))
        step, extra = divmod(self.span, parts)
        out, first = [], self.first
        for i in range(parts):
            last = first + step - 1 + (1 if i < extra else 0)
            out.append(SequenceRange(first, last))
            first = last + 1
        return out


def fingerprint_part(leaf_hash: bytes) -> int:
    """The signed 64-bit integer a leaf adds (by XOR) to its range's fingerprint; signed so
    that Postgres can keep and aggregate it as a bigint (`bit_xor`)."""
    return int.from_bytes(leaf_hash[:FINGERPRINT_BYTES], "big", signed=True)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    count: int = 0
    xor: int = 0

    @classmethod
    def of(cls, leaf_hashes: Iterable[bytes]) -> Fingerprint:
        count, xor = 0, 0
        for leaf in leaf_hashes:
            count += 1
            xor ^= fingerprint_part(leaf)
        return cls(count, xor)


@dataclass(frozen=True, slots=True)
class Step:
    """What to ask the peer next: fingerprints of `split` ranges, items of `listed` ones."""

    split: list[SequenceRange] = field(default_factory=list)
    listed: list[SequenceRange] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return not self.split and not self.listed


def compare(
    ranges: Sequence[SequenceRange],
    mine: Sequence[Fingerprint],
    theirs: Sequence[Fingerprint],
    fanout: int = DEFAULT_FANOUT,
    small: int = DEFAULT_SMALL,
) -> Step:
    """The next step after both sides' fingerprints of `ranges` are known."""
    if not len(ranges) == len(mine) == len(theirs):
        raise ValueError("one fingerprint per range on each side")
    step = Step()
    for r, a, b in zip(ranges, mine, theirs, strict=True):
        if a == b:
            continue
        count = max(a.count, b.count)
        if count <= small or r.span <= small:
            step.listed.append(r)
        else:
            # No more parts than it takes to list them next (each range asked costs the
            # store about as much as reading a few hundred leaves).
            step.split.extend(r.split(min(fanout, -(-count // small))))
    return step


@dataclass(frozen=True, slots=True)
class Difference:
    """Sequence ids to fetch from the peer, to offer it, and held with other content (forks)."""

    missing_here: list[int]
    missing_there: list[int]
    forks: list[int]


def difference(mine: Mapping[int, bytes], theirs: Mapping[int, bytes]) -> Difference:
    """Compares two item lists (sequence id -> leaf hash) of the same ranges."""
    return Difference(
        sorted(s for s in theirs if s not in mine),
        sorted(s for s in mine if s not in theirs),
        sorted(s for s, h in theirs.items() if s in mine and mine[s] != h),
    )


MAX_SEQUENCE_ID = 2**63 - 1  # the store keeps sequence ids as bigint


def runs(sequence_ids: Iterable[int]) -> list[SequenceRange]:
    """Contiguous runs of sequence ids, in order."""
    out: list[SequenceRange] = []
    for s in sorted(set(sequence_ids)):
        if out and out[-1].last + 1 == s:
            out[-1] = SequenceRange(out[-1].first, s)
        else:
            out.append(SequenceRange(s, s))
    return out


@dataclass
class Session:
    """One reconciliation of an originator's log with one peer, as pure steps (the
    anti-entropy task does the I/O): ask the peer for the fingerprints of `asking`, hand
    both sides' to `answer`, which says what to list (compare items) and what to fetch
    whole, and sets up the next ask. Done when nothing is left to ask.

    The first ask is the prefix this node knows of (1..top) and the open tail above it, so
    identical logs settle in one round trip. A differing tail is bounded by the larger of
    its counts and asked again (the peer's extra leaves usually follow on at once).

    `held` is the highest sequence id held here. Leaves held past a gap (top < held) are
    asked for at once in the parts the tail would be split into next round: a log with gaps
    differs there, and asking that stretch whole first would cost a round trip and a read
    of all of it on both sides.

    `name_max`: a differing range where the peer holds more and this node lacks at most
    this many sequence ids is `named` instead of split: this node names the ids it lacks
    there (from its own index, no round trip) and fetches the peer's leaves for those ids
    (their envelopes, no listing), and `settles` says whether they explain the whole
    difference (they do for gaps; a fork, an expired or refused envelope, or a leaf held here
    and not there does not). A range they do not settle is handed back with `reopen`, its
    parts to list go to `listed`, and it descends as any other. Gaps found this way cost no
    round trip beyond the first."""

    top: int
    fanout: int = DEFAULT_FANOUT
    small: int = DEFAULT_SMALL
    held: int = 0
    name_max: int = 0
    asking: list[SequenceRange] = field(default_factory=list)
    round_trips: int = 0
    named: dict[SequenceRange, tuple[Fingerprint, Fingerprint]] = field(default_factory=dict)
    listed: list[SequenceRange] = field(default_factory=list)  # reopened, to list next

    def __post_init__(self) -> None:
        head = [SequenceRange(1, self.top)] if self.top > 0 else []
        tail = SequenceRange(self.top + 1, MAX_SEQUENCE_ID)
        if self.held > self.top:
            self.asking = [*head, *_bound_tail(tail, self.held - self.top, self.fanout, self.small)]
        else:
            self.asking = [*head, tail]

    @property
    def done(self) -> bool:
        return not self.asking

    def answer(self, mine: Sequence[Fingerprint], theirs: Sequence[Fingerprint]) -> Fetch:
        """Both sides' fingerprints of `asking`: what to fetch or list now."""
        self.round_trips += 1
        bounded: list[tuple[SequenceRange, Fingerprint, Fingerprint]] = []
        following: list[SequenceRange] = []
        fetch = Fetch()
        for r, a, b in zip(self.asking, mine, theirs, strict=True):
            if r.last == MAX_SEQUENCE_ID and a != b:
                following += _bound_tail(r, max(a.count, b.count), self.fanout, self.small)
            elif a != b and 0 < a.count < b.count and r.span - a.count <= self.name_max:
                self.named[r] = (a, b)
                fetch.named.append(r)
            else:
                bounded.append((r, a, b))
        ranges = [r for r, _, _ in bounded]
        step = compare(
            ranges, [a for _, a, _ in bounded], [b for _, _, b in bounded], self.fanout, self.small
        )
        counts = {r: a.count for r, a, _ in bounded}
        for r in step.listed:
            (fetch.whole if counts[r] == 0 else fetch.listed).append(r)
        # The asked ranges are disjoint: a part's parent is the last one starting at or
        # before it (a bisection: a scan per part was quadratic in wide rounds).
        parents = sorted(ranges)
        firsts = [p.first for p in parents]
        for r in step.split:  # nothing held here under the parent: fetch it all, no descent
            parent = parents[bisect.bisect_right(firsts, r.first) - 1]
            if counts[parent] == 0:
                fetch.whole.append(r)
            else:
                following.append(r)
        self.asking = following
        fetch.whole = runs_of(fetch.whole)
        return fetch

    def settles(self, r: SequenceRange, listed: Mapping[int, bytes]) -> bool:
        """Whether the peer's leaves `listed` for the ids this node lacks in the named range
        `r` make this node's fingerprint of it the peer's."""
        mine, theirs = self.named[r]
        added = Fingerprint.of(listed.values())
        return Fingerprint(mine.count + added.count, mine.xor ^ added.xor) == theirs

    def settle(self, arrived: Mapping[int, bytes]) -> None:
        """After the named ranges' ids were fetched: `arrived` (sequence id -> leaf) is what
        came. Each named range settles or is reopened (its parts to list go to `listed`);
        naming then stops, so what is asked next descends. One pass over `arrived`, not one
        over each range's span (thousands of ids each in a large repair)."""
        named = sorted(self.named)
        firsts = [r.first for r in named]
        found: dict[SequenceRange, dict[int, bytes]] = {r: {} for r in named}
        for sequence_id, leaf in arrived.items():
            at = bisect.bisect_right(firsts, sequence_id) - 1
            if at >= 0 and sequence_id <= named[at].last:
                found[named[at]][sequence_id] = leaf
        for r, leaves in found.items():
            if not self.settles(r, leaves):
                self.listed += self.reopen(r)
        self.named.clear()
        self.name_max = 0

    def reopen(self, r: SequenceRange) -> list[SequenceRange]:
        """A named range the leaves fetched for it did not settle: descends (its parts are asked
        next round); returns it when it is small enough to list at once instead."""
        mine, theirs = self.named.pop(r)
        step = compare([r], [mine], [theirs], self.fanout, self.small)
        self.asking += step.split
        return step.listed


def runs_of(ranges: Iterable[SequenceRange]) -> list[SequenceRange]:
    """Adjacent ranges merged."""
    out: list[SequenceRange] = []
    for r in sorted(ranges):
        if out and out[-1].last + 1 == r.first:
            out[-1] = SequenceRange(out[-1].first, r.last)
        else:
            out.append(r)
    return out


def _bound_tail(tail: SequenceRange, count: int, fanout: int, small: int) -> list[SequenceRange]:
    """A differing open tail, bounded by the larger side's count, and the rest. A bounded
    tail too large to list is asked for in parts at once, saving a round trip and, over a
    large log, a read of all its tiles: asked whole, it would be split next round unless
    the difference lay past it."""
    end = min(tail.first + count - 1, MAX_SEQUENCE_ID - 1)
    bounded = SequenceRange(tail.first, end)
    # A tail wide enough to be split twice is asked for in fanout^2 parts: one round trip
    # and one more read of every tile of it saved, for fanout^2 fingerprints (~10 KiB).
    wide = count > small * fanout * fanout
    parts = bounded.split(fanout * fanout if wide else fanout) if count > small else [bounded]
    return [*parts, SequenceRange(end + 1, MAX_SEQUENCE_ID)]


@dataclass
class Fetch:
    """Ranges whose items both sides list and compare, ranges held only by the peer, fetched
    whole, and ranges where this node names the ids it lacks (`Session.name_max`)."""

    listed: list[SequenceRange] = field(default_factory=list)
    whole: list[SequenceRange] = field(default_factory=list)
    named: list[SequenceRange] = field(default_factory=list)
