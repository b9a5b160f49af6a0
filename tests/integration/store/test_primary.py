"""The node's database on several hosts: the host taking writes is found even when another
host is frozen (it accepts connections and never answers), where asyncpg's own multi-host
connect waits on the frozen host; with no host taking writes, callers get a connection error
(UNAVAILABLE), not a hang; a primary gone silent is waited for once, not at every look."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import asyncpg
import pytest

from tests.support.tcp_link import Link
from tests.support.waiting import eventually
from xnode.devtools.postgres import PgCluster, free_port
from xnode.store.primary import Database, NoPrimaryError, host_dsns

TIMEOUT_S = 0.5
# The node's connect timeout: long against a connect to a live server, so that a look or a
# connect waiting for a silent host shows.
SILENT_TIMEOUT_S = 2.0


@pytest.fixture
def frozen_host() -> Iterator[str]:
    """host:port of a listening socket nobody reads: the kernel completes connects to it, as
    for a Postgres stopped by SIGSTOP."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def test_one_dsn_per_host_without_session_attrs() -> None:
    dsn = "postgresql://u:p@h1:1,h2:2/db?target_session_attrs=read-write&sslmode=disable"
    assert host_dsns(dsn) == [
        "postgresql://u:p@h1:1/db?sslmode=disable",
        "postgresql://u:p@h2:2/db?sslmode=disable",
    ]


async def test_a_frozen_host_does_not_hold_up_the_primary(
    pg_cluster: PgCluster, frozen_host: str
) -> None:
    dsn = f"postgresql://postgres@{frozen_host},127.0.0.1:{pg_cluster.port}/postgres"
    with pytest.raises(TimeoutError):  # why the node does not use asyncpg's own
        await asyncpg.connect(dsn + "?target_session_attrs=read-write", timeout=2 * TIMEOUT_S)
    database = Database(dsn + "?target_session_attrs=read-write", TIMEOUT_S)
    started = time.monotonic()
    conn = await database.connect()
    try:
        assert await conn.fetchval("SELECT inet_server_port()") == pg_cluster.port
    finally:
        await conn.close()
    assert time.monotonic() - started < 10 * TIMEOUT_S
    assert database.primary_dsn.endswith(f":{pg_cluster.port}/postgres")


async def test_no_host_taking_writes_is_a_connection_error(frozen_host: str) -> None:
    database = Database(f"postgresql://postgres@{frozen_host},127.0.0.1:{free_port()}/x", 0.2)
    with pytest.raises(NoPrimaryError) as raised:
        await asyncio.wait_for(database.connect(), 5)
    assert isinstance(raised.value, OSError)  # what the API answers UNAVAILABLE to


async def test_a_pool_connection_in_use_is_cut_when_the_primary_moves(
    pg_cluster: PgCluster,
) -> None:
    """Its query fails as on a lost network, its user releases it, and the pool goes on
    with connections to the new primary (the same server under another name here)."""
    port = pg_cluster.port
    database = Database(f"postgresql://postgres@127.0.0.1:{port},localhost:{port}/postgres")
    assert await database.find() == 0
    pool = await asyncpg.create_pool(database.dsn, connect=database.connect, min_size=1)
    try:
        started = asyncio.Event()

        async def hold() -> None:
            async with pool.acquire() as conn:
                started.set()
                await conn.fetchval("SELECT pg_sleep(60)")

        holder = asyncio.create_task(hold())
        await asyncio.wait_for(started.wait(), 10)
        database._follow(1)  # what find() does when another host takes writes
        with pytest.raises(asyncpg.ConnectionDoesNotExistError):
            await asyncio.wait_for(holder, 10)
        assert await pool.fetchval("SELECT 1") == 1
        assert database.changes == 1
    finally:
        pool.terminate()


async def test_a_silent_primary_is_waited_for_once(pg_cluster: PgCluster) -> None:
    """The primary's host frozen, or behind a network that drops packets: once it has let a
    question time out, new connections fail at once during the failover (no host takes
    writes) and the standby's promotion is seen at the next look, neither waiting for the
    silent host's timeout again. Links to the one server stand for both hosts: the standby's
    refuses until its promotion."""
    old, new = Link(), Link()
    for link in (old, new):
        link.upstream = f"127.0.0.1:{pg_cluster.port}"
        await link.start()
    new.set_cut(True)
    database = Database(
        f"postgresql://postgres@{old.address},{new.address}/postgres", SILENT_TIMEOUT_S
    )
    try:
        assert await database.find() == 0
        old.set_cut(True, blackhole=True)
        with pytest.raises(NoPrimaryError):
            await database.find()  # waits for the silent host this once
        started = time.monotonic()
        with pytest.raises(NoPrimaryError):
            await database.connect()
        assert time.monotonic() - started < SILENT_TIMEOUT_S / 2, "a connect waited for it"
        database.start_watch(0.05)
        new.set_cut(False)
        promoted = time.monotonic()
        await eventually(lambda: database.primary_dsn == database.hosts[1], 10, "the promotion")
        assert time.monotonic() - promoted < SILENT_TIMEOUT_S / 2, "a look waited for it"
        conn = await database.connect()
        await conn.close()
    finally:
        await database.stop_watch()
        for link in (old, new):
            await link.stop()
