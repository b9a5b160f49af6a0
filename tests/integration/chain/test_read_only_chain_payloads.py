"""A read-only node (XIP-49 3.4) indexes the chain itself but serves chain payloads whose
blockchain proof a client accepts: signed by a registered node, not by its own key, which is
in no registry (3.3.4, query rule 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import commit_envelope, eventually, group_topic, publish
from xnode.client.node import NodeClient
from xnode.core.client_checks import check_received
from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.postgres import free_port

GROUP = bytes(range(16))


async def chain_payloads(address: str) -> list[bytes]:
    async with NodeClient(address) as client:
        found = await client.query(
            originators=[GROUP_MESSAGES_ORIGINATOR], cursor=Cursor(), limit=100
        )
    return [e.SerializeToString() for e in found]


async def test_a_read_only_node_serves_chain_payloads_clients_accept(
    start_node: Any, node_spec: NodeSpec, new_database: Callable[[], str], chain_env: ChainEnv
) -> None:
    address = f"127.0.0.1:{free_port()}"
    chain_env.register(node_spec, {100: address})
    chain = chain_env.settings()
    registered = await start_node(
        **node_settings(new_database(), node_spec, listen_address=address, **chain)
    )
    reader = await start_node(
        listen_address="127.0.0.1:0",
        database_dsn=new_database(),
        read_only=True,
        metrics_address="",
        **chain,
    )
    async with NodeClient(registered.address) as client:
        await publish(client, 100, [commit_envelope(GROUP)])

    served = await eventually(lambda: chain_payloads(reader.address), lambda found: len(found) == 1)
    keys = {n: k.public_key for n, k in node_spec.keys.items()}
    checked = check_received(served[0], keys, [group_topic(GROUP)])
    assert (checked.originator_node_id, checked.sequence_id) == (GROUP_MESSAGES_ORIGINATOR, 1)
    # The registered node's own copy, byte for byte: the same content, its proof.
    assert served == await chain_payloads(registered.address)
    # The read-only node's own index holds it (it did not just relay what it was told).
    assert reader.node_id == 0 and reader.chain is not None
    assert reader.chain.indexer.status.tip_number is not None
    assert parse_originator_envelope(served[0]).transaction_hash is not None
