"""Losses (replication.losses): envelopes deleted from a node's database while their leaves
stay, minutes old with months of retention left. The audit calls them a loss (not CLEAN:
nothing is excused unless provably expired), and the node fetches them back from its peers,
of another originator's log and of its own, after which the audit is clean."""

from __future__ import annotations

import time
from typing import Any

import asyncpg

from tests.conftest import Network
from tests.integration.export.helpers import Item, group, publish
from tests.integration.logs.helpers import checkpoint_at, log_api
from tests.integration.replication.test_replication import metric, stored
from tests.support.waiting import eventually
from xnode.commands.audit import AuditOptions, audit_node
from xnode.config import Settings
from xnode.core.audit import FaultKind
from xnode.core.topics import TopicKind

GROUP = Item(TopicKind.GROUP_MESSAGES, group(7))
FAST = {
    "log_checkpoint_envelopes": 50,
    "log_checkpoint_seconds": 0.2,
    "replication_repair_seconds": 0.5,
}
QUIET = AuditOptions(show_progress=False)
HEALED_WITHIN_S = 60.0


async def _delete_envelopes(dsn: str, originator: int, first: int, last: int) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        status = await conn.execute(
            "DELETE FROM originator_envelopes WHERE originator_node_id = $1"
            " AND originator_sequence_id BETWEEN $2 AND $3",
            originator,
            first,
            last,
        )
        leaves = await conn.fetchval(
            "SELECT count(*) FROM log_leaves WHERE originator_node_id = $1", originator
        )
    finally:
        await conn.close()
    assert leaves > last  # the leaves stay: only the envelopes are lost
    return int(status.split()[-1])


async def _published(
    network: Network, start_node: Any, count: int, settings: dict[str, Any] = FAST
) -> tuple[Any, list[bytes]]:
    """Nodes 100, 200, 300 running; `count` envelopes published to 100, all three holding
    them and 100's checkpoint over them."""
    nodes = [await start_node(**network.settings(n, **settings)) for n in (100, 200, 300)]
    sent = await publish(nodes[0].address, 100, [GROUP] * count)
    key = network.spec.keys[100].public_key
    for node in nodes:
        async with log_api(node.address) as api:
            await checkpoint_at(api, 100, key, count)
    for node in nodes[1:]:

        async def holds_all(node: Any = node) -> bool:
            return await stored(node.address, 100) == sent

        await eventually(holds_all)
    return nodes, sent


async def _lost_then_healed(
    network: Network,
    start_node: Any,
    node: Any,
    node_id: int,
    sent: list[bytes],
    node_settings: dict[str, Any] = FAST,
) -> None:
    """Stops `node`, deletes 101 envelopes of originator 100 from its database, audits it
    (a loss of 101), restarts it and waits until it holds everything and audits clean."""
    settings = Settings(**network.settings(node_id, **node_settings))
    await node.stop()
    assert await _delete_envelopes(network.dsns[node_id], 100, 150, 250) == 101
    before = await audit_node(settings, QUIET)
    assert before.faults == {FaultKind.LOST: 101}, before.describe()
    assert "CLEAN" not in before.describe()
    restored = metric("xnode_repair_envelopes_total", originator="100", outcome="restored")
    started = time.monotonic()
    again = await start_node(**network.settings(node_id, **node_settings))

    async def healed() -> bool:
        return await stored(again.address, 100) == sent

    await eventually(healed, within_s=HEALED_WITHIN_S)
    assert time.monotonic() - started < HEALED_WITHIN_S
    after = metric("xnode_repair_envelopes_total", originator="100", outcome="restored")
    assert after - restored >= 101
    clean = await audit_node(settings, QUIET)
    assert clean.clean and clean.expired == 0, clean.describe()


async def test_envelopes_lost_from_a_replica_are_a_loss_and_are_fetched_back(
    start_node: Any, network: Network
) -> None:
    nodes, sent = await _published(network, start_node, 400)
    await _lost_then_healed(network, start_node, nodes[1], 200, sent)


async def test_at_the_default_repair_interval_a_restarted_node_heals_within_a_minute(
    start_node: Any, network: Network
) -> None:
    defaults = {k: v for k, v in FAST.items() if k != "replication_repair_seconds"}
    nodes, sent = await _published(network, start_node, 400, defaults)
    await _lost_then_healed(network, start_node, nodes[1], 200, sent, defaults)


async def test_an_originator_that_lost_its_own_envelopes_fetches_them_from_peers(
    start_node: Any, network: Network
) -> None:
    nodes, sent = await _published(network, start_node, 400)
    await _lost_then_healed(network, start_node, nodes[0], 100, sent)
