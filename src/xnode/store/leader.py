"""One indexing process per database: a session-level Postgres advisory lock."""

from __future__ import annotations

import asyncpg

from xnode.store.primary import Connect

# Only one process per database indexes the chain (pg_try_advisory_lock on this key).
INDEXER_LOCK_KEY = 0x786E6F6465_01


class LeaderLock:
    """A session advisory lock on a dedicated connection: one indexing process per database
    (chain.ports.IndexerLock). Losing the connection releases it, and another process takes
    over."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._conn: asyncpg.Connection | None = None
        self._held = False

    async def held(self) -> bool:
        if self._conn is None or self._conn.is_closed():
            self._conn, self._held = await self._connect(), False
        if not self._held:
            self._held = bool(
                await self._conn.fetchval("SELECT pg_try_advisory_lock($1)", INDEXER_LOCK_KEY)
            )
        return self._held

    async def release(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn, self._held = None, False
