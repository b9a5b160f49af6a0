from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.core.cursors import MAX_NODE_ID, MAX_SEQUENCE_ID, Cursor, out_of_range
from xnode.core.envelopes import cursor_from_proto
from xnode.core.errors import Reason, Rejected
from xnode.core.query import EnvelopeQuery

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


def test_numbers_beyond_the_store_are_refused_naming_the_field() -> None:
    assert out_of_range(MAX_NODE_ID, MAX_SEQUENCE_ID) is None
    assert "node id" in (out_of_range(MAX_NODE_ID + 1) or "")
    assert "sequence id" in (out_of_range(1, MAX_SEQUENCE_ID + 1) or "")
    message = envelopes_pb2.Cursor(node_id_to_sequence_id={100: MAX_SEQUENCE_ID + 1})
    with pytest.raises(Rejected) as err:
        cursor_from_proto(message, "filter.last_seen")
    assert err.value.reason is Reason.MALFORMED
    assert str(err.value).startswith("filter.last_seen: sequence id")
    with pytest.raises(Rejected) as err:
        EnvelopeQuery.validated([], [100, MAX_NODE_ID + 1], Cursor())
    assert str(err.value).startswith("originator_node_ids[1]: node id")
