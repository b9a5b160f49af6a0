"""The store's port classes raise the store's own error for a lost database, never the
driver's: their callers (use cases, API, replication) know no driver."""

from __future__ import annotations

import asyncpg
import pytest

from tests.conftest import database_refusing
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import PgCluster
from xnode.store.envelopes import EnvelopeStore
from xnode.store.errors import DRIVER_ERRORS, driver_errors_translated
from xnode.store.misbehavior import MisbehaviorStore
from xnode.usecases.ports import StoreCorrupt, StoreUnavailable


async def test_a_lost_database_is_store_unavailable(pg_cluster: PgCluster, database: str) -> None:
    pool = await asyncpg.create_pool(database, min_size=1, max_size=2)
    try:
        envelopes = EnvelopeStore(pool)
        reports = MisbehaviorStore(pool, SigningKey.generate())
        assert await envelopes.vector_clock() is not None  # answers while the database does
        async with database_refusing(pg_cluster, database):
            with pytest.raises(StoreUnavailable) as lost:
                await envelopes.vector_clock()
            assert isinstance(lost.value.__cause__, DRIVER_ERRORS)  # kept for the logs
            with pytest.raises(StoreUnavailable):
                await reports.after(0)
        assert await reports.after(0) == []  # and again once it is back
    finally:
        pool.terminate()


async def test_a_value_the_driver_cannot_encode_is_no_retry(database: str) -> None:
    """Retrying would fail the same: the caller's bug, not an unavailable store."""
    pool = await asyncpg.create_pool(database, min_size=1, max_size=1)
    try:
        with pytest.raises(asyncpg.DataError):
            await MisbehaviorStore(pool, SigningKey.generate()).after("not a time")  # type: ignore[arg-type]
    finally:
        pool.terminate()


@driver_errors_translated
class _Reads:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def read(self, sql: str) -> None:
        await self.pool.execute(sql)


@pytest.mark.parametrize("state", ["data_corrupted", "index_corrupted"])
async def test_a_page_the_database_refuses_to_read_is_store_corrupt(
    database: str, state: str
) -> None:
    """What Postgres raises for a page whose checksum fails or a file cut short (the e2e
    reproduction: tests/e2e/faults/test_bit_flips.py); still unavailable to its callers."""
    pool = await asyncpg.create_pool(database, min_size=1, max_size=1)
    try:
        with pytest.raises(StoreCorrupt) as corrupt:
            await _Reads(pool).read(
                "DO $$ BEGIN RAISE EXCEPTION 'invalid page in block 0 of relation base/1/2'"
                f" USING ERRCODE = '{state}'; END $$"
            )
        assert isinstance(corrupt.value, StoreUnavailable)
        assert "invalid page in block 0" in str(corrupt.value)
        with pytest.raises(StoreUnavailable) as other:
            await _Reads(pool).read(
                "DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = 'internal_error'; END $$"
            )
        assert not isinstance(other.value, StoreCorrupt)
    finally:
        pool.terminate()
