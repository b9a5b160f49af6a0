"""Fees, usage and limits on a real node and Postgres (issue 11)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest

from tests.support.statuses import trailers
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, parse_originator_envelope
from xnode.core.fees import FeeSchedule
from xnode.observability.metrics import LIMITED
from xnode_api.fees.v1 import fees_pb2, fees_pb2_grpc

GROUP = bytes(range(16))
TOPIC = b"\x00" + GROUP
FEES = {
    "fee_envelope_picodollars": 1000,
    "fee_byte_day_picodollars": 3,
    "fee_congestion_step_picodollars": 500,
    "fee_congestion_max_picodollars": 5000,
}


async def test_fees_are_signed_into_envelopes_and_counted_per_payer(
    start_node: Any, database: str, node_spec: Any
) -> None:
    from tests.conftest import node_settings

    node = await start_node(**node_settings(database, node_spec, **FEES))
    schedule = FeeSchedule(1000, 3, 1000, 500, 5000)
    payer = SigningKey.generate()
    async with NodeClient(node.address) as client:
        sent = await client.publish_group_messages(payer, 100, GROUP, [b"a", b"bb" * 100])
        served = await fees_pb2_grpc.FeesApiStub(client.channel).GetFeeSchedule(
            fees_pb2.GetFeeScheduleRequest()
        )
    assert served.node_id == 100
    assert served.schedule.envelope_picodollars == 1000
    assert served.schedule.byte_day_picodollars == 3
    total = 0
    for envelope in sent:
        parsed = parse_originator_envelope(envelope.SerializeToString())
        assert parsed.signer_public_key() == node_spec.keys[100].public_key
        assert parsed.fees.base == schedule.base_fee(parsed.payer_envelope_size, 0) > 1000
        assert parsed.fees.congestion == 0  # two envelopes: far below the target rate
        total += parsed.fees.base
    row = await node.pool.fetchrow(
        "SELECT envelopes, base_fee_picodollars, congestion_fee_picodollars, envelope_bytes"
        " FROM payer_usage WHERE payer_address = $1",
        payer.address,
    )
    assert row is not None
    assert (row[0], int(row[1]), int(row[2])) == (2, total, 0)
    assert row[3] == sum(len(e.SerializeToString()) for e in sent)


def _limited(api: str, kind: str) -> float:
    return LIMITED.labels(api, kind)._value.get()  # type: ignore[no-any-return]


async def test_a_payer_over_its_limit_is_refused_and_another_is_not(
    start_node: Any, database: str, node_spec: Any
) -> None:
    from tests.conftest import node_settings

    node = await start_node(
        **node_settings(
            database,
            node_spec,
            limit_publish_envelopes_per_second=0.5,
            limit_burst_seconds=10,  # a burst of 5 envelopes per payer
        )
    )
    greedy, modest = SigningKey.generate(), SigningKey.generate()
    before = _limited("replication", "envelopes")
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(greedy, 100, GROUP, [b"1", b"2", b"3", b"4"])
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish_group_messages(greedy, 100, GROUP, [b"5", b"6"])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "over its envelopes limit; retry in" in (err.value.details() or "")
        found = trailers(err.value)
        assert int(found["retry-after"]) >= 1
        # the modest payer, same client IP, is unaffected
        await client.publish_group_messages(modest, 100, GROUP, [b"a", b"b", b"c"])
        stored = await client.query(topics=[TOPIC])
    assert len(stored) == 7  # nothing of the refused batch
    assert _limited("replication", "envelopes") == before + 1


async def test_denied_payers_are_refused_allowed_payers_are_not_limited(
    start_node: Any, database: str, node_spec: Any
) -> None:
    from tests.conftest import node_settings

    denied, allowed = SigningKey.generate(), SigningKey.generate()
    node = await start_node(
        **node_settings(
            database,
            node_spec,
            limit_publish_envelopes_per_second=0.1,
            limit_burst_seconds=10,  # one envelope per payer
            payer_deny_list="0x" + denied.address.hex(),
            payer_allow_list="0x" + allowed.address.hex(),
        )
    )
    async with NodeClient(node.address) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.publish_group_messages(denied, 100, GROUP, [b"x"])
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        await client.publish_group_messages(allowed, 100, GROUP, [b"1", b"2", b"3"])


def _publish_one(address: str, payer: SigningKey, n: int) -> bool:
    async def go() -> bool:
        envelope = build_payer_envelope(group_message_envelope(GROUP, b"%d" % n), payer, 100)
        async with NodeClient(address) as client:
            try:
                await client.publish([envelope])
            except grpc.aio.AioRpcError as exc:
                assert exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                return False
        return True

    return asyncio.run(go())


def test_limits_hold_across_two_processes_sharing_one_database(
    spawn_node: Any, database: str, node_spec: Any
) -> None:
    limits = {"LIMIT_PUBLISH_ENVELOPES_PER_SECOND": "0.2", "LIMIT_BURST_SECONDS": "30"}
    first = spawn_node(database, node_spec, **limits)  # a burst of 6 for the node
    second = spawn_node(database, node_spec, **limits)
    payer = SigningKey.generate()
    started = time.monotonic()
    admitted = {first.address: 0, second.address: 0}
    for n in range(24):
        address = (first, second)[n % 2].address
        admitted[address] += _publish_one(address, payer, n)
    elapsed = time.monotonic() - started
    total = sum(admitted.values())
    assert total <= 6 + 0.2 * elapsed + 1, admitted
    assert total >= 5, admitted  # the burst is served, by both processes
    assert all(admitted.values()), admitted
