from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xnode.core.cursors import Cursor

entries = st.dictionaries(st.integers(0, 1000), st.integers(0, 2**64 - 1), max_size=8)


def test_missing_entry_is_zero_and_zero_entries_vanish() -> None:
    cursor = Cursor({100: 0, 200: 5})
    assert cursor[100] == 0 and cursor[300] == 0 and cursor[200] == 5
    assert cursor == Cursor({200: 5})
    assert len(cursor) == 1


@given(entries, entries)
def test_merge_is_pointwise_max_and_covers_both(a: dict[int, int], b: dict[int, int]) -> None:
    merged = Cursor(a).merge(b)
    assert merged.covers(a) and merged.covers(b)
    for node in set(a) | set(b):
        assert merged[node] == max(a.get(node, 0), b.get(node, 0))


@given(entries, entries)
def test_merge_is_commutative_and_idempotent(a: dict[int, int], b: dict[int, int]) -> None:
    assert Cursor(a).merge(b) == Cursor(b).merge(a)
    assert Cursor(a).merge(a) == Cursor(a)


@given(entries, entries)
def test_lagging_lists_exactly_what_is_not_covered(a: dict[int, int], b: dict[int, int]) -> None:
    behind = Cursor(a).lagging(b)
    assert Cursor(a).covers(b) == (not behind)
    assert all(seq > Cursor(a)[node] for node, seq in behind.items())


@given(entries, st.integers(0, 1000), st.integers(0, 2**63))
def test_advanced_never_moves_back(a: dict[int, int], node: int, seq: int) -> None:
    cursor = Cursor(a).advanced(node, seq)
    assert cursor[node] == max(seq, Cursor(a)[node])
    assert cursor.covers(a)
