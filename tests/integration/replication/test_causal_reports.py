"""CAUSAL_ORDERING filed by replication: a peer's envelope whose depends_on names its own
originator's sequence id at or after its own (a dependency the originator cannot have seen)
is reported with that envelope, the report proves itself, and the envelope is stored anyway
(XIP-49 3.2.7 keeps misordered payloads). An honest dependency files nothing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from tests.conftest import Network
from tests.integration.replication.test_liveness_reports import reports_about, wait_for_report
from tests.integration.replication.test_replication import stored
from tests.support.fake_peer import serve_subscribe_originators
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import group_message_envelope
from xnode.core import wire
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import CAUSAL_ORDERING

GROUP = bytes(range(16))


def _envelope(key: SigningKey, sequence_id: int, depends_on: dict[int, int]) -> bytes:
    client = group_message_envelope(GROUP, b"m%d" % sequence_id, Cursor(depends_on))
    valid = validate_payer_envelope(build_payer_envelope(client, SigningKey.generate(), 200), 200)
    return originate(valid, 200, sequence_id, time.time_ns(), key).raw


async def test_a_dependency_on_the_originators_own_future_is_reported(
    start_node: Any, network: Network
) -> None:
    key = network.spec.keys[200]
    honest = _envelope(key, 1, {})
    ahead = _envelope(key, 2, {200: 3})
    also_honest = _envelope(key, 3, {200: 2})

    async def subscribe(request: bytes, context: Any) -> AsyncIterator[bytes]:
        asked = api.SubscribeOriginatorsRequest.FromString(request).filter.originator_node_ids
        if list(asked) == [200]:
            yield wire.field(1, wire.repeated(1, [honest, ahead, also_honest]))
        await asyncio.sleep(3600)

    fake = await serve_subscribe_originators(subscribe, network.addresses[200])
    try:
        node = await start_node(**network.settings(100))
        report = await wait_for_report(node, CAUSAL_ORDERING)

        async def all_stored() -> bool:
            return await stored(node.address, 200) == [honest, ahead, also_honest]

        await eventually(all_stored)
    finally:
        await fake.stop(None)
    assert [e.SerializeToString() for e in report.safety.envelopes] == [ahead]
    assert why_unproven(report, {200: [key.public_key]}) is None
    causal = [r for r in await reports_about(node, 200) if r.type == CAUSAL_ORDERING]
    assert len(causal) == 1
