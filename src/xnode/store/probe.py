"""A cheap reachability probe of the node's database, for the health monitor."""

from __future__ import annotations

import asyncio

import asyncpg

PROBE_TIMEOUT_S = 1.0


class PoolProbe:
    def __init__(self, pool: asyncpg.Pool, timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self._pool = pool
        self._timeout_s = timeout_s

    async def reachable(self) -> bool:
        """`SELECT 1` on a pooled connection within the timeout (acquiring included)."""
        try:
            async with asyncio.timeout(self._timeout_s):
                async with self._pool.acquire() as conn:
                    await conn.fetchval("SELECT 1")
        except Exception:  # whatever the failure, the answer is "not reachable"
            return False
        return True
