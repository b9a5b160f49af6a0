"""The scrub on real Postgres (replication.scrub): envelopes whose stored bytes changed under
a running node (a disk fault, tampering) are found, withdrawn, and fetched again from peers;
the node ends up serving the signed bytes and audits clean. `xnode audit --repair` does the
same at once, for a stopped node, and refuses to touch the node's own log while the registry
holds another key for it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg

from tests.conftest import Network
from tests.integration.export.helpers import run_cli_async
from tests.integration.replication.test_losses import FAST, QUIET, _published
from tests.integration.replication.test_replication import metric, stored
from tests.support.waiting import eventually
from xnode.commands.audit import audit_node
from xnode.config import Settings
from xnode.core.audit import FaultKind
from xnode.core.crypto import SigningKey
from xnode.core.registry import NodeEntry, Registry

SCRUBBING = {**FAST, "scrub_envelopes_per_second": 500.0}
# (sequence id, byte flipped): in the signed content, and in the signature (which the leaf
# does not commit to, but the originator's key must recover from)
TAMPERED = ((17, 20), (18, 24), (90, -12))


async def _flip_bytes(
    dsn: str, where: tuple[tuple[int, int], ...], originator: int = 100
) -> list[bytes]:
    conn = await asyncpg.connect(dsn)
    try:
        flipped = []
        for s, at in where:
            raw = bytes(
                await conn.fetchval(
                    "SELECT envelope FROM originator_envelopes"
                    " WHERE originator_node_id = $1 AND originator_sequence_id = $2",
                    originator,
                    s,
                )
            )
            bad = bytearray(raw)
            bad[at] ^= 0x40
            await conn.execute(
                "UPDATE originator_envelopes SET envelope = $3"
                " WHERE originator_node_id = $1 AND originator_sequence_id = $2",
                originator,
                s,
                bytes(bad),
            )
            flipped.append(bytes(bad))
    finally:
        await conn.close()
    return flipped


async def test_bytes_changed_on_disk_are_withdrawn_and_fetched_again(
    start_node: Any, network: Network
) -> None:
    mismatches = metric("xnode_scrub_leaves_total", outcome="mismatch")
    nodes, sent = await _published(network, start_node, 200, SCRUBBING)
    replica = nodes[1]
    # Not checked to be served as they are first: the scrub, at 500 leaves/s, may already
    # have withdrawn them by the time a query reached the node (it did once on a busy machine).
    await _flip_bytes(network.dsns[200], TAMPERED)

    async def restored() -> bool:
        return await stored(replica.address, 100) == sent

    await eventually(restored, within_s=60)
    assert metric("xnode_scrub_leaves_total", outcome="mismatch") - mismatches >= 3
    verdict = await audit_node(Settings(**network.settings(200, **SCRUBBING)), QUIET)
    assert verdict.clean, verdict.describe()


async def test_audit_repair_withdraws_bad_bytes_at_once_and_the_node_fetches_them(
    start_node: Any, network: Network
) -> None:
    nodes, sent = await _published(network, start_node, 120, FAST)  # no background scrub
    await nodes[1].stop()
    await _flip_bytes(network.dsns[200], TAMPERED)
    flags = ["--database-dsn", network.dsns[200], "--nodes-file", str(network.spec.nodes_file)]
    repaired = await run_cli_async("audit", "--repair", "--no-progress", *flags)
    assert "3 envelopes withdrawn" in repaired.stdout, repaired.stdout + repaired.stderr
    assert repaired.returncode == 1  # the audit after it: three losses until peers serve them
    assert repaired.stdout.count(FaultKind.LOST.value) >= 3, repaired.stdout
    replica = await start_node(**network.settings(200, **FAST))

    async def restored() -> bool:
        return await stored(replica.address, 100) == sent

    await eventually(restored, within_s=60)
    clean = await run_cli_async("audit", "--no-progress", *flags)
    assert clean.returncode == 0 and "audit: CLEAN" in clean.stdout, clean.stdout


async def test_audit_repair_refuses_to_withdraw_the_node_s_own_log_under_another_key(
    start_node: Any, network: Network, tmp_path: Path
) -> None:
    """The registry holds another key for node 100 than the one its database was claimed
    with: a scrub would find every envelope node 100 signed "unsigned" and withdraw its
    whole log. `xnode audit --repair` refuses, naming both keys, and deletes nothing."""
    nodes, sent = await _published(network, start_node, 20, FAST)
    for node in nodes:
        await node.stop()
    registry = Registry.from_json(network.spec.nodes_file.read_text())
    entry = registry.nodes[100]
    other = SigningKey.generate().public_key
    registry.nodes[100] = NodeEntry(100, other, entry.http_address, entry.enabled)
    nodes_file = tmp_path / "nodes.json"
    nodes_file.write_text(registry.to_json())
    flags = ["--database-dsn", network.dsns[100], "--nodes-file", str(nodes_file)]
    refused = await run_cli_async("audit", "--repair", "--no-progress", *flags)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "0x" + other.hex() in refused.stderr, refused.stderr
    assert "0x" + entry.public_key.hex() in refused.stderr, refused.stderr
    conn = await asyncpg.connect(network.dsns[100])
    try:
        held = await conn.fetchval(
            "SELECT count(*) FROM originator_envelopes WHERE originator_node_id = 100"
        )
    finally:
        await conn.close()
    assert held == len(sent)
