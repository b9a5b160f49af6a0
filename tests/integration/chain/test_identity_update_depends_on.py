"""Rule 2.4 for identity updates: an update that names no chain dependency is appended (the
official client never names one); one that names a stale dependency is refused."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.integration.chain.helpers import publish, signed_update_envelope
from tests.support.identity_signers import Inbox, Wallet
from xnode.client.node import NodeClient
from xnode.core.constants import IDENTITY_UPDATES_ORIGINATOR
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope


async def test_an_identity_update_without_depends_on_is_appended_after_others(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    chain_env.register(node_spec)
    node = await start_node(**node_settings(database, node_spec, **chain_env.settings()))
    inbox = Inbox()
    async with NodeClient(node.address) as client:
        first = await publish(client, 100, [signed_update_envelope(inbox.create())])
        # What libxmtp sends when a second installation joins: no depends_on at all.
        second = await publish(client, 100, [signed_update_envelope(inbox.add(Wallet()))])
        stamp = parse_originator_envelope(first[0].SerializeToString()).sequence_id
        # A stated dependency is still checked: this one names a payload that is not the latest.
        with pytest.raises(grpc.aio.AioRpcError) as stale:
            await publish(
                client,
                100,
                [
                    signed_update_envelope(
                        inbox.add(Wallet()), Cursor({IDENTITY_UPDATES_ORIGINATOR: stamp})
                    )
                ],
            )
    got = [parse_originator_envelope(e.SerializeToString()) for e in [*first, *second]]
    assert [g.originator_node_id for g in got] == [IDENTITY_UPDATES_ORIGINATOR] * 2
    assert got[1].sequence_id > got[0].sequence_id
    assert stale.value.code() == grpc.StatusCode.ABORTED
    assert "latest chain payload" in (stale.value.details() or "")
