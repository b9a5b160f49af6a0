"""A peer that fails in the middle of a reconciliation (it is stopping: UNAVAILABLE) on real
Postgres: the repair's own reads of this node's log end with the failure, so nothing it
started holds a pool connection afterwards and the node's pool closes at once. With
`asyncio.gather` the local read stayed behind, detached, and `Pool.close()` waited for it
(the teardown hang of the gateway test in CI, docs: notes of the reland branch)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import asyncpg
import pytest

from tests.support.waiting import eventually
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.replication.anti_entropy import Repair
from xnode.replication.ingest import OriginatorLog
from xnode.store.logs import LogStore
from xnode.store.replication import ReplicationStore

ORIGINATOR = 300


class PeerStopping(Exception):
    """What a stopping peer's channel raises (UNAVAILABLE)."""


class StoppingPeer:
    """Fails its fingerprints once this node's own read is under way (waiting on a lock)."""

    node_id = 200
    bytes_exchanged = 0

    def __init__(self, local_read_waiting: asyncio.Event) -> None:
        self._local_read_waiting = local_read_waiting

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]:
        await self._local_read_waiting.wait()
        raise PeerStopping("UNAVAILABLE: node is shutting down")

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        raise AssertionError("no listing expected")

    async def run_proofs(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]]:
        raise AssertionError("no proofs expected")

    async def envelopes(self, originator: int, run: SequenceRange) -> list[bytes]:
        raise AssertionError("no envelopes expected")


def no_originator_log(originator: int) -> OriginatorLog:
    raise AssertionError("nothing to store expected")


async def no_fork(originator: int, stored: bytes, other: bytes) -> None:
    raise AssertionError("no fork expected")


@pytest.fixture
async def locked_log_nodes(database: str) -> AsyncIterator[asyncpg.Connection]:
    """Another session holding log_nodes: this node's fingerprint read (it fills tile
    fingerprints first) waits on the lock, as it would behind a long writer."""
    conn = await asyncpg.connect(database)
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE log_nodes IN EXCLUSIVE MODE")
            yield conn
    finally:
        await conn.close()


async def _lock_waiters(conn: asyncpg.Connection) -> int:
    found = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    return int(found)


async def test_a_peer_failing_mid_reconcile_leaves_no_read_of_ours_behind(
    database: str, locked_log_nodes: asyncpg.Connection
) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=4)
    try:
        repair = Repair(LogStore(pool), ReplicationStore(pool), no_originator_log, no_fork)
        waiting = asyncio.Event()

        async def local_read_blocked() -> bool:
            return await _lock_waiters(locked_log_nodes) >= 1

        async def fail_when_blocked() -> None:
            await eventually(local_read_blocked, within_s=30)
            waiting.set()

        before = asyncio.all_tasks()
        watcher = asyncio.create_task(fail_when_blocked())
        with pytest.raises(PeerStopping):
            await repair.reconcile(StoppingPeer(waiting), ORIGINATOR)
        await watcher
        left = [t for t in asyncio.all_tasks() - before - {watcher} if not t.done()]
        assert left == []  # nothing of the repair still runs
        assert pool.get_size() - pool.get_idle_size() == 0  # no connection still held

        async def read_cancelled() -> bool:
            return await _lock_waiters(locked_log_nodes) == 0

        await eventually(read_cancelled, within_s=30)
        # The lock is still held: a read left behind would keep the pool from closing.
        await asyncio.wait_for(pool.close(), 30)
    finally:
        pool.terminate()
