"""The node registry read from the chain, and GetInboxIds from indexed identity updates."""

from __future__ import annotations

from typing import Any

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import (
    add_address,
    create_inbox,
    eventually,
    identity_update_envelope,
    publish,
    revoke_address,
)
from xmtp.identity.associations import association_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api.client import NodeClient
from xnode.chain.admin import add_node, set_node_status
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor

ALICE = "0x" + "a1" * 20
BOB = "0x" + "b0" * 20
CAROL = "0x" + "c4" * 20
INBOX_A = bytes([0xAA]) * 32
INBOX_B = bytes([0xBB]) * 32


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

    await eventually(snapshot, lambda s: s == {100: True, 200: True, 300: False, 400: True})


async def _inbox_ids(client: NodeClient, identifiers: list[tuple[str, int]]) -> list[str | None]:
    request = api.GetInboxIdsRequest(
        requests=[
            api.GetInboxIdsRequest.Request(identifier=i, identifier_kind=k) for i, k in identifiers
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
    a, b = INBOX_A.hex(), INBOX_B.hex()
    async with NodeClient(node.address) as client:
        await publish(client, 100, [identity_update_envelope(INBOX_A, [create_inbox(ALICE)])])
        await publish(client, 100, [identity_update_envelope(INBOX_B, [create_inbox(BOB)])])
        # BOB is added to A without being revoked from B: the latest association wins.
        await publish(
            client,
            100,
            [
                identity_update_envelope(
                    INBOX_A, [add_address(BOB), add_address(CAROL)], Cursor({1: 1})
                )
            ],
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
            client,
            100,
            [
                identity_update_envelope(
                    INBOX_A, [revoke_address(BOB), revoke_address(CAROL)], Cursor({1: 3})
                )
            ],
        )
        assert await _inbox_ids(client, [(ALICE, eth), (BOB, eth), (CAROL, eth)]) == [a, b, None]
