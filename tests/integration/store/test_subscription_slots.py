"""Concurrent subscriptions per client IP, counted across processes sharing one Postgres."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import asyncpg
import pytest

from tests.conftest import database_refusing
from tests.support.waiting import eventually
from xnode.core.limits import Kind, Limit, LimitExceeded
from xnode.devtools.postgres import PgCluster
from xnode.store.limits import SharedBuckets
from xnode.store.subscription_slots import SharedSubscriptionSlots
from xnode.usecases.limits import ApiLimits, Caller, LimitPolicy

ANY = Limit(1000.0, 1000.0)


def _limits(pool: asyncpg.Pool, slots: SharedSubscriptionSlots) -> ApiLimits:
    policy = LimitPolicy(
        publish_envelopes=ANY,
        publish_bytes=ANY,
        publish_ip_envelopes=ANY,
        publish_ip_bytes=ANY,
        query_requests=ANY,
        query_bytes=ANY,
        subscribe_requests=ANY,
        subscriptions_per_ip=3,
        reports=ANY,
        peer_multiplier=2.0,
    )
    return ApiLimits(policy, SharedBuckets(pool), slots)


async def test_two_processes_share_one_count_and_a_dead_one_frees_its_slots(database: str) -> None:
    # Two pools stand for two worker processes of one node.
    pool_a = await asyncpg.create_pool(database, min_size=1, max_size=3)
    pool_b = await asyncpg.create_pool(database, min_size=1, max_size=3)
    slots_a, slots_b = SharedSubscriptionSlots(pool_a), SharedSubscriptionSlots(pool_b)
    a, b = _limits(pool_a, slots_a), _limits(pool_b, slots_b)
    client = Caller.from_peer("ipv4:10.0.0.7:5555")
    other = Caller.from_peer("ipv4:10.0.0.8:5555")
    try:
        async with AsyncExitStack() as held:
            await held.enter_async_context(a.subscription(client))
            await held.enter_async_context(a.subscription(client))
            await held.enter_async_context(b.subscription(client))
            with pytest.raises(LimitExceeded) as refused:
                await held.enter_async_context(b.subscription(client))
            assert refused.value.kind is Kind.SUBSCRIPTIONS
            with pytest.raises(LimitExceeded):
                await held.enter_async_context(a.subscription(client))
            await held.enter_async_context(b.subscription(other))  # another IP is not counted
        # All given back: three fit again.
        async with AsyncExitStack() as held:
            for _ in range(3):
                await held.enter_async_context(b.subscription(client))

        # Process A dies holding two slots: its session ends and they stop counting.
        async with AsyncExitStack() as held:
            await held.enter_async_context(a.subscription(client))
            await held.enter_async_context(a.subscription(client))
            with pytest.raises(LimitExceeded):
                async with b.subscription(client), b.subscription(client):
                    pass
            pool_a.terminate()
            await asyncio.wait_for(_until_free(b, client), timeout=30)
            held.pop_all()  # A's exits cannot run: its connections are gone
    finally:
        await slots_b.close()
        await pool_b.close()
        pool_a.terminate()


async def _until_free(limits: ApiLimits, caller: Caller) -> None:
    while True:
        try:
            async with AsyncExitStack() as held:
                for _ in range(3):
                    await held.enter_async_context(limits.subscription(caller))
            return
        except LimitExceeded:
            await asyncio.sleep(0.05)


async def test_peers_with_a_node_token_get_their_own_higher_count(database: str) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=3)
    slots = SharedSubscriptionSlots(pool)
    limits = _limits(pool, slots)
    peer = Caller.from_peer("ipv4:10.0.0.7:5555", node_id=200)
    try:
        async with AsyncExitStack() as held:
            for _ in range(6):  # 3 x peer_multiplier 2
                await held.enter_async_context(limits.subscription(peer))
            with pytest.raises(LimitExceeded):
                await held.enter_async_context(limits.subscription(peer))
            count = await pool.fetchval("SELECT sum(held) FROM subscription_slots")
            assert count == 6
        assert await pool.fetchval("SELECT count(*) FROM subscription_slots") == 0
    finally:
        await slots.close()
        await pool.close()


async def test_slots_are_taken_again_after_the_database_ended_their_session(
    pg_cluster: PgCluster, database: str
) -> None:
    """Postgres restarting ends the slots' dedicated session, and the pool takes the
    connection back by itself: every subscription was then refused (StoreUnavailable,
    "released back to the pool") until the node restarted."""
    pool = await asyncpg.create_pool(database, min_size=1, max_size=3)
    slots = SharedSubscriptionSlots(pool)
    try:
        assert await slots.hold("10.0.0.9", 3)
        async with database_refusing(pg_cluster, database):  # ends every session
            await eventually(lambda: _closed_by_server(slots), what="the session ended")
        await slots.release("10.0.0.9")  # that slot ended with its session: nothing to do
        assert await slots.hold("10.0.0.9", 1)  # a new session, and the count started over
    finally:
        await slots.close()
        await pool.close()


def _closed_by_server(slots: SharedSubscriptionSlots) -> bool:
    connection = slots._connection  # what the next hold() finds
    try:
        return connection is None or connection.is_closed()
    except asyncpg.InterfaceError:
        return True  # taken back by the pool: the case that refused every subscription
