"""The whole retention pipeline: a real node, `xnode export`, spark_jobs.retention_expiry on the
session's Spark, `xnode prune`, then the node's queries."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import (
    DAY_S,
    NS_PER_S,
    PAYER,
    Item,
    chain_row,
    group,
    publish,
    received_row,
    run_cli_async,
    store_received,
    table_rows,
)
from xnode.client.node import NodeClient
from xnode.commands.export import export_node
from xnode.config import Settings
from xnode.core.envelopes import IndexedEnvelope, parse_originator_envelope
from xnode.core.topics import TopicKind

G, W, K, ID = (
    TopicKind.GROUP_MESSAGES,
    TopicKind.WELCOME_MESSAGES,
    TopicKind.KEY_PACKAGES,
    TopicKind.IDENTITY_UPDATES,
)
# Node 100's own envelopes, sequence ids 1-10; "short" ones keep 1 day, the rest the default.
PUBLISHED = [
    Item(G, group(1), b"1 short", 1),
    Item(G, group(1), b"2 short", 1),
    Item(W, group(2), b"3 short", 1),
    Item(ID, group(4), b"4 identity"),
    Item(K, group(3), b"5 short", 1),
    Item(G, group(1), b"6 default"),
    Item(G, group(1), b"7 short", 1),
    Item(G, group(1), b"8 short", 1),
    Item(ID, group(4), b"9 identity"),
    Item(G, group(1), b"10 default"),
]


def old_rows(spec: NodeSpec) -> list[IndexedEnvelope]:
    """Received from originator 200: 1-3 originated 400 days ago (expired by the XIP's
    default), 4 an identity update as old, 5 recent, 6-7 kept a day and originated two days
    ago; and a chain identity update."""
    old = (int(time.time()) - 400 * DAY_S) * NS_PER_S
    days_ago = (int(time.time()) - 2 * DAY_S) * NS_PER_S
    key = spec.keys[200]
    return [
        received_row(200, key, 6, days_ago, Item(G, group(1), b"short 6", 1)),
        received_row(200, key, 7, days_ago + 1, Item(K, group(3), b"short 7", 1)),
        received_row(200, key, 1, old, Item(G, group(1), b"old 1")),
        received_row(200, key, 2, old + 1, Item(G, group(1), b"old 2")),
        received_row(200, key, 3, old + 2, Item(W, group(2), b"old 3", 30)),
        received_row(200, key, 4, old + 3, Item(ID, group(5), b"old identity")),
        received_row(200, key, 5, time.time_ns(), Item(G, group(1), b"recent")),
        chain_row(1, 1, old, Item(ID, group(6), b"chain identity update")),
    ]


async def query_keys(address: str) -> set[tuple[int, int]]:
    """(originator, sequence id) of everything the node's query API returns."""
    # By originator: a key package's topic is its installation key, not a test group id.
    async with NodeClient(address) as client:
        found = await client.query(originators=[0, 1, 100, 200], limit=1000)
    parsed = [parse_originator_envelope(e.SerializeToString()) for e in found]
    return {(e.originator_node_id, e.sequence_id) for e in parsed}


async def test_export_plan_prune_round_trip(
    spark: Any,
    retention: ModuleType,
    inputs: ModuleType,
    start_node: Any,
    database: str,
    node_spec: NodeSpec,
    tmp_path: Path,
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    await publish(node.address, 100, PUBLISHED)
    await store_received(database, old_rows(node_spec))
    everything = set(await table_rows(database))
    # Before any plan or prune, queries already hide what has expired (200's 1-3, 6-7).
    expired_now = {(200, 1), (200, 2), (200, 3), (200, 6), (200, 7)}
    assert await query_keys(node.address) == everything - expired_now

    out = tmp_path / "export"
    settings = Settings(**node_settings(database, node_spec))
    await export_node(settings, out, show_progress=False)
    files = inputs.find_envelope_files([out])  # the jobs' own schema check passes
    rows = await asyncio.to_thread(lambda: inputs.load_envelopes(spark, files).collect())
    exported = {(r.originator_node_id, r.originator_sequence_id): r for r in rows}
    assert set(exported) == everything
    assert exported[100, 1].payer_address == PAYER.address
    assert exported[1, 1].payer_address is None and exported[1, 1].expiry_unixtime == 0

    # A plan for two days ahead (when node 100's 1-day envelopes will have expired) is made,
    # but no node applies it before its time: it would delete what has not expired yet.
    ahead_path = tmp_path / "ahead.json"
    ahead = int(time.time()) + 2 * DAY_S
    await asyncio.to_thread(retention.run, spark, [out], ahead_path, ahead)
    refused = await run_cli_async("prune", "--plan", str(ahead_path), "--database-dsn", database)
    assert refused.returncode == 2
    assert f"as_of_unixtime {ahead} is ahead of this node's clock" in refused.stderr
    assert set(await table_rows(database)) == everything

    plan_path = tmp_path / "plan.json"
    plan = await asyncio.to_thread(retention.run, spark, [out], plan_path)  # as of now

    assert [
        (r["originator_node_id"], r["first_sequence_id"], r["last_sequence_id"])
        for r in plan["ranges"]
    ] == [(200, 1, 3), (200, 6, 7)]
    assert plan["envelope_count"] == 5

    pruned = await run_cli_async(
        "prune", "--plan", str(plan_path), "--database-dsn", database, "--batch-size", "2"
    )
    assert pruned.returncode == 0, pruned.stderr
    assert "originator 200: deleted 5" in pruned.stdout
    gone = expired_now
    assert set(await table_rows(database)) == everything - gone
    remaining = await query_keys(node.address)
    assert remaining == everything - gone
    assert {(100, 4), (100, 9), (200, 4)} <= remaining  # identity updates stay

    again = await run_cli_async("prune", "--plan", str(plan_path), "--database-dsn", database)
    assert again.returncode == 0, again.stderr
    assert "total: deleted 0 envelopes" in again.stdout
    assert json.loads(plan_path.read_text())["version"] == 1
