"""Anti-entropy repair and watermarks between in-process nodes on real Postgres (issue 9):
a gap left on one node is filled from a peer while the originator is down; a peer whose log
starts after pruned envelopes is not reported OUT_OF_ORDER."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import asyncpg

from tests.conftest import Network
from tests.integration.export.helpers import (
    Item,
    group,
    publish,
    received_row,
    store_received,
    write_plan,
)
from tests.integration.logs.helpers import checkpoint_at, log_api
from tests.integration.replication.test_replication import metric, stored
from tests.support.waiting import eventually, eventually_value
from xnode.commands.prune import apply_plan
from xnode.config import Settings
from xnode.core import misbehavior
from xnode.core.forks import log_keeps
from xnode.core.topics import TopicKind
from xnode.store.replication import ReplicationStore

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))
FAST = {
    "log_checkpoint_envelopes": 10,
    "log_checkpoint_seconds": 0.2,
    "replication_repair_seconds": 0.3,
}
LATER = 2**40  # past every retention


async def _execute(dsn: str, sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()


async def test_a_lost_range_is_repaired_from_a_peer_while_the_originator_is_down(
    start_node: Any, network: Network
) -> None:
    key = network.spec.keys[100].public_key
    a = await start_node(**network.settings(100, **FAST))
    b = await start_node(**network.settings(200, **FAST))
    c = await start_node(**network.settings(300, **FAST))
    sent = await publish(a.address, 100, [GROUP] * 40)
    for node in (b, c):
        async with log_api(node.address) as api:
            await checkpoint_at(api, 100, key, 40)  # checkpoint and all 40 leaves held
    await a.stop()
    before = metric("xnode_repair_envelopes_total", originator="100", outcome="stored")
    # What a crash or a relay's gap leaves behind: the stream resumes after 40, never below.
    for table, column in (
        ("originator_envelopes", "originator_sequence_id"),
        ("log_leaves", "sequence_id"),
    ):
        await _execute(
            network.dsns[200],
            f"DELETE FROM {table} WHERE originator_node_id = 100 AND {column} BETWEEN 10 AND 20",
        )
    # Nor does B hold the tree nodes over them (subtrees and tile fingerprints are stored
    # only over leaves all held), and its tree stops before the gap.
    await _execute(
        network.dsns[200],
        "DELETE FROM log_nodes WHERE originator_node_id = 100"
        " AND (node_index << level) < 20 AND ((node_index + 1) << level) > 9",
    )
    await _execute(
        network.dsns[200], "UPDATE log_trees SET tree_size = 9 WHERE originator_node_id = 100"
    )
    assert len(await stored(b.address, 100)) == 29

    async def repaired() -> bool:
        return await stored(b.address, 100) == sent

    await eventually(repaired, within_s=30)

    async def counted() -> float:
        return metric("xnode_repair_envelopes_total", originator="100", outcome="stored")

    # The round counts what it stored once it ends, a moment after the envelopes land.
    await eventually_value(counted, lambda after: after - before >= 11, 10, "the round's count")


async def test_a_peer_starting_from_a_pruned_log_is_no_out_of_order_fault(
    start_node: Any, network: Network, tmp_path: Path
) -> None:
    key = network.spec.keys[100].public_key
    a = await start_node(**network.settings(100, **FAST))
    sent = await publish(a.address, 100, [GROUP] * 30)
    async with log_api(a.address) as api:
        await checkpoint_at(api, 100, key, 30)
    plan = write_plan(tmp_path / "plan.json", [(100, 1, 20)], LATER)
    settings = Settings(database_dsn=network.dsns[100])
    # As if at LATER, when every retention has passed (a plan may not pass the clock).
    _, result = await apply_plan(settings, plan, show_progress=False, now_unix=LATER)
    assert result[100].deleted == 20
    expired = metric("xnode_repair_envelopes_total", originator="100", outcome="expired")
    b = await start_node(**network.settings(200, **FAST))

    async def b_has_the_rest() -> bool:
        return await stored(b.address, 100) == sent[20:]

    await eventually(b_has_the_rest)

    async def repair_saw_them_expired() -> bool:
        now = metric("xnode_repair_envelopes_total", originator="100", outcome="expired")
        return now - expired >= 20

    await eventually(repair_saw_them_expired)
    conn = await asyncpg.connect(network.dsns[200])
    try:
        types = await conn.fetch("SELECT type FROM misbehavior_reports")
    finally:
        await conn.close()
    assert misbehavior.OUT_OF_ORDER not in [r[0] for r in types]


async def test_a_fork_found_by_repair_is_settled_and_kept_as_evidence(
    start_node: Any, network: Network
) -> None:
    """Node 200 holds a second version of originator 300's sequence id 2 (one the fork rule
    keeps); node 100 only the first. Repair alone (originator 300 is down, the streams have
    nothing new) brings node 100 to the same log and the same conflicts."""
    key = network.spec.keys[300]
    now = time.time_ns()  # not expired: peers serve only live envelopes
    log = [received_row(300, key, s, now + s, GROUP) for s in range(1, 6)]
    other = next(
        r
        for n in range(2, 200)
        if log_keeps(
            log[1].raw, (r := received_row(300, key, 2, now + 2, Item(GROUP.kind, group(n)))).raw
        )
        == r.raw
    )
    for node_id in (100, 200):
        await store_received(network.dsns[node_id], log)
    pool = await asyncpg.create_pool(network.dsns[200], min_size=1, max_size=2)
    try:
        await ReplicationStore(pool).resolve_forks([other])
    finally:
        await pool.close()
    a = await start_node(**network.settings(100, **FAST))
    await start_node(**network.settings(200, **FAST))

    async def forks(node_id: int) -> list[bytes]:
        conn = await asyncpg.connect(network.dsns[node_id])
        try:
            rows = await conn.fetch("SELECT envelope FROM sequence_forks ORDER BY envelope_hash")
        finally:
            await conn.close()
        return [bytes(r[0]) for r in rows]

    async def settled() -> bool:
        return other.raw in await stored(a.address, 300) and len(await forks(100)) == 2

    await eventually(settled, within_s=60)
    assert await forks(100) == await forks(200)
