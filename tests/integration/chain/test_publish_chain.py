"""Commits and identity updates published through a node go to the chain and come back as
indexed envelopes with BlockchainProofs; other payloads are still originated."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import (
    application,
    chain_proof,
    client_bytes,
    commit_envelope,
    group_topic,
    inbox_topic,
    publish,
    signed_update_envelope,
)
from tests.support.identity_signers import Inbox
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope

GROUP = bytes(range(16))
INBOX = Inbox()


async def test_commit_and_identity_update_round_trip_with_proofs(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    key = node_spec.keys[100].public_key
    sent = [
        commit_envelope(GROUP, epoch=1),
        signed_update_envelope(INBOX.create()),
    ]
    async with NodeClient(node.address) as client:
        answers = await publish(client, 100, sent)
        found_group = await client.query(topics=[group_topic(GROUP)])
        found_inbox = await client.query(topics=[inbox_topic(INBOX.key)])
    commit_env, update_env = (chain_proof(a, key) for a in answers)
    assert (commit_env.originator_node_id, commit_env.sequence_id) == (0, 1)
    assert (update_env.originator_node_id, update_env.sequence_id) == (1, 1)
    # The client's ClientEnvelope bytes come back unchanged.
    assert [client_bytes(a) for a in answers] == [e.SerializeToString() for e in sent]
    assert [e.SerializeToString() for e in found_group] == [answers[0].SerializeToString()]
    assert [e.SerializeToString() for e in found_inbox] == [answers[1].SerializeToString()]
    block = chain_env.w3.eth.get_block(
        chain_env.w3.eth.get_transaction_receipt(answers[0].blockchain_proof.transaction_hash)[
            "blockNumber"
        ]
    )
    assert commit_env.originator_ns == block["timestamp"] * 10**9


async def test_application_messages_are_originated_next_to_chain_payloads(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    async with NodeClient(node.address) as client:
        first = await publish(client, 100, [commit_envelope(GROUP)])
        mixed = await publish(
            client,
            100,
            [
                group_message_envelope(GROUP, application(GROUP), Cursor({0: 1})),
                commit_envelope(GROUP, epoch=2, depends_on=Cursor({0: 1})),
            ],
        )
    parsed = [parse_originator_envelope(e.SerializeToString()) for e in [*first, *mixed]]
    assert [(p.originator_node_id, p.sequence_id) for p in parsed] == [(0, 1), (100, 1), (0, 2)]
    assert parsed[1].signer_public_key() == node_spec.keys[100].public_key


async def test_depends_on_must_name_the_latest_chain_payload_on_the_topic(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    async with NodeClient(node.address) as client:
        await publish(client, 100, [commit_envelope(GROUP)])
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            plain = group_message_envelope(GROUP, application(GROUP), Cursor({0: 1}))
            await publish(client, 100, [plain, commit_envelope(GROUP, epoch=2)])  # 0:0
        # Another group's first commit depends on nothing there.
        await publish(client, 100, [commit_envelope(bytes(16))])
        ok = await publish(client, 100, [commit_envelope(GROUP, 2, Cursor({0: 1}))])
        originated = await client.query(originators=[100])
    assert stale.value.code() == grpc.StatusCode.ABORTED
    assert originated == [], "the refused request's application message must not be stored"
    assert (stale.value.details() or "").startswith("payer_envelopes[1]: depends_on[0] is 0")
    assert "latest chain payload" in (stale.value.details() or "")
    assert "0:1" in (stale.value.details() or "")
    assert parse_originator_envelope(ok[0].SerializeToString()).sequence_id == 3


async def test_concurrent_publishes_use_consecutive_nonces(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    groups = [bytes([i]) * 16 for i in range(1, 21)]
    async with NodeClient(node.address) as client:
        answers = await asyncio.gather(
            *(publish(client, 100, [commit_envelope(g)]) for g in groups)
        )
    w3 = chain_env.w3
    hashes = [a[0].blockchain_proof.transaction_hash for a in answers]
    nonces = sorted(w3.eth.get_transaction(h)["nonce"] for h in hashes)
    assert nonces == list(range(nonces[0], nonces[0] + len(groups)))
    seqs = sorted(parse_originator_envelope(a[0].SerializeToString()).sequence_id for a in answers)
    assert seqs == list(range(1, 21))


async def test_processes_sharing_a_database_index_once_and_all_publish(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    """One process holds the indexer lock; the others publish and wait on the store. When
    the indexing process stops, another takes over."""
    chain_env.register(node_spec)
    settings = node_settings(database, node_spec, **chain_env.settings())
    first = await start_node(**settings)
    second = await start_node(**settings)
    async with NodeClient(second.address) as client:
        one = await publish(client, 100, [commit_envelope(GROUP)])
    await first.stop()
    async with NodeClient(second.address) as client:
        two = await publish(client, 100, [commit_envelope(GROUP, 2, Cursor({0: 1}))])
        stored = await client.query(topics=[group_topic(GROUP)])
    assert [e.SerializeToString() for e in stored] == [
        one[0].SerializeToString(),
        two[0].SerializeToString(),
    ]


async def test_application_messages_must_follow_a_recent_commit(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    """XIP-49 3.3.4 rule 2.4 for originated payloads, as far as the official client allows:
    a message more than 3 commits behind its group is ABORTED; one just behind (libxmtp sends
    one right after its own commit) or with no chain dependency (the client's before any
    commit of its group is indexed) is accepted; one naming a commit the index has not
    reached is UNAVAILABLE."""
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    async with NodeClient(node.address) as client:
        await publish(client, 100, [commit_envelope(GROUP)])
        for epoch in range(2, 6):
            await publish(client, 100, [commit_envelope(GROUP, epoch, Cursor({0: epoch - 1}))])
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            old = group_message_envelope(GROUP, application(GROUP, 1), Cursor({0: 1}))
            await publish(client, 100, [old])
        with pytest.raises(grpc.aio.AioRpcError) as ahead:
            future = group_message_envelope(GROUP, application(GROUP, 9), Cursor({0: 99}))
            await publish(client, 100, [future])
        accepted = await publish(
            client,
            100,
            [
                group_message_envelope(GROUP, application(GROUP, 5), Cursor({0: 5})),
                group_message_envelope(GROUP, application(GROUP, 4), Cursor({0: 4})),
                group_message_envelope(GROUP, application(GROUP, 2), Cursor({0: 2})),
                group_message_envelope(GROUP, application(GROUP, 2)),
            ],
        )
    assert stale.value.code() == grpc.StatusCode.ABORTED
    assert "4 commits behind the latest" in (stale.value.details() or "")
    assert ahead.value.code() == grpc.StatusCode.UNAVAILABLE
    originators = [
        parse_originator_envelope(a.SerializeToString()).originator_node_id for a in accepted
    ]
    assert originators == [100] * 4
