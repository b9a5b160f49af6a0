"""Live delivery at saturation: one framing per batch for every stream, a stream's waiting
batches taken as one delivery, and a live stream that falls behind ended with its cursor."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from tests.unit.usecases.fakes import FixedClock
from tests.unit.usecases.test_fanout_subscription import TOPIC, MemoryStore
from xnode.core import wire
from xnode.core.cursors import Cursor
from xnode.core.errors import Reason, Rejected
from xnode.core.query import EnvelopeQuery
from xnode.usecases.fanout import MANY_STREAMS, OFFERS_PER_TURN, Fanout, Listener
from xnode.usecases.subscribe import Subscribe
from xnode.usecases.subscription import Delivery, FellBehind, Phase, Subscription

OTHER = b"\x00" + b"h" * 16


def subscription(
    store: MemoryStore, fanout: Fanout, topics: tuple[bytes, ...] = (TOPIC,)
) -> Subscription:
    return Subscription(
        [EnvelopeQuery(topics, (), Cursor())], store.query_within, fanout, max_lag_s=5
    )


async def live(sub: Subscription) -> AsyncIterator[Delivery]:
    stream = sub.deliveries()
    assert (await anext(stream)).phase is Phase.CAUGHT_UP
    return stream


async def test_a_batch_is_framed_once_for_every_stream_it_reaches() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    streams = [await live(subscription(store, fanout)) for _ in range(3)]
    await fanout.committed([store.add(100, 1), store.add(100, 2)])
    deliveries = [await anext(s) for s in streams]
    batches = [d.batches for d in deliveries]
    assert all(len(b) == 1 for b in batches)
    shared = batches[0][0]
    assert all(b[0] is shared for b in batches)  # one object, so one framing, for all three
    assert shared.framed is shared.framed
    assert shared.framed == wire.repeated(1, [b"100:1", b"100:2"])


async def test_a_listener_of_several_topics_gets_each_envelope_once_in_order() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    listener = Listener(topics=frozenset({TOPIC, OTHER}), originators=frozenset({100}))
    fanout.register(listener)
    await fanout.committed([store.add(100, 1), store.add(100, 2, OTHER), store.add(100, 3)])
    (batch,) = listener.take()
    assert [e.sequence_id for e in batch.envelopes] == [1, 2, 3]


async def test_a_slow_stream_takes_everything_waiting_as_one_delivery() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor())
    stream = await live(subscription(store, fanout))
    for seq in range(1, 6):  # five commits while the stream does not read
        await fanout.committed([store.add(100, seq)])
    delivery = await anext(stream)
    assert delivery.phase is Phase.LIVE and len(delivery.batches) == 5
    assert [e.sequence_id for e in delivery.envelopes] == [1, 2, 3, 4, 5]


async def test_a_live_stream_that_falls_behind_ends_with_its_cursor() -> None:
    store = MemoryStore()
    clock = FixedClock(1000)
    fanout = Fanout(store.fetch_range, Cursor(), clock)
    stream = await live(subscription(store, fanout))
    await fanout.committed([store.add(100, 1)])
    assert [e.sequence_id for e in (await anext(stream)).envelopes] == [1]
    await fanout.committed([store.add(100, 2)])  # waits from 1000 on
    clock.now = 1005
    await fanout.committed([store.add(100, 3)])  # 5 s: at the limit, still kept
    clock.now = 1006
    await fanout.committed([store.add(100, 4)])  # 6 s: fallen behind
    with pytest.raises(FellBehind) as ended:
        await anext(stream)
    assert ended.value.cursors == [Cursor({100: 1})]
    assert ended.value.lag_s == 6
    assert fanout.listener_count == 0


async def test_falling_behind_during_catch_up_reads_the_store_again_without_loss() -> None:
    store = MemoryStore()
    for seq in range(1, 4):
        store.add(100, seq)
    clock = FixedClock(1000)
    fanout = Fanout(store.fetch_range, Cursor({100: 3}), clock)
    sub = Subscription(
        [EnvelopeQuery((TOPIC,), (), Cursor())],
        store.query_within,
        fanout,
        page_size=2,
        max_lag_s=5,
    )
    stream = sub.deliveries()
    first = await anext(stream)  # catch-up, first page; the stream then stops reading
    await fanout.committed([store.add(100, 4)])
    clock.now = 1010
    await fanout.committed([store.add(100, 5)])  # the live backlog is 10 s old: dropped
    seen = [e.sequence_id for e in first.envelopes]
    while len(seen) < 5:
        delivery = await anext(stream)
        seen += [e.sequence_id for e in delivery.envelopes]
    await fanout.committed([store.add(100, 6)])
    while len(seen) < 6:
        seen += [e.sequence_id for e in (await anext(stream)).envelopes]
    await stream.aclose()
    assert seen == [1, 2, 3, 4, 5, 6]


def ended(method: str) -> float:
    labels = {"method": method, "reason": "fell_behind"}
    return REGISTRY.get_sample_value("xnode_subscriptions_ended_total", labels) or 0.0


async def test_subscribe_ends_a_stream_that_fell_behind_unavailable_logged_and_counted() -> None:
    store = MemoryStore()
    clock = FixedClock(1000)
    fanout = Fanout(store.fetch_range, Cursor(), clock)
    subscribe = Subscribe(store, fanout, max_lag_s=5)
    method = "SubscribeEnvelopes"
    before = ended(method)
    stream = subscribe([EnvelopeQuery((TOPIC,), (), Cursor({100: 7}))], method)
    assert (await anext(stream)).phase is Phase.CAUGHT_UP
    await fanout.committed([store.add(100, 8)])
    clock.now = 1009
    with capture_logs() as logs:
        await fanout.committed([store.add(100, 9)])
    assert ended(method) == before + 1  # at once: its stream may be stuck in a write
    with pytest.raises(Rejected) as refused:
        await anext(stream)
    assert refused.value.reason is Reason.UNAVAILABLE
    assert refused.value.cursor == Cursor({100: 7})
    assert "resubscribe from your last cursor" in str(refused.value)
    assert ended(method) == before + 1
    events = [e for e in logs if e["event"] == "subscription_fell_behind"]
    assert len(events) == 1
    assert events[0]["method"] == method and events[0]["cursors"] == [{100: 7}]


async def test_after_a_commit_to_many_streams_the_next_ones_reach_them_together() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor(), batch_interval_s=0.05)
    listeners = [Listener(topics=frozenset({TOPIC})) for _ in range(MANY_STREAMS)]
    for listener in listeners:
        fanout.register(listener)
    await fanout.committed([store.add(100, 1)])
    await every_offer_made(listeners)
    assert all(len(listener.take()) == 1 for listener in listeners)  # the first: at once
    await fanout.committed([store.add(100, 2)])
    await fanout.committed([store.add(100, 3)])
    assert all(listener.take() == [] for listener in listeners)  # within the interval: held
    async with asyncio.timeout(5):
        await asyncio.wait(
            [asyncio.create_task(listener.ready()) for listener in listeners],
            return_when=asyncio.FIRST_COMPLETED,
        )
    await every_offer_made(listeners)
    taken = [listener.take() for listener in listeners]
    assert all(len(t) == 1 and t[0] is taken[0][0] for t in taken)  # one shared batch
    assert [e.sequence_id for e in taken[0][0].envelopes] == [2, 3]


async def every_offer_made(listeners: list[Listener], batches: int = 1) -> None:
    """Lets the loop turn until every listener has `batches` waiting (a share each turn)."""
    for _ in range(batches * len(listeners) // OFFERS_PER_TURN + 1):
        if all(len(listener.backlog) >= batches for listener in listeners):
            return
        await asyncio.sleep(0)
    raise AssertionError("a listener was never offered the commit")


async def test_a_commit_to_many_streams_wakes_a_share_of_them_each_turn_in_order() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor(), batch_interval_s=0)
    listeners = [Listener(topics=frozenset({TOPIC})) for _ in range(3 * OFFERS_PER_TURN)]
    for listener in listeners:
        fanout.register(listener)
    await fanout.committed([store.add(100, 1)])
    assert sum(1 for listener in listeners if listener.backlog) == OFFERS_PER_TURN
    await fanout.committed([store.add(100, 2)])  # queued behind the first commit's offers
    await asyncio.sleep(0)  # one turn: another share, and other calls ran before it
    assert sum(1 for listener in listeners if listener.backlog) == 2 * OFFERS_PER_TURN
    await every_offer_made(listeners, batches=2)
    for listener in listeners:  # each one's commits in order
        assert [e.sequence_id for b in listener.take() for e in b.envelopes] == [1, 2]


async def test_commits_to_few_streams_are_offered_at_once() -> None:
    store = MemoryStore()
    fanout = Fanout(store.fetch_range, Cursor(), batch_interval_s=60)
    listener = Listener(topics=frozenset({TOPIC}))
    fanout.register(listener)
    for seq in (1, 2, 3):
        await fanout.committed([store.add(100, seq)])
    assert [[e.sequence_id for e in b.envelopes] for b in listener.take()] == [[1], [2], [3]]
