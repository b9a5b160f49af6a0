"""Cursors: sparse maps from originator node id to sequence id, missing = 0 (XIP-49 3.2.2)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

MAX_UINT32 = 2**32 - 1
MAX_UINT64 = 2**64 - 1
# The wire allows uint32 node ids and uint64 sequence ids; the store keeps them as Postgres
# integer and bigint. Client input beyond these is refused before any query (no id is ever
# assigned that high), so the database never sees an out-of-range parameter.
MAX_NODE_ID = 2**31 - 1
MAX_SEQUENCE_ID = 2**63 - 1


def out_of_range(node_id: int, sequence_id: int = 0) -> str | None:
    """Why (node_id, sequence_id) cannot name a stored envelope, or None."""
    if node_id > MAX_NODE_ID:
        return f"node id {node_id} is beyond the largest node id {MAX_NODE_ID}"
    if sequence_id > MAX_SEQUENCE_ID:
        return f"sequence id {sequence_id} is beyond the largest sequence id {MAX_SEQUENCE_ID}"
    return None


@dataclass(frozen=True, slots=True)
class Cursor(Mapping[int, int]):
    """An immutable vector clock; zero entries are dropped so equal cursors compare equal."""

    _entries: Mapping[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        entries = {int(k): int(v) for k, v in self._entries.items() if v}
        for node_id, seq in entries.items():
            if not 0 <= node_id <= MAX_UINT32 or not 0 <= seq <= MAX_UINT64:
                raise ValueError(f"cursor entry {node_id}:{seq} out of range")
        object.__setattr__(self, "_entries", entries)

    @classmethod
    def of(cls, entries: Mapping[int, int] | Iterable[tuple[int, int]] = ()) -> Cursor:
        return cls(dict(entries))

    def __getitem__(self, node_id: int) -> int:
        return self._entries.get(node_id, 0)

    def __iter__(self) -> Iterator[int]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._entries

    def __hash__(self) -> int:
        return hash(frozenset(self._entries.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Cursor):
            return self._entries == other._entries
        return NotImplemented

    def get(self, node_id: int, default: int = 0) -> int:  # type: ignore[override]
        return self._entries.get(node_id, default)

    def covers(self, other: Mapping[int, int]) -> bool:
        """True when this cursor is at or past `other` for every originator."""
        return all(self._entries.get(n, 0) >= s for n, s in other.items())

    def lagging(self, other: Mapping[int, int]) -> dict[int, int]:
        """The entries of `other` that are ahead of this cursor."""
        return {n: s for n, s in other.items() if s > self._entries.get(n, 0)}

    def merge(self, other: Mapping[int, int]) -> Cursor:
        merged = dict(self._entries)
        for n, s in other.items():
            if s > merged.get(n, 0):
                merged[n] = s
        return Cursor(merged)

    def advanced(self, node_id: int, seq: int) -> Cursor:
        if seq <= self._entries.get(node_id, 0):
            return self
        return Cursor({**self._entries, node_id: seq})

    def to_dict(self) -> dict[int, int]:
        return dict(self._entries)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}:{s}" for n, s in sorted(self._entries.items()))
        return f"Cursor({{{inner}}})"
