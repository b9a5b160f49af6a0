"""Delivery groups against a misbehaving relay (issue 9): originator 100 is down; node 300
fetches its log through its delivery group (n = 4, f = 1: two relays), one of which (node
400, a test double for another operator's node) serves a truncated log with a forged
envelope. Every envelope still reaches both honest nodes; the forgery is refused and
reported against the relay."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import asyncpg
import grpc

from tests.conftest import REPLICATION_TEST_SETTINGS, NodeSpec, node_settings
from tests.e2e.replication.test_misbehaving_peer import forged
from tests.integration.export.helpers import Item, group, publish
from tests.integration.replication.test_replication import stored
from tests.support.fake_peer import serve_subscribe_originators
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core import misbehavior, wire
from xnode.core.crypto import SigningKey
from xnode.core.delivery_groups import delivery_group, epoch_of, fault_tolerance
from xnode.core.topics import TopicKind
from xnode.devtools.postgres import free_port

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))
NODES = (100, 200, 300, 400)


class ByzantineRelay:
    """Answers its own log with keepalives and originator 100's with a stale, truncated
    copy whose last envelope is forged."""

    def __init__(self, served: list[bytes]) -> None:
        self.served = served
        self.asked: list[int] = []

    async def subscribe(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        parsed = api.SubscribeOriginatorsRequest.FromString(request)
        originators = list(parsed.filter.originator_node_ids)
        self.asked += originators
        yield wire.field(1, wire.repeated(1, self.served if originators == [100] else []))
        await asyncio.sleep(3600)

    async def serve(self, address: str) -> grpc.aio.Server:
        return await serve_subscribe_originators(self.subscribe, address)


async def test_f_misbehaving_relays_in_the_group_cannot_withhold_an_envelope(
    start_node: Any, new_database: Callable[[], str], tmp_path: Path
) -> None:
    spec = NodeSpec(tmp_path, {n: SigningKey.generate() for n in NODES})
    addresses = {n: f"127.0.0.1:{free_port()}" for n in NODES}
    spec.write(addresses)
    dsns = {n: new_database() for n in (100, 200, 300)}

    def settings(n: int) -> dict[str, Any]:
        return node_settings(
            dsns[n], spec, n, listen_address=addresses[n],
            **{**REPLICATION_TEST_SETTINGS, "replication_fallback_peers": 1,
               "replication_repair_seconds": 0},
        )  # fmt: skip

    a = await start_node(**settings(100))
    b = await start_node(**settings(200))
    sent = await publish(a.address, 100, [GROUP] * 20)

    async def b_has_them() -> bool:
        return await stored(b.address, 100) == sent

    await eventually(b_has_them)
    await a.stop()
    relay = ByzantineRelay([*sent[:5], forged(sent[5])])
    server = await relay.serve(addresses[400])
    try:
        c = await start_node(**settings(300))
        assert c.replication is not None
        links = c.replication.links

        async def c_has_them() -> bool:
            return await stored(c.address, 100) == sent

        await eventually(c_has_them, within_s=60)
        assert fault_tolerance(len(NODES)) == 1
        group_now = delivery_group(100, epoch_of(time.time()), [200, 400], 4)
        assert sorted(group_now) == [200, 400] == links[100].fallback_peers
        assert 100 in relay.asked  # the byzantine relay was asked, and served its copy

        async def forgery_reported() -> bool:
            conn = await asyncpg.connect(dsns[300])
            try:
                rows = await conn.fetch("SELECT misbehaving_node_id, type FROM misbehavior_reports")
            finally:
                await conn.close()
            return (400, misbehavior.INVALID_PAYLOAD) in [(r[0], r[1]) for r in rows]

        await eventually(forgery_reported)
    finally:
        await server.stop(None)
