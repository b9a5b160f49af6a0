"""The byzantine harness's withholding run on one real node: node 500, the scripted
withholder (xnode.devtools.byzantine), commits to its log in a signed checkpoint, never
serves one committed envelope and signs holdings that leave it out. Node 100 replicates
from it, repairs 500's log from 500 itself and files a WITHHOLDING report against node 500
that proves itself offline, from the report and the registry keys alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spark_jobs.misbehavior_aggregation import verify_report
from tests.conftest import REPLICATION_TEST_SETTINGS, NodeSpec, node_settings
from tests.integration.replication.test_losses import FAST
from tests.integration.replication.test_replication import stored
from tests.integration.replication.test_withholding import _reports
from tests.waiting import eventually, eventually_value
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.crypto import SigningKey
from xnode.core.misbehavior import WITHHOLDING
from xnode.core.withholding import extended, why_not_withheld
from xnode.devtools.byzantine import peer
from xnode.devtools.postgres import free_port


async def test_a_withholding_originator_is_reported_with_a_proof(
    start_node: Any, database: str, tmp_path: Path
) -> None:
    spec = NodeSpec(tmp_path, {n: SigningKey.generate() for n in (100, 500)})
    addresses = {n: f"127.0.0.1:{free_port()}" for n in spec.keys}
    spec.write(addresses)
    behavior = peer.withholding(peer.Originator(500, spec.keys[500]))
    log = behavior.log
    assert log is not None
    withholder = peer.MisbehavingPeer(500, behavior)
    await withholder.start(addresses[500])
    try:
        settings = {**REPLICATION_TEST_SETTINGS, **FAST, "listen_address": addresses[100]}
        node = await start_node(**node_settings(database, spec, 100, **settings))

        async def holds_what_was_served() -> bool:
            return await stored(node.address, 500) == log.served

        await eventually(holds_what_was_served, what="100 holds every envelope 500 served")

        async def withholding() -> list[tuple[int, int, bytes]]:
            return [r for r in await _reports(node.address) if r[0] == WITHHOLDING]

        found = await eventually_value(withholding, bool, what="a WITHHOLDING report")
    finally:
        await withholder.stop()
    assert [(kind, accused) for kind, accused, _ in found] == [(WITHHOLDING, 500)]
    report = mb.MisbehaviorReport.FromString(found[0][2])
    unsigned = mb.UnsignedMisbehaviorReport.FromString(report.unsigned_misbehavior_report)
    proof = extended(unsigned).withholding
    assert proof.commitment.sequence_id == peer.WITHHELD
    assert proof.commitment.checkpoint == log.checkpoint.signed
    assert why_not_withheld(proof, 500, {spec.keys[500].public_key}) is None
    registry = {n: frozenset({k.public_key}) for n, k in spec.keys.items()}
    checked = verify_report(found[0][2], registry)
    assert checked["proof_error"] is None
    assert checked["host_signer"] == spec.keys[100].public_key
