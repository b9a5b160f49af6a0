"""A read-only node (XIP-49 3.4) indexes the chain itself but serves chain payloads whose
blockchain proof a client accepts: signed by a registered node, not by its own key, which is
in no registry (3.3.4, query rule 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import commit_envelope, group_topic, publish
from tests.support.waiting import eventually_value
from xnode.client.node import NodeClient
from xnode.config import Settings
from xnode.core.chain_payloads import ChainEvent, NotVouched, build_chain_payload
from xnode.core.client_checks import check_received
from xnode.core.constants import GROUP_MESSAGES_ORIGINATOR, NS_PER_SECOND
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.postgres import free_port
from xnode.replication.chain_copies import PeerChainCopies
from xnode.replication.worker import ReplicationConfig
from xnode.static_registry import StaticRegistrySource

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

    served = await eventually_value(
        lambda: chain_payloads(reader.address), lambda found: len(found) == 1
    )
    keys = {n: k.public_key for n, k in node_spec.keys.items()}
    checked = check_received(served[0], keys, [group_topic(GROUP)])
    assert (checked.originator_node_id, checked.sequence_id) == (GROUP_MESSAGES_ORIGINATOR, 1)
    # The registered node's own copy, byte for byte: the same content, its proof.
    assert served == await chain_payloads(registered.address)
    # The read-only node's own index holds it (it did not just relay what it was told).
    assert reader.node_id == 0 and reader.chain is not None
    assert reader.chain.indexer.status.tip_number is not None
    assert parse_originator_envelope(served[0]).transaction_hash is not None


def own_copy(registered_raw: bytes, key: SigningKey) -> Any:
    """The payload as a node with `key` indexes the same event: same content, its proof."""
    env = parse_originator_envelope(registered_raw)
    assert env.transaction_hash is not None
    event = ChainEvent(
        originator=env.originator_node_id,
        sequence_id=env.sequence_id,
        key=GROUP,
        payload=env.payer_envelope.SerializeToString(),
        block_number=1,
        block_hash=bytes(32),
        transaction_hash=env.transaction_hash,
        log_index=0,
    )
    return build_chain_payload(event, env.originator_ns // NS_PER_SECOND, key)


async def test_no_registered_copy_no_payload(
    start_node: Any, node_spec: NodeSpec, new_database: Callable[[], str], chain_env: ChainEnv
) -> None:
    """What a read-only node's indexer asks before it stores a page: a registered node's copy
    of each payload, or NotVouched (the page waits) while none answers."""
    address = f"127.0.0.1:{free_port()}"
    chain_env.register(node_spec, {100: address})
    settings = node_settings(
        new_database(), node_spec, listen_address=address, **chain_env.settings()
    )
    registered = await start_node(**settings)
    async with NodeClient(registered.address) as client:
        await publish(client, 100, [commit_envelope(GROUP)])
    [theirs] = await eventually_value(
        lambda: chain_payloads(address), lambda found: len(found) == 1
    )
    mine = own_copy(theirs, SigningKey.generate())
    assert mine.raw != theirs

    node_spec.write({100: address})
    copies = PeerChainCopies(
        StaticRegistrySource(node_spec.nodes_file),
        ReplicationConfig.from_settings(Settings(**settings)),
    )
    try:
        [vouched] = await copies.vouched([mine])
        assert vouched.raw == theirs and vouched.event == mine.event
        await registered.stop()
        with pytest.raises(NotVouched, match="no registered node serves them yet"):
            await copies.vouched([mine])
    finally:
        await copies.close()
