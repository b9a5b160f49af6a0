"""Three `xnode run` processes on one anvil: the registry, commits and identity updates come
from the chain, every node indexes the same payloads and vouches for them itself."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from tests.conftest import ChainEnv, NodeProcess, NodeSpec
from tests.integration.chain.helpers import (
    chain_proof,
    client_bytes,
    commit_envelope,
    group_topic,
    inbox_topic,
    publish,
    signed_update_envelope,
)
from tests.support.identity_signers import Inbox
from tests.support.waiting import eventually_value
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import PgCluster, free_port

GROUP = bytes([0x42]) * 16
ALICES_INBOX = Inbox()
ALICE = ALICES_INBOX.owner.address
INBOX = ALICES_INBOX.key


def _database(cluster: PgCluster) -> str:
    name = f"c_{uuid.uuid4().hex[:12]}"
    cluster.create_database(name)
    return cluster.dsn(name)


def _spawn_all(
    spawn_node: Callable[..., NodeProcess],
    cluster: PgCluster,
    spec: NodeSpec,
    chain: ChainEnv,
    addresses: dict[int, str],
) -> None:
    settings = {k: str(v) for k, v in chain.settings(chain_poll_seconds=0.1).items()}
    for node_id, address in addresses.items():
        spawn_node(
            _database(cluster), spec, node_id, wait=False, listen_address=address, **settings
        )
    for address in addresses.values():
        assert wait_serving(address, 60), f"node at {address} did not start"


async def test_three_nodes_index_the_same_chain_payloads(
    chain_env: ChainEnv,
    pg_cluster: PgCluster,
    node_spec: NodeSpec,
    spawn_node: Callable[..., NodeProcess],
) -> None:
    addresses = {n: f"127.0.0.1:{free_port()}" for n in node_spec.keys}
    chain_env.register(node_spec, addresses)
    _spawn_all(spawn_node, pg_cluster, node_spec, chain_env, addresses)
    commit = commit_envelope(GROUP)
    update = signed_update_envelope(ALICES_INBOX.create())
    async with NodeClient(addresses[100]) as first, NodeClient(addresses[200]) as second:
        [sent_commit] = await publish(first, 100, [commit])
        [sent_update] = await publish(second, 200, [update])
    chain_proof(sent_commit, node_spec.keys[100].public_key)
    chain_proof(sent_update, node_spec.keys[200].public_key)
    for node_id, address in addresses.items():
        async with NodeClient(address) as client:
            found = await eventually_value(
                partial(client.query, topics=[group_topic(GROUP), inbox_topic(INBOX)]),
                lambda f: len(f) == 2,
            )
            inbox = await client.replication.GetInboxIds(
                api.GetInboxIdsRequest(requests=[api.GetInboxIdsRequest.Request(identifier=ALICE)])
            )
        key = node_spec.keys[node_id].public_key
        parsed = [chain_proof(e, key) for e in found]  # each node signs its own proof
        assert [(p.originator_node_id, p.sequence_id) for p in parsed] == [(0, 1), (1, 1)]
        assert [client_bytes(e) for e in found] == [
            commit.SerializeToString(),
            update.SerializeToString(),
        ]
        assert [e.unsigned_originator_envelope for e in found] == [
            sent_commit.unsigned_originator_envelope,
            sent_update.unsigned_originator_envelope,
        ]
        assert inbox.responses[0].inbox_id == INBOX.hex()


async def test_a_node_whose_key_is_not_registered_refuses_to_start(
    chain_env: ChainEnv,
    pg_cluster: PgCluster,
    node_spec: NodeSpec,
    spawn_node: Callable[..., NodeProcess],
) -> None:
    chain_env.register(node_spec)
    node_spec.keys[400] = SigningKey.generate()
    settings: dict[str, Any] = {k: str(v) for k, v in chain_env.settings().items()}
    node = spawn_node(_database(pg_cluster), node_spec, 400, wait=False, **settings)
    code = await asyncio.to_thread(node.proc.wait, 60)
    assert code == 2
    output = node.output()
    assert "cannot start" in output
    assert (
        f"public key 0x{node_spec.keys[400].public_key.hex()} is not in the node registry" in output
    )
