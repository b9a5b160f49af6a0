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
        if max(a.count, b.count) <= small or r.span <= small:
            step.listed.append(r)
        else:
            step.split.extend(r.split(fanout))
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
