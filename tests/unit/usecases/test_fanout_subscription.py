"""Live delivery and the catch-up to live switch-over, over an in-memory store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tests.unit.usecases.fakes import budgeted
from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.query import EnvelopeQuery
from xnode.usecases.fanout import Fanout
from xnode.usecases.subscription import Delivery, Phase, Subscription

TOPIC = b"\x00" + b"g" * 16


class MemoryStore:
    def __init__(self) -> None:
        self.rows: list[StoredEnvelope] = []
        self.read_gate: asyncio.Event | None = None

    def add(self, node: int, seq: int, topic: bytes = TOPIC) -> StoredEnvelope:
        env = StoredEnvelope(node, seq, topic, f"{node}:{seq}".encode())
        self.rows.append(env)
        return env

    async def query(self, query: EnvelopeQuery, limit: int) -> list[StoredEnvelope]:
        if self.read_gate is not None:
            await self.read_gate.wait()
        hits = [
            e
            for e in self.rows
            if (e.topic in query.topics or e.originator_node_id in query.originators)
            and e.sequence_id > query.cursor[e.originator_node_id]
        ]
        return sorted(hits, key=lambda e: (e.originator_node_id, e.sequence_id))[:limit]

    async def query_within(
        self, query: EnvelopeQuery, limit: int, budget: int
    ) -> tuple[list[StoredEnvelope], bool]:
        return budgeted(await self.query(query, limit), budget)

    async def newest(self, topics: Sequence[bytes], budget: int) -> list[bytes | None]:
        raise AssertionError("subscriptions never ask for the newest envelope")

    async def vector_clock(self) -> Cursor:
        return Cursor(
            {
                e.originator_node_id: e.sequence_id
                for e in sorted(self.rows, key=lambda e: e.sequence_id)
            }
        )

    async def fetch_range(self, node: int, after: int, up_to: int) -> list[StoredEnvelope]:
        return sorted(
            (
                e
                for e in self.rows
                if e.originator_node_id == node and after < e.sequence_id <= up_to
            ),
            key=lambda e: e.sequence_id,
        )


def keys(deliveries: list[Delivery]) -> list[tuple[int, int]]:
    return [(e.originator_node_id, e.sequence_id) for d in deliveries for e in d.envelopes]


async def collect(sub: Subscription, count: int) -> list[Delivery]:
    got: list[Delivery] = []
    async for delivery in sub.deliveries():
        got.append(delivery)
        if len(keys(got)) >= count:
            break
    return got


async def test_switch_over_has_no_gap_and_no_duplicate() -> None:
    store = MemoryStore()
    for seq in range(1, 6):
        store.add(100, seq)
    fanout = Fanout(store.fetch_range, Cursor({100: 5}))
    store.read_gate = asyncio.Event()
    sub = Subscription(
        [EnvelopeQuery((TOPIC,), (), Cursor({100: 2}))], store.query_within, fanout, page_size=2
    )
    task = asyncio.create_task(collect(sub, 6))
    await asyncio.sleep(0.01)  # registered, catch-up read blocked
    # Commits land while the catch-up read is in flight: they are both in the store and live.
    await fanout.committed([store.add(100, 6), store.add(100, 7)])
    store.read_gate.set()
    await asyncio.sleep(0.01)
    await fanout.committed([store.add(100, 8)])
    got = await asyncio.wait_for(task, 5)
    assert keys(got) == [(100, s) for s in range(3, 9)]
    assert any(d.phase is Phase.CAUGHT_UP for d in got)


async def test_catch_up_reads_stop_at_the_byte_budget_and_go_on_from_there() -> None:
    """Each catch-up read holds at most the budget's bytes (always one envelope): a page
    the budget cut is followed by the next, though it held fewer than page_size."""
    store = MemoryStore()
    for seq in range(1, 6):
        store.add(100, seq)  # b"100:1" ...: 5 bytes each
    sub = Subscription(
        [EnvelopeQuery((TOPIC,), (), Cursor())],
        store.query_within,
        Fanout(store.fetch_range, Cursor({100: 5})),
        page_size=500,
        budget=11,
    )
    stream = sub.deliveries()
    pages = [await anext(stream) for _ in range(3)]
    assert [(d.phase, [e.sequence_id for e in d.envelopes]) for d in pages] == [
        (Phase.CATCHUP, [1, 2]),
        (Phase.CATCHUP, [3, 4]),
        (Phase.CATCHUP, [5]),
    ]
    assert (await anext(stream)).phase is Phase.CAUGHT_UP
    await stream.aclose()


async def test_fanout_fills_gaps_from_the_store_before_later_envelopes() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    sub = Subscription([EnvelopeQuery((), (200,), Cursor())], store.query_within, fanout)
    task = asyncio.create_task(collect(sub, 3))
    await asyncio.sleep(0.01)
    store.add(200, 1)
    store.add(200, 2)  # committed by another process, not yet announced
    await fanout.committed([store.add(200, 3)])
    assert keys(await asyncio.wait_for(task, 5)) == [(200, 1), (200, 2), (200, 3)]


async def test_other_process_commits_are_fetched_and_delivered_once() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    sub = Subscription([EnvelopeQuery((TOPIC,), (), Cursor())], store.query_within, fanout)
    task = asyncio.create_task(collect(sub, 4))
    await asyncio.sleep(0.01)
    for seq in range(1, 4):
        store.add(300, seq)
    await fanout.caught_up_to({300: 3})
    await fanout.caught_up_to({300: 3})  # a repeated notice changes nothing
    await fanout.committed([store.add(300, 4)])
    assert keys(await asyncio.wait_for(task, 5)) == [(300, 1), (300, 2), (300, 3), (300, 4)]


async def test_other_process_commits_are_not_read_back_when_nobody_listens() -> None:
    """Each worker of a node hears of every other worker's commits: with no subscriber
    that could want them, they are not fetched; a later subscriber catches up from the store."""
    store = MemoryStore()
    fetched: list[tuple[int, int, int]] = []

    async def fetch_range(node: int, after: int, up_to: int) -> list[StoredEnvelope]:
        fetched.append((node, after, up_to))
        return await store.fetch_range(node, after, up_to)

    fanout = Fanout(fetch_range, Cursor())
    for seq in range(1, 4):
        store.add(300, seq)
    await fanout.caught_up_to({300: 3})
    assert fetched == []
    sub = Subscription([EnvelopeQuery((TOPIC,), (), Cursor())], store.query_within, fanout)
    task = asyncio.create_task(collect(sub, 5))
    deadline = asyncio.get_running_loop().time() + 5
    while fanout.listener_count == 0:  # registered before its catch-up read
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0)
    for seq in (4, 5):
        store.add(300, seq)
    await fanout.caught_up_to({300: 5})
    assert fetched == [(300, 3, 5)]
    assert keys(await asyncio.wait_for(task, 5)) == [(300, s) for s in range(1, 6)]


async def test_keepalive_when_idle() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    sub = Subscription(
        [EnvelopeQuery((TOPIC,), (), Cursor())], store.query_within, fanout, keepalive_s=0.05
    )
    stream = sub.deliveries()
    phases = [(await stream.__anext__()).phase for _ in range(3)]
    await stream.aclose()
    assert phases == [Phase.CAUGHT_UP, Phase.KEEPALIVE, Phase.KEEPALIVE]


async def test_close_ends_the_subscription() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    sub = Subscription([EnvelopeQuery((TOPIC,), (), Cursor())], store.query_within, fanout)
    stream = sub.deliveries()
    await stream.__anext__()
    sub.close()
    rest = [d async for d in stream]
    assert rest == [] and fanout.listener_count == 0


async def test_expired_envelopes_are_not_delivered_live() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    sub = Subscription([EnvelopeQuery((), (100,), Cursor())], store.query_within, fanout)
    stream = sub.deliveries()
    assert (await stream.__anext__()).phase is Phase.CAUGHT_UP
    expired = StoredEnvelope(100, 1, TOPIC, b"old", expiry=1)
    fresh = StoredEnvelope(100, 2, TOPIC, b"new", expiry=2**40)
    await fanout.committed([expired, fresh])
    delivery = await asyncio.wait_for(stream.__anext__(), 5)
    await stream.aclose()
    assert [e.raw for e in delivery.envelopes] == [b"new"]
