"""A streaming replica of the node's database: what it holds, and how far it trails.

Read every interval on the replica's own pool: its vector clock (a lower bound of what it
holds, since a replica only moves forward) and its lag behind the primary, in WAL bytes and
in seconds (zero when it has replayed all it received, else the age of the last transaction
it replayed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncpg
import structlog

from xnode.core.cursors import Cursor
from xnode.store.envelopes import EnvelopeStore, read_vector_clock
from xnode.usecases.concurrency import Repeating

log = structlog.get_logger(__name__)

_LAG = """
SELECT pg_wal_lsn_diff($1::text::pg_lsn, pg_last_wal_replay_lsn()),
       CASE WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0
            ELSE EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp()) END
"""


class ReplicaWatch:
    """`held()` for usecases.reads.RoutedReads; lag_bytes and lag_seconds for metrics."""

    def __init__(self, replica: asyncpg.Pool, primary: asyncpg.Pool, interval_s: float) -> None:
        self._replica = replica
        self._primary = primary
        self._interval_s = interval_s
        self._held: Cursor | None = None
        self.lag_bytes: float | None = None
        self.lag_seconds: float | None = None
        self._repeating = Repeating(self.read, interval_s, "replica-watch")
        self._answering: bool | None = None  # as last read; None before the first read

    def held(self) -> Cursor | None:
        return self._held

    async def start(self) -> None:
        """Reads once before returning, then every interval until stop."""
        await self.read()
        self._repeating.start()

    async def stop(self) -> None:
        await self._repeating.stop()

    async def read(self) -> None:
        try:
            async with asyncio.timeout(max(self._interval_s, 1.0)):
                primary_lsn = await self._primary.fetchval("SELECT pg_current_wal_lsn()::text")
                held = await read_vector_clock(self._replica)
                lag = await self._replica.fetchrow(_LAG, primary_lsn)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            if self._answering is not False:
                log.warning("replica_unavailable", error=repr(exc))
            self._held = self.lag_bytes = self.lag_seconds = None
            self._answering = False
            return
        assert lag is not None
        if self._answering is not True:
            log.info("replica_available")
        self._answering = True
        self._held = Cursor(held)
        self.lag_bytes, self.lag_seconds = max(0.0, float(lag[0])), float(lag[1] or 0)


@dataclass(frozen=True)
class Replica:
    """The replica's envelope reads and what it holds."""

    store: EnvelopeStore
    watch: ReplicaWatch
