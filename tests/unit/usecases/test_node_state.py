"""The node's vector clock and fanout after each kind of commit."""

from __future__ import annotations

from tests.unit.usecases.fakes import MemoryStore
from xnode.core.cursors import Cursor
from xnode.core.envelopes import IndexedEnvelope, StoredEnvelope
from xnode.usecases.fanout import Listener
from xnode.usecases.node_state import NodeState

TOPIC = b"\x00" + b"g" * 16


def _listener(state: NodeState, *originators: int) -> Listener:
    listener = Listener(originators=frozenset(originators))
    state.fanout.register(listener)
    return listener


def _taken(listener: Listener) -> list[bytes]:
    return [e.raw for batch in listener.take() for e in batch.envelopes]


async def test_originated_batches_advance_this_node_and_reach_subscribers() -> None:
    state = NodeState(100, Cursor(), MemoryStore().originator_range)
    listener = _listener(state, 100)
    await state.originated([IndexedEnvelope(100, s, 0, TOPIC, 0, None, b"%d" % s) for s in (1, 2)])
    assert state.vector_clock() == Cursor.of({100: 2})
    assert _taken(listener) == [b"1", b"2"]


async def test_stored_envelopes_advance_each_originator() -> None:
    state = NodeState(100, Cursor.of({200: 1}), MemoryStore().originator_range)
    listener = _listener(state, 200)
    await state.stored([StoredEnvelope(200, 2, TOPIC, b"b"), StoredEnvelope(300, 4, TOPIC, b"c")])
    assert state.vector_clock() == Cursor.of({200: 2, 300: 4})
    assert _taken(listener) == [b"b"]


async def test_commits_of_other_processes_are_fetched_and_delivered() -> None:
    store = MemoryStore()
    store.rows += [StoredEnvelope(100, s, TOPIC, b"%d" % s) for s in (1, 2, 3)]
    state = NodeState(100, Cursor.of({100: 1}), store.originator_range)
    listener = _listener(state, 100)
    await state.committed_elsewhere({100: 3})
    assert state.vector_clock() == Cursor.of({100: 3})
    assert _taken(listener) == [b"2", b"3"]


async def test_a_rewind_lowers_the_clock_and_redelivers_replacements() -> None:
    state = NodeState(100, Cursor.of({0: 5}), MemoryStore().originator_range)
    listener = _listener(state, 0)
    await state.rewound({0: 3})
    assert state.vector_clock() == Cursor.of({0: 3})
    await state.stored([StoredEnvelope(0, 4, TOPIC, b"new4")])
    assert _taken(listener) == [b"new4"]
