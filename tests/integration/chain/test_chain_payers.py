"""Chain payloads keep their payer (issue 11): the indexed envelope of a commit carries the
payer's signed PayerEnvelope, and the gas its transaction cost is recorded for the payer."""

from __future__ import annotations

from typing import Any

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import chain_proof, commit_envelope, group_topic
from xnode.client.node import NodeClient
from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, validate_payer_envelope

GROUP = bytes(range(16))


async def test_a_commits_indexed_envelope_carries_the_payers_signature_and_gas(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    payer = SigningKey.generate()
    signed = build_payer_envelope(commit_envelope(GROUP, epoch=1), payer, 100, retention_days=30)
    async with NodeClient(node.address) as client:
        [answer] = await client.publish([signed])
        [found] = await client.query(topics=[group_topic(GROUP)])
    assert found.SerializeToString() == answer.SerializeToString()
    indexed = chain_proof(found, node_spec.keys[100].public_key)
    # What the payer signed, byte for byte: signature, target and retention included.
    assert indexed.payer_envelope.SerializeToString() == signed.SerializeToString()
    assert indexed.payer_envelope.message_retention_days == 30
    checked = validate_payer_envelope(indexed.payer_envelope, 100)  # client check 3.3.4.1
    assert checked.payer_address == payer.address
    receipt = chain_env.w3.eth.get_transaction_receipt(found.blockchain_proof.transaction_hash)
    row = await node.pool.fetchrow(
        "SELECT envelopes, gas_wei FROM payer_usage"
        " WHERE payer_address = $1 AND originator_node_id = $2",
        payer.address,
        GROUP_MESSAGES_ORIGINATOR,
    )
    assert row is not None
    assert row[0] == 1
    assert int(row[1]) == receipt["gasUsed"] * receipt["effectiveGasPrice"] > 0
