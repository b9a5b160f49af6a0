"""The node registry read from the chain, and GetInboxIds from indexed identity updates."""

from __future__ import annotations

from typing import Any

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import publish, signed_update_envelope
from tests.support.identity_signers import Inbox, Wallet
from tests.support.waiting import eventually_value
from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.chain.admin import add_node, set_node_status
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor


async def test_registry_loads_and_follows_the_contract(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    assert node.node_id == 100
    registry = node.registry
    assert sorted(registry.current().nodes) == [100, 200, 300]
    assert registry.current().get(200).public_key == node_spec.keys[200].public_key
    set_node_status(chain_env.w3, chain_env.owner, chain_env.contracts_file, 300, False)
    newcomer = SigningKey.generate()
    add_node(
        chain_env.w3, chain_env.owner, chain_env.contracts_file, newcomer.public_key, "http://x"
    )

    async def snapshot() -> dict[int, bool]:
        return {n.node_id: n.enabled for n in registry.current().nodes.values()}

    await eventually_value(snapshot, lambda s: s == {100: True, 200: True, 300: False, 400: True})


async def _inbox_ids(client: NodeClient, identifiers: list[tuple[str, int]]) -> list[str | None]:
    request = api.GetInboxIdsRequest(
        requests=[
            api.GetInboxIdsRequest.Request(
                identifier=i, identifier_kind=association_pb2.IdentifierKind.ValueType(k)
            )
            for i, k in identifiers
        ]
    )
    response = await client.replication.GetInboxIds(request)
    return [r.inbox_id if r.HasField("inbox_id") else None for r in response.responses]


async def test_get_inbox_ids_follows_associations_and_revocations(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    eth = association_pb2.IDENTIFIER_KIND_ETHEREUM
    alice, bob, carol = Wallet(), Wallet(), Wallet()
    inbox_a, inbox_b = Inbox(alice), Inbox(bob)
    ALICE, BOB, CAROL = alice.address, bob.address, carol.address
    a, b = inbox_a.id, inbox_b.id
    async with NodeClient(node.address) as client:
        await publish(client, 100, [signed_update_envelope(inbox_a.create())])
        await publish(client, 100, [signed_update_envelope(inbox_b.create())])
        # BOB is added to A without being revoked from B: the latest association wins.
        await publish(
            client, 100, [signed_update_envelope(inbox_a.add(bob, carol), Cursor({1: 1}))]
        )
        assert await _inbox_ids(
            client,
            [
                (ALICE, eth),
                (BOB, eth),
                (CAROL.upper().replace("0X", "0x"), 0),
                ("0x" + "00" * 20, eth),
                ("not an address", eth),
            ],
        ) == [a, a, a, None, None]
        # A revokes BOB: B's association was never revoked, so BOB maps to B again.
        await publish(
            client, 100, [signed_update_envelope(inbox_a.revoke(bob, carol), Cursor({1: 3}))]
        )
        assert await _inbox_ids(client, [(ALICE, eth), (BOB, eth), (CAROL, eth)]) == [a, b, None]
