"""Concurrent subscriptions per key, counted across the node's processes
(usecases.ports.SubscriptionSlots).

A process holds its slots through one dedicated connection: a slot belongs to that database
session (backend pid and start time), so the slots of a process that dies stop counting when
its session ends, with no heartbeat to keep. Opening a subscription costs one short
transaction; publishes and queries never come here."""

from __future__ import annotations

import asyncio

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from xnode.store.errors import driver_errors_translated

_SESSION = (
    "pg_backend_pid(), (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())"
)
_ALIVE = (
    "EXISTS (SELECT 1 FROM pg_stat_activity a"
    " WHERE a.pid = s.pid AND a.backend_start = s.backend_start)"
)
# Serializes the count and the take per key across processes (held until commit).
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
_FORGET_DEAD = f"DELETE FROM subscription_slots s WHERE s.key = $1 AND NOT {_ALIVE}"
_TAKE = f"""
INSERT INTO subscription_slots AS t (key, pid, backend_start, held)
SELECT $1, {_SESSION}, 1
WHERE (SELECT coalesce(sum(held), 0) FROM subscription_slots WHERE key = $1) < $2
ON CONFLICT (key, pid, backend_start) DO UPDATE SET held = t.held + 1
RETURNING held
"""
_GIVE_BACK = f"""
UPDATE subscription_slots SET held = held - 1
WHERE key = $1 AND (pid, backend_start) = ({_SESSION})
RETURNING held
"""
_DROP_EMPTY = f"""
DELETE FROM subscription_slots
WHERE key = $1 AND (pid, backend_start) = ({_SESSION}) AND held <= 0
"""


def _alive(connection: PoolConnectionProxy) -> bool:
    """Whether the dedicated connection's session goes on. When the server ends it (Postgres
    restarted, the backend was terminated), the pool takes the connection back by itself, and
    every call on it then raises InterfaceError ("released back to the pool"), is_closed()
    too: asked that way, subscriptions were refused until the node restarted."""
    try:
        return not connection.is_closed()
    except asyncpg.InterfaceError:
        return False


@driver_errors_translated
class SharedSubscriptionSlots:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._connection: PoolConnectionProxy | None = None
        self._lock = asyncio.Lock()  # one statement at a time on the dedicated connection

    async def _session(self) -> PoolConnectionProxy:
        connection = self._connection
        if connection is not None and not _alive(connection):
            # Its session ended, and with it every slot it held: nothing to give back.
            # Forgotten first: the driver may have taken it back already.
            self._connection = None
            await self._pool.release(connection)
        if self._connection is None:
            self._connection = await self._pool.acquire()
        return self._connection

    async def hold(self, key: str, allowed: int) -> bool:
        async with self._lock:
            connection = await self._session()
            async with connection.transaction():
                await connection.execute(_LOCK, key)
                await connection.execute(_FORGET_DEAD, key)
                held = await connection.fetchval(_TAKE, key, allowed)
        return held is not None

    async def release(self, key: str) -> None:
        async with self._lock:
            connection = self._connection
            if connection is None or not _alive(connection):
                return  # the session that held the slot is gone, and so is the slot
            left = await connection.fetchval(_GIVE_BACK, key)
            if left is not None and left <= 0:
                await connection.execute(_DROP_EMPTY, key)

    async def close(self) -> None:
        async with self._lock:
            if self._connection is not None:
                await self._pool.release(self._connection)
                self._connection = None
