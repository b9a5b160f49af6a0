"""`xnode audit` with the chain: the registry comes from the NodeRegistry contract and every
indexed commit / identity update is checked against the contract event it came from."""

from __future__ import annotations

from typing import Any

import asyncpg

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import commit_envelope, publish, signed_update_envelope
from tests.support.identity_signers import Inbox
from xnode.client.node import NodeClient
from xnode.commands.audit import AuditOptions, audit_node
from xnode.config import Settings
from xnode.core.audit import FaultKind

GROUP = bytes(range(16))
INBOX = Inbox()


async def test_chain_payloads_are_audited_against_the_contract_events(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    settings = node_settings(database, node_spec, **chain_env.settings())
    node = await start_node(**settings)
    sent = [
        commit_envelope(GROUP, epoch=1),
        signed_update_envelope(INBOX.create()),
    ]
    async with NodeClient(node.address) as client:
        await publish(client, 100, sent)
    await node.stop()
    quiet = AuditOptions(show_progress=False)
    clean = await audit_node(Settings(**settings), quiet)
    assert clean.clean, clean.describe()
    assert clean.chain_events == 2 and clean.envelopes == 2

    conn = await asyncpg.connect(database)
    try:
        await conn.execute(
            "UPDATE originator_envelopes SET envelope = (SELECT envelope FROM"
            " originator_envelopes WHERE originator_node_id = 1) WHERE originator_node_id = 0"
        )
    finally:
        await conn.close()
    tampered = await audit_node(Settings(**settings), quiet)
    assert FaultKind.CHAIN_PAYLOAD in tampered.faults, tampered.describe()
    assert FaultKind.MISFILED in tampered.faults
