"""The query and subscribe use cases over fakes of their ports."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.usecases.fakes import FakeResolver, MemoryStore
from xnode.core.cursors import Cursor
from xnode.core.envelopes import StoredEnvelope
from xnode.core.errors import Reason, Rejected
from xnode.core.query import DEFAULT_QUERY_LIMIT, MAX_QUERY_LIMIT, MAX_QUERY_TOPICS, EnvelopeQuery
from xnode.core.topics import Topic, TopicKind
from xnode.usecases.fanout import Fanout
from xnode.usecases.query import Query
from xnode.usecases.subscribe import Subscribe, topic_groups
from xnode.usecases.subscription import Phase

TOPIC = Topic(TopicKind.GROUP_MESSAGES, b"g" * 16).raw
OTHER = Topic(TopicKind.GROUP_MESSAGES, b"h" * 16).raw


@pytest.mark.parametrize(
    ("asked", "used"), [(0, DEFAULT_QUERY_LIMIT), (7, 7), (10**6, MAX_QUERY_LIMIT)]
)
async def test_query_applies_the_limit_rules(asked: int, used: int) -> None:
    store = MemoryStore()
    await Query(store).envelopes(EnvelopeQuery(topics=(TOPIC,)), asked)
    assert store.queries[0][1] == used


async def test_newest_checks_every_topic_before_reading() -> None:
    store = MemoryStore()
    with pytest.raises(Rejected) as refused:
        await Query(store).newest([TOPIC, b"\xff"])
    assert refused.value.reason is Reason.BAD_TOPIC
    assert "topics[1]" in str(refused.value)
    with pytest.raises(Rejected) as many:
        await Query(store).newest([TOPIC] * (MAX_QUERY_TOPICS + 1))
    assert many.value.reason is Reason.LIMIT_EXCEEDED
    assert store.newest_asked == []
    assert await Query(store).newest([TOPIC]) == [None]


async def test_inbox_ids_without_a_resolver_are_unknown() -> None:
    keys = [("0xabc", 1), ("0xdef", 1)]
    assert await Query(MemoryStore()).inbox_ids(keys) == [None, None]
    resolver = FakeResolver({"0xdef": "inbox"})
    assert await Query(MemoryStore(), resolver).inbox_ids(keys) == [None, "inbox"]
    with pytest.raises(Rejected):
        await Query(MemoryStore(), resolver).inbox_ids(keys * (MAX_QUERY_TOPICS // 2 + 1))


def test_topic_filters_sharing_a_cursor_form_one_group() -> None:
    at3 = Cursor.of({100: 3})
    groups = topic_groups([(TOPIC, at3), (OTHER, Cursor()), (b"\x00x", at3)])
    assert [(g.topics, g.cursor) for g in groups] == [
        ((TOPIC, b"\x00x"), at3),
        ((OTHER,), Cursor()),
    ]
    with pytest.raises(Rejected) as empty:
        topic_groups([])
    assert empty.value.reason is Reason.MALFORMED


async def test_subscribe_catches_up_goes_live_and_ends_when_the_node_drains() -> None:
    store = MemoryStore()
    store.rows.append(StoredEnvelope(100, 1, TOPIC, b"one"))
    fanout = Fanout(store.originator_range, Cursor.of({100: 1}))
    subscribe = Subscribe(store, fanout, keepalive_s=30)
    deliveries = subscribe([EnvelopeQuery(topics=(TOPIC,))], "SubscribeTopics")
    first = await anext(deliveries)
    assert (first.phase, [e.raw for e in first.envelopes]) == (Phase.CATCHUP, [b"one"])
    assert (await anext(deliveries)).phase is Phase.CAUGHT_UP
    two = StoredEnvelope(100, 2, TOPIC, b"two")
    store.rows.append(two)
    await fanout.committed([two])
    live = await asyncio.wait_for(anext(deliveries), 5)
    assert (live.phase, [e.raw for e in live.envelopes]) == (Phase.LIVE, [b"two"])
    subscribe.close_all()
    with pytest.raises(Rejected) as ended:
        await asyncio.wait_for(anext(deliveries), 5)
    assert ended.value.reason is Reason.UNAVAILABLE


async def test_a_draining_node_refuses_new_subscriptions_before_any_read() -> None:
    store = MemoryStore()
    subscribe = Subscribe(store, Fanout(store.originator_range, Cursor()), keepalive_s=30)
    subscribe.close_all()
    with pytest.raises(Rejected) as refused:
        await anext(subscribe([EnvelopeQuery(topics=(TOPIC,))], "SubscribeTopics"))
    assert refused.value.reason is Reason.UNAVAILABLE
    assert not store.queries


async def test_newest_refuses_a_topic_listed_twice_before_reading() -> None:
    store = MemoryStore()
    with pytest.raises(Rejected) as refused:
        await Query(store).newest([TOPIC, OTHER, TOPIC])
    assert refused.value.reason is Reason.MALFORMED
    assert "topics[2] repeats topics[0]" in str(refused.value)
    assert store.newest_asked == []


async def test_a_query_answer_stops_at_its_byte_budget_and_says_so() -> None:
    store = MemoryStore()
    for seq in range(1, 6):
        store.rows.append(StoredEnvelope(100, seq, TOPIC, b"x" * 10))
    answer = await Query(store, budget=25).envelopes(EnvelopeQuery(topics=(TOPIC,)), 0)
    assert [e.sequence_id for e in answer.envelopes] == [1, 2]
    assert answer.cut
    whole = await Query(store, budget=50).envelopes(EnvelopeQuery(topics=(TOPIC,)), 0)
    assert len(whole.envelopes) == 5 and not whole.cut
