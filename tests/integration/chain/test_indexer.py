"""The indexer against a real anvil: backfill, resume after restart, malformed events, RPC
outages, and start-up errors for a chain or contracts that do not match."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import grpc
import pytest

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import (
    TcpProxy,
    add_identity_update_call,
    add_message_call,
    application,
    canonical_payloads,
    commit_envelope,
    create_inbox,
    identity_update_envelope,
    message_payload,
    publish,
    send_raw_event,
    stored_chain_payloads,
)
from tests.support.waiting import eventually_value
from xnode.chain import abi
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.cursors import Cursor
from xnode.server.bootstrap import StartupError

GROUP = bytes(range(16))
INBOX = bytes(range(32))


def send_messages(chain: ChainEnv, texts: list[str], group: bytes = GROUP) -> None:
    for text in texts:
        send_raw_event(
            chain.url,
            chain.owner,
            chain.contracts.group_messages,
            add_message_call(group, message_payload(group, text)),
        )


async def wait_indexed(client: NodeClient, chain: ChainEnv, count: int) -> None:
    canonical = await eventually_value(
        lambda: asyncio.to_thread(
            canonical_payloads, chain.url, chain.contracts.group_messages, abi.MESSAGE_SENT
        ),
        lambda c: len(c) >= count,
    )
    await eventually_value(lambda: stored_chain_payloads(client, 0), lambda s: s == canonical)


async def test_backfills_from_the_deployment_block_in_pages(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    send_messages(chain_env, [f"m{i}" for i in range(25)])
    settings = node_settings(database, node_spec, **chain_env.settings(chain_page_blocks=4))
    node = await start_node(**settings)
    async with NodeClient(node.address) as client:
        await wait_indexed(client, chain_env, 25)
        stored = await stored_chain_payloads(client, 0)
    assert sorted(stored) == list(range(1, 26))


async def test_resumes_after_restart_without_duplicates(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    send_messages(chain_env, ["a", "b", "c"])
    settings = node_settings(database, node_spec, **chain_env.settings())
    node = await start_node(**settings)
    async with NodeClient(node.address) as client:
        await wait_indexed(client, chain_env, 3)
    await node.stop()
    conn = await asyncpg.connect(database)
    stopped_at = await conn.fetchval("SELECT min(block_number) FROM chain_progress")
    send_messages(chain_env, ["d", "e"])
    node = await start_node(**settings)
    async with NodeClient(node.address) as client:
        await wait_indexed(client, chain_env, 5)
        stored = await stored_chain_payloads(client, 0)
    assert sorted(stored) == [1, 2, 3, 4, 5]
    assert await conn.fetchval("SELECT min(block_number) FROM chain_progress") > stopped_at
    await conn.close()


async def test_malformed_events_are_recorded_and_skipped(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    gm, iu = chain_env.contracts.group_messages, chain_env.contracts.identity_updates
    send_raw_event(chain_env.url, chain_env.owner, gm, add_message_call(GROUP, b"\xff\xfegarbage"))
    wrong_topic = message_payload(bytes(16), "for another group")
    send_raw_event(chain_env.url, chain_env.owner, gm, add_message_call(GROUP, wrong_topic))
    send_raw_event(chain_env.url, chain_env.owner, iu, add_identity_update_call(INBOX, b"\x01"))
    send_messages(chain_env, ["fine"])
    good_update = identity_update_envelope(INBOX, [create_inbox("0x" + "11" * 20)])
    send_raw_event(
        chain_env.url,
        chain_env.owner,
        iu,
        add_identity_update_call(INBOX, good_update.SerializeToString()),
    )
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    async with NodeClient(node.address) as client:
        messages = await eventually_value(
            lambda: stored_chain_payloads(client, 0), lambda s: 3 in s
        )
        updates = await eventually_value(lambda: stored_chain_payloads(client, 1), lambda s: 2 in s)
    assert sorted(messages) == [3] and sorted(updates) == [2]
    conn = await asyncpg.connect(database)
    skipped = await conn.fetch(
        "SELECT contract, sequence_id, reason FROM chain_skipped_events ORDER BY id"
    )
    await conn.close()
    assert [(r[0], r[1]) for r in skipped] == [
        ("group_messages", 1),
        ("group_messages", 2),
        ("identity_updates", 1),
    ]
    assert "targets topic" in skipped[1][2]


async def test_rpc_outage_loses_nothing_and_chain_publishes_get_unavailable(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    chain_env.register(node_spec)
    proxy = TcpProxy(chain_env.anvil.port)
    await proxy.start()
    settings = node_settings(
        database,
        node_spec,
        **chain_env.settings(chain_rpc_url=proxy.url, chain_rpc_timeout_seconds=0.5),
    )
    node = await start_node(**settings)
    try:
        async with NodeClient(node.address) as client:
            send_messages(chain_env, ["before-1", "before-2"])
            await wait_indexed(client, chain_env, 2)
            proxy.cut()
            send_messages(chain_env, ["during-1", "during-2"])
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await publish(client, 100, [commit_envelope(GROUP, 3, Cursor({0: 2}))])
            # Payloads that need no chain still go through.
            plain = group_message_envelope(GROUP, application(GROUP))
            assert len(await publish(client, 100, [plain])) == 1
            proxy.hang()
            send_messages(chain_env, ["hang-1"])
            await asyncio.sleep(1.5)
            proxy.restore()
            send_messages(chain_env, ["after-1"])
            await wait_indexed(client, chain_env, 6)
            stored = await stored_chain_payloads(client, 0)
    finally:
        await proxy.stop()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert sorted(stored) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"chain_id": 1}, "serves chain id 31337, but the contracts file is for chain id 1"),
        ({"group_messages": "identity_updates"}, "but not a group_messages"),
        ({"identity_updates": "0x" + "12" * 20}, "has no contract code"),
        ({"node_registry": "group_messages"}, "but not a node_registry"),
    ],
)
async def test_wrong_chain_or_addresses_stop_start_up(
    chain_env: ChainEnv,
    start_node: Any,
    database: str,
    node_spec: NodeSpec,
    change: dict[str, Any],
    message: str,
) -> None:
    chain_env.register(node_spec)
    data = json.loads(chain_env.contracts_file.read_text())
    for field, value in change.items():
        data[field] = data.get(value, value) if isinstance(value, str) else value
    chain_env.contracts_file.write_text(json.dumps(data))
    with pytest.raises(StartupError, match=message):
        await start_node(**node_settings(database, node_spec, **chain_env.settings()))


async def test_unregistered_key_refuses_to_start(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    with pytest.raises(StartupError, match="not in the node registry"):
        await start_node(**node_settings(database, node_spec, **chain_env.settings()))


async def test_half_a_chain_configuration_stops_start_up(
    chain_env: ChainEnv, start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    settings = node_settings(database, node_spec, chain_rpc_url=chain_env.url)
    with pytest.raises(StartupError, match="needs both chain_rpc_url and contracts_file"):
        await start_node(**settings)
