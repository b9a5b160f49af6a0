"""An attacker's oversized envelopes against `xnode run` processes on real Postgres: nothing
stored is too large to send, so replication never stalls, and no peer files a report against
an honest node that cannot send it one envelope."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import asyncpg
import grpc
import pytest

from tests.conftest import Network, NodeProcess, NodeSpec
from tests.e2e.hostile.nodes import start
from tests.support.waiting import eventually
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.core.misbehavior import FAILED_REQUEST
from xnode.devtools.postgres import free_port

PAYER = SigningKey.generate()
GROUP = b"\x07" * 16
MIB = 1024 * 1024


def sized_payer(size: int, node_id: int, tag: bytes = b"") -> envelopes_pb2.PayerEnvelope:
    """A valid payer envelope of exactly `size` serialized bytes."""
    data = tag
    for _ in range(4):  # a length's varint may grow by a byte: converge
        payer = build_payer_envelope(group_message_envelope(GROUP, data), PAYER, node_id)
        missing = size - payer.ByteSize()
        if missing == 0:
            return payer
        data = data + b"\x00" * missing if missing > 0 else data[:missing]
    raise AssertionError(f"no payer envelope of exactly {size} bytes")


def caps(message_mib: int, payer_bytes: int) -> dict[str, str]:
    """A node's size settings: the message limit and payer cap, the answer budget between."""
    budget = (payer_bytes + message_mib * MIB) // 2
    return {
        "max_message_mib": str(message_mib),
        "max_payer_envelope_bytes": str(payer_bytes),
        "answer_budget_bytes": str(budget),
        "max_report_bytes": str(min(budget - 1024, 9 * MIB)),
    }


@pytest.fixture
def network(tmp_path: Path, new_database: Callable[[], str]) -> Network:
    """Nodes 100 and 200 only: each starts once the other answers (start-up recovery asks
    every peer), so both are started before either is waited for (`start`)."""
    spec = NodeSpec(tmp_path, {n: SigningKey.generate() for n in (100, 200)})
    addresses = {n: f"127.0.0.1:{free_port()}" for n in spec.keys}
    spec.write(addresses)
    return Network(spec, addresses, {n: new_database() for n in spec.keys})


async def sequence_id(dsn: str, originator: int) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        value = await conn.fetchval(
            "SELECT sequence_id FROM vector_clock WHERE originator_node_id = $1", originator
        )
    finally:
        await conn.close()
    return int(value or 0)


async def failed_requests_filed(dsn: str, against: int = 100) -> int:
    """FAILED_REQUEST reports against node 100 (being down while it restarts is another)."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM misbehavior_reports"
                " WHERE misbehaving_node_id = $1 AND type = $2",
                against,
                int(FAILED_REQUEST),
            )
        )
    finally:
        await conn.close()


async def test_an_envelope_at_the_cap_replicates_one_over_it_is_refused_and_nothing_stalls(
    network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    cap = 1 * MIB
    start(spawn_node, network, {100: caps(2, cap), 200: caps(2, cap)})
    async with NodeClient(network.addresses[100]) as client:
        at_cap = await client.publish([sized_payer(cap, 100)])
        assert len(at_cap) == 1
        with pytest.raises(grpc.aio.AioRpcError) as over:
            await client.publish([sized_payer(cap + 1, 100)])
        assert over.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert f"is {cap + 1} bytes, the limit is {cap}" in (over.value.details() or "")
        assert await sequence_id(network.dsns[100], 100) == 1  # the refused one stored nothing
        # A publish whose answer could not be sent is refused before anything is stored.
        # 1,000 envelopes of 2,000 bytes fit a 2 MiB request, their signed envelopes not.
        many = [sized_payer(2000, 100, i.to_bytes(2, "big")) for i in range(1000)]
        with pytest.raises(grpc.aio.AioRpcError) as answer:
            await client.publish(many)
        assert answer.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "several requests" in (answer.value.details() or "")
        assert await sequence_id(network.dsns[100], 100) == 1
        await client.publish_group_messages(PAYER, 100, GROUP, [b"later and small"])

    async def replicated() -> bool:
        return await sequence_id(network.dsns[200], 100) == 2

    await eventually(replicated, what="node 200 holding both of node 100's envelopes")
    assert await failed_requests_filed(network.dsns[200]) == 0


async def test_a_peer_that_cannot_receive_an_envelope_files_no_report(
    network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    """Node 100 takes envelopes larger than node 200 can receive: 200 is refused by its own
    receive limit, and that is no failure of 100's."""
    receiver = start(spawn_node, network, {100: caps(4, 3 * MIB), 200: caps(2, 1 * MIB)})[200]
    async with NodeClient(network.addresses[100]) as client:
        await client.publish([sized_payer(3 * MIB, 100)])

    await eventually(
        lambda: "peer_stream_too_large_or_limited" in receiver.output(),
        what="node 200 refused by its receive limit",
    )
    assert await failed_requests_filed(network.dsns[200]) == 0


async def test_an_envelope_stored_before_the_caps_is_refused_by_name_and_reported_by_none(
    network: Network, spawn_node: Callable[..., NodeProcess]
) -> None:
    """The send path checks that one envelope fits one message: an envelope a node stored
    under larger limits is named in RESOURCE_EXHAUSTED and logged, and the peer files
    nothing."""
    before = start(spawn_node, network, {100: caps(4, 3 * MIB), 200: caps(4, 3 * MIB)})
    async with NodeClient(network.addresses[100]) as client:
        await client.publish([sized_payer(3 * MIB, 100)])
    for node in before.values():
        node.terminate()
    again = start(spawn_node, network, {100: caps(2, 1 * MIB), 200: caps(4, 3 * MIB)})
    honest, receiver = again[100], again[200]
    async with NodeClient(network.addresses[100]) as client:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.query(originators=[100])
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "envelope 100:1 is" in (refused.value.details() or "")
    await eventually(
        lambda: (
            "envelope_unsendable" in honest.output()
            and "peer_stream_too_large_or_limited" in receiver.output()
        ),
        what="node 100 logging the envelope it cannot send, node 200 refused by its check",
    )
    assert await failed_requests_filed(network.dsns[200]) == 0
