"""Issue 5: "Queries and subscriptions stop returning expired envelopes at once, before any
prune". Expired rows are still in the table here; only the read paths hide them."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import (
    DAY_S,
    NS_PER_S,
    Item,
    group,
    received_row,
    sequence_ids,
    store_received,
    table_rows,
)
from xnode.client.node import NodeClient
from xnode.core.cursors import Cursor
from xnode.core.envelopes import IndexedEnvelope
from xnode.core.topics import Topic, TopicKind

ITEM = Item(TopicKind.GROUP_MESSAGES, group(3))
TOPIC = Topic(ITEM.kind, ITEM.identifier).raw


def rows(spec: NodeSpec) -> list[IndexedEnvelope]:
    """Originator 200's 1 (originated 400 days ago: expired) and 2 (just now)."""
    old_ns = (int(time.time()) - 400 * DAY_S) * NS_PER_S
    key = spec.keys[200]
    return [
        received_row(200, key, 1, old_ns, ITEM),
        received_row(200, key, 2, time.time_ns(), ITEM),
    ]


async def next_envelopes(responses: Any) -> list[bytes]:
    response = await asyncio.wait_for(responses.__anext__(), 10)
    return [e.SerializeToString() for e in response.envelopes]


async def test_queries_and_catch_up_hide_expired_envelopes(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    await store_received(database, rows(node_spec))
    assert len(await table_rows(database)) == 2  # both stored: nothing is pruned yet
    async with NodeClient(node.address) as client:
        assert sequence_ids(
            [e.SerializeToString() for e in await client.query(topics=[TOPIC])]
        ) == [2]
        by_originator = await client.query(originators=[200], cursor=Cursor())
        assert sequence_ids([e.SerializeToString() for e in by_originator]) == [2]
        call = client.subscribe(topics=[TOPIC])
        responses = call.__aiter__()
        assert sequence_ids(await next_envelopes(responses)) == [2]  # catch-up
        call.cancel()


async def test_live_delivery_hides_an_already_expired_envelope(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    """Committed by another process (or a replication batch) already expired: the live path
    (LISTEN notice, Fanout fetching the range) must drop it as queries do."""
    node = await start_node(**node_settings(database, node_spec))
    async with NodeClient(node.address) as client:
        call = client.subscribe(topics=[TOPIC])
        responses = call.__aiter__()
        assert await next_envelopes(responses) == []  # caught up: nothing yet
        await store_received(database, rows(node_spec), token="another-process")
        live: list[int] = []
        while 2 not in live:
            live += sequence_ids(await next_envelopes(responses))
        call.cancel()
    assert live == [2]
