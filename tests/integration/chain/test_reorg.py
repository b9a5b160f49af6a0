"""Re-orgs made with anvil_reorg: the stored chain payloads end equal to the canonical chain,
and with enough confirmations live subscribers never see a payload that was dropped."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import (
    add_identity_update_call,
    add_message_call,
    canonical_payloads,
    client_bytes,
    commit_envelope,
    create_inbox,
    group_topic,
    identity_update_envelope,
    message_payload,
    publish,
    send_raw_event,
    stored_chain_payloads,
)
from tests.support.waiting import eventually, eventually_value
from xnode.chain import abi
from xnode.client.node import NodeClient, envelopes_of
from xnode.core.cursors import Cursor

GROUP = bytes(range(16))
INBOX = bytes(range(32))


def _message_tx(chain: ChainEnv, text: str, account: int = 1) -> dict[str, str]:
    """A transaction anvil_reorg mines into the new branch (from an unlocked dev account)."""
    data = add_message_call(GROUP, message_payload(GROUP, text))
    return {
        "from": chain.anvil.addresses[account],
        "to": chain.contracts.group_messages,
        "data": "0x" + data.hex(),
    }


def _update(text: str) -> bytes:
    address = "0x" + text.encode().hex().ljust(40, "0")[:40]
    return identity_update_envelope(INBOX, [create_inbox(address)]).SerializeToString()


async def _canonical(chain: ChainEnv) -> tuple[dict[int, Any], dict[int, Any]]:
    messages = await asyncio.to_thread(
        canonical_payloads, chain.url, chain.contracts.group_messages, abi.MESSAGE_SENT
    )
    updates = await asyncio.to_thread(
        canonical_payloads,
        chain.url,
        chain.contracts.identity_updates,
        abi.IDENTITY_UPDATE_CREATED,
    )
    return messages, updates


async def _stored(client: NodeClient) -> tuple[dict[int, Any], dict[int, Any]]:
    return await stored_chain_payloads(client, 0), await stored_chain_payloads(client, 1)


async def _matches_chain(client: NodeClient, chain: ChainEnv) -> tuple[Any, Any]:
    canonical = await _canonical(chain)
    return await eventually_value(lambda: _stored(client), lambda s: s == canonical)


async def _reorg_case(chain: ChainEnv, client: NodeClient, depth: int, replacements: int) -> None:
    for i in range(6):
        send_raw_event(
            chain.url,
            chain.owner,
            chain.contracts.group_messages,
            add_message_call(GROUP, message_payload(GROUP, f"old-{i}")),
        )
        if i % 2:
            send_raw_event(
                chain.url,
                chain.owner,
                chain.contracts.identity_updates,
                add_identity_update_call(INBOX, _update(f"old-{i}")),
            )
    before = await _matches_chain(client, chain)
    txs = [[_message_tx(chain, f"new-{depth}-{i}"), i] for i in range(replacements)]
    chain.rpc("anvil_reorg", depth, txs)
    after = await _matches_chain(client, chain)
    assert after != before  # the re-org really changed what is stored
    assert any(f"new-{depth}-0".encode() in payload for payload, _ in after[0].values())


async def test_reorgs_of_depth_1_2_and_5_leave_the_canonical_chain(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    async with NodeClient(node.address) as client:
        for depth, replacements in ((1, 1), (2, 2), (5, 2)):
            await _reorg_case(chain_env, client, depth, replacements)
        # The node keeps publishing on top of the new canonical chain.
        top = max(await stored_chain_payloads(client, 0))
        answer = await publish(client, 100, [commit_envelope(GROUP, 9, Cursor({0: top}))])
        assert (await stored_chain_payloads(client, 0))[top + 1][0] == client_bytes(answer[0])


async def test_reorg_while_the_node_is_down_is_found_at_restart(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    settings = node_settings(database, node_spec, **chain_env.settings())
    node = await start_node(**settings)
    for i in range(4):
        send_raw_event(
            chain_env.url,
            chain_env.owner,
            chain_env.contracts.group_messages,
            add_message_call(GROUP, message_payload(GROUP, f"old-{i}")),
        )
    async with NodeClient(node.address) as client:
        await _matches_chain(client, chain_env)
    await node.stop()
    chain_env.rpc("anvil_reorg", 3, [[_message_tx(chain_env, "new"), 0]])
    node = await start_node(**settings)
    async with NodeClient(node.address) as client:
        stored, _ = await _matches_chain(client, chain_env)
    assert sorted(stored) == [1, 2]


async def test_subscribers_see_only_confirmed_blocks(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    """With 2 confirmations, re-orgs of depth 1 and 2 never reach a live subscriber."""
    chain_env.register(node_spec)
    settings = node_settings(database, node_spec, **chain_env.settings(chain_confirmations=2))
    node = await start_node(**settings)
    received: list[bytes] = []
    async with NodeClient(node.address) as client:
        call = client.subscribe(topics=[group_topic(GROUP)])

        async def collect() -> None:
            async for envelope in envelopes_of(call):
                received.append(client_bytes(envelope))

        reader = asyncio.create_task(collect())
        for depth in (1, 2):
            for i in range(depth):
                send_raw_event(
                    chain_env.url,
                    chain_env.owner,
                    chain_env.contracts.group_messages,
                    add_message_call(GROUP, message_payload(GROUP, f"dropped-{depth}-{i}")),
                )
            await asyncio.sleep(0.3)  # the indexer polls meanwhile, and must not index them
            txs = [[_message_tx(chain_env, f"kept-{depth}-{i}"), i] for i in range(depth)]
            chain_env.rpc("anvil_reorg", depth, txs)
        chain_env.rpc("anvil_mine", 2)
        canonical, _ = await _matches_chain(client, chain_env)
        await eventually(lambda: len(received) >= len(canonical))
        call.cancel()
        reader.cancel()
    assert received == [payload for _, (payload, _) in sorted(canonical.items())]
    assert not [p for p in received if b"dropped" in p]
