"""Stored misbehavior reports are answered within a byte budget, oldest first, always the
first: a page of large reports never has to be read whole."""

from __future__ import annotations

import asyncpg

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.core.crypto import SigningKey
from xnode.core.misbehavior import UNRESPONSIVE_NODE, liveness_report
from xnode.store.misbehavior import MisbehaviorStore


async def test_reports_stop_at_the_byte_budget_and_always_hold_the_first(database: str) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    try:
        store = MisbehaviorStore(pool, SigningKey.generate())
        request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[b"\x00" * 10_000]))
        for i in range(4):
            await store.add(liveness_report(UNRESPONSIVE_NODE, 200, 1, request, i + 1))
        everything = await store.after(0)
        assert len(everything) == 4
        size = len(everything[0])
        assert await store.after(0, budget=2 * size + 1) == everything[:2]
        assert await store.after(0, budget=1) == everything[:1]  # the first, always
        assert await store.after(0, budget=10 * size) == everything
    finally:
        await pool.close()
