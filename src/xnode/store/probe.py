"""A cheap reachability probe of the node's database, for the health monitor.

It keeps its own connection rather than borrowing one from the pool: a pool busy with
publishes must not look like an unreachable database."""

from __future__ import annotations

import asyncio

import asyncpg

from xnode.store.primary import Connect

PROBE_TIMEOUT_S = 1.0


class PostgresProbe:
    def __init__(self, connect: Connect, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self._connect = connect
        self._timeout_s = timeout_s
        self._conn: asyncpg.Connection | None = None
        self.error: str | None = None  # why the last probe failed

    async def reachable(self) -> bool:
        """`SELECT 1` within the timeout, (re)connecting first when needed."""
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._conn is None or self._conn.is_closed():
                    self._conn = await self._connect()
                await self._conn.fetchval("SELECT 1")
        except Exception as exc:  # whatever the failure, the answer is "not reachable"
            self.error = repr(exc)
            self.close()
            return False
        self.error = None
        return True

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.terminate()  # no goodbye to a server that may not answer
