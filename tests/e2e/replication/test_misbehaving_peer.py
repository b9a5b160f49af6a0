"""A real node replicating from a misbehaving peer. The peer is a small gRPC server in the
test (a test double for another operator's node, registered on the chain as node 200)
serving re-signed, forged, out-of-order and conflicting envelopes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from tests.e2e.replication.conftest import ChainNetwork
from tests.support.fake_peer import serve_subscribe_originators
from tests.support.waiting import eventually_value
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xmtp.xmtpv4.message_api import misbehavior_api_pb2_grpc
from xnode.client.node import group_message_envelope
from xnode.core import wire
from xnode.core.crypto import SigningKey, misbehavior_digest, originator_digest, recover_public_key
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.forks import log_keeps
from xnode.core.node_tokens import verify_token
from xnode.core.registry import NodeEntry, Registry

PAYER = SigningKey.generate()
STRANGER = SigningKey.generate()
GROUP = bytes([7]) * 16
METHOD = "/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeOriginators"


def signed(key: SigningKey, seq: int, text: bytes, ns: int) -> bytes:
    payer = build_payer_envelope(group_message_envelope(GROUP, text), PAYER, 200)
    return originate(validate_payer_envelope(payer, 200), 200, seq, ns, key).raw


def forged(raw: bytes) -> bytes:
    """Signed by the right key, then its payload swapped: the signature no longer matches."""
    outer = envelopes_pb2.OriginatorEnvelope.FromString(raw)
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
        outer.unsigned_originator_envelope
    )
    payer = build_payer_envelope(group_message_envelope(GROUP, b"swapped"), PAYER, 200)
    unsigned.payer_envelope_bytes = payer.SerializeToString()
    outer.unsigned_originator_envelope = unsigned.SerializeToString()
    assert recover_public_key(
        outer.originator_signature.bytes, originator_digest(outer.unsigned_originator_envelope)
    )
    return outer.SerializeToString()


class FakePeer:
    """Serves the batch that follows what the node asks to resume after: a stream cut before
    the node stored its batch (a reconnect under load) is served the same batch again."""

    def __init__(self, batches: dict[int, list[bytes]]) -> None:
        self.batches = batches  # resumed after this sequence id -> the envelopes served
        self.requests: list[api.SubscribeOriginatorsRequest] = []
        self.tokens: list[str] = []

    async def subscribe(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        parsed = api.SubscribeOriginatorsRequest.FromString(request)
        if list(parsed.filter.originator_node_ids) != [200]:
            await asyncio.sleep(3600)  # asked to relay node 300's envelopes: has none
        self.requests.append(parsed)
        self.tokens += [v for k, v in context.invocation_metadata() if k == "node-authorization"]
        after = parsed.filter.last_seen.node_id_to_sequence_id[200]
        yield wire.field(1, wire.repeated(1, self.batches.get(after, [])))
        if after == max(self.batches):
            await asyncio.sleep(3600)  # the last batch's stream stays open

    async def serve(self, address: str) -> grpc.aio.Server:
        return await serve_subscribe_originators(self.subscribe, address)


async def reports_of(address: str, node_id: int) -> dict[str, list[Any]]:
    """The reports a node holds against `node_id`, by type."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = misbehavior_api_pb2_grpc.MisbehaviorApiStub(channel)
        got = await stub.QueryMisbehaviorReports(mb.QueryMisbehaviorReportsRequest())
    by_type: dict[str, list[Any]] = {}
    for report in got.reports:
        unsigned = mb.UnsignedMisbehaviorReport.FromString(report.unsigned_misbehavior_report)
        if unsigned.misbehaving_node_id == node_id:
            by_type.setdefault(mb.Misbehavior.Name(unsigned.type), []).append((report, unsigned))
    return by_type


async def reported_types(address: str, node_id: int) -> set[str]:
    return set(await reports_of(address, node_id))


async def test_forged_resigned_out_of_order_and_duplicate_envelopes_are_caught_and_reported(
    chain_network: ChainNetwork,
) -> None:
    key = chain_network.spec.keys[200]
    now = time.time_ns()
    first = signed(key, 1, b"one", now)
    resigned = signed(STRANGER, 2, b"two", now + 1)  # right shape, wrong signer
    tampered = forged(signed(key, 2, b"two", now + 1))
    third = signed(key, 3, b"three", now + 2)  # sequence id 2 never validly arrives
    other_first = signed(key, 1, b"another one", now)  # a second sequence id 1
    peer = FakePeer({0: [first, resigned, tampered, third], 3: [other_first]})
    server = await peer.serve(chain_network.addresses[200])
    try:
        # In a thread: the start waits until the node serves, and the peer, on this event
        # loop, must answer the node's stream meanwhile (or the node finds it unresponsive).
        await asyncio.to_thread(chain_network.start, 100)

        expected = {
            "MISBEHAVIOR_INVALID_PAYLOAD",
            "MISBEHAVIOR_OUT_OF_ORDER",
            "MISBEHAVIOR_DUPLICATE_SEQUENCE_ID",
        }
        await eventually_value(
            lambda: reported_types(chain_network.addresses[100], 200),
            lambda types: expected <= types,
            what=f"reports of {sorted(expected)} against node 200",
        )
    finally:
        await server.stop(None)

    # Only the validly signed envelopes were stored; of the two sequence ids 1, the one the
    # fork rule keeps (the lower keccak256 of the signed bytes) is in the log.
    assert await chain_network.envelopes(100, [200]) == [log_keeps(first, other_first), third]
    found = await reports_of(chain_network.addresses[100], 200)
    host = chain_network.spec.keys[100].public_key
    for entries in found.values():
        for report, _ in entries:
            digest = misbehavior_digest(report.unsigned_misbehavior_report)
            assert recover_public_key(report.signature.bytes, digest) == host

    def proof(entry: tuple[Any, Any]) -> list[bytes]:
        return [e.SerializeToString() for e in entry[1].safety.envelopes]

    # A batch served again after a reconnect may be reported again, with the same proof.
    assert {tuple(proof(e)) for e in found["MISBEHAVIOR_INVALID_PAYLOAD"]} == {(resigned, tampered)}
    assert {tuple(proof(e)) for e in found["MISBEHAVIOR_OUT_OF_ORDER"]} == {(first, third)}
    duplicates = {tuple(proof(e)) for e in found["MISBEHAVIOR_DUPLICATE_SEQUENCE_ID"]}
    assert duplicates == {(first, other_first)}

    # The node resumed after what it stored (the second batch is served only to a request
    # resumed after sequence id 3), and authenticated as node 100 for node 200.
    resumed = [dict(r.filter.last_seen.node_id_to_sequence_id) for r in peer.requests]
    assert resumed[0].get(200, 0) == 0 and {200: 3} in resumed
    registry = Registry(
        NodeEntry(n, k.public_key, "http://x") for n, k in chain_network.spec.keys.items()
    )
    assert verify_token(peer.tokens[0], registry, 200, int(time.time())).node_id == 100
