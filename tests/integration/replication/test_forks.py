"""Forks (issue 9 part 4) on two real nodes: node 200 (a fake peer in the test) signs two
envelopes for sequence id 1; node 100 receives them in one order, node 300 in the other.
Both end with the same envelope in the log, the same fork evidence (ForkApi) and a
DUPLICATE_SEQUENCE_ID report that proves itself."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc

from tests.conftest import Network
from tests.support.fake_peer import serve_subscribe_originators
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import group_message_envelope
from xnode.core import wire
from xnode.core.checkpoints import envelope_leaf
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, originate, validate_payer_envelope
from xnode.core.evidence import why_unproven
from xnode.core.forks import log_keeps
from xnode.core.node_tokens import token_from_metadata, verify_token
from xnode.core.registry import NodeEntry, Registry
from xnode_api.forks.v1 import forks_pb2 as pb
from xnode_api.forks.v1 import forks_pb2_grpc

PAYER = SigningKey.generate()
GROUP = bytes([9]) * 16


def signed(key: SigningKey, seq: int, text: bytes) -> bytes:
    payer = build_payer_envelope(group_message_envelope(GROUP, text), PAYER, 200)
    return originate(validate_payer_envelope(payer, 200), 200, seq, time.time_ns(), key).raw


class ForkingPeer:
    """Node 200: a node's stream gets the batch scripted for where that node resumes, so a
    stream cut before its batch was stored is served it again; the last batch's stream, and
    any stream with nothing scripted, stays open. Callers are told apart by their node
    tokens."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.scripts: dict[int, dict[int, list[bytes]]] = {}  # caller -> resumed after -> batch

    async def subscribe(self, request: bytes, context: Any) -> AsyncIterator[bytes]:
        token = token_from_metadata(context.invocation_metadata())
        caller = verify_token(token, self.registry, 200, int(time.time())).node_id
        assert caller is not None, "only registered nodes replicate here"
        script = self.scripts.get(caller, {})
        wanted = api.SubscribeOriginatorsRequest.FromString(request).filter
        after = wanted.last_seen.node_id_to_sequence_id[200]
        if list(wanted.originator_node_ids) == [200] and after in script:  # not relaying
            yield wire.field(1, wire.repeated(1, script[after]))
            if after != max(script):
                return
        else:
            yield wire.field(1, b"")
        await asyncio.sleep(3600)

    async def serve(self, address: str) -> grpc.aio.Server:
        return await serve_subscribe_originators(self.subscribe, address)


async def forks_of(node: Any) -> list[pb.Fork]:
    async with grpc.aio.insecure_channel(node.address) as channel:
        stub = forks_pb2_grpc.ForkApiStub(channel)
        got = await stub.QueryForks(pb.QueryForksRequest(originator_node_id=200))
        return list(got.forks)


async def duplicate_reports(node: Any) -> list[mb.UnsignedMisbehaviorReport]:
    rows = await node.pool.fetch("SELECT report FROM misbehavior_reports ORDER BY id")
    unsigned = [
        mb.UnsignedMisbehaviorReport.FromString(
            mb.MisbehaviorReport.FromString(r[0]).unsigned_misbehavior_report
        )
        for r in rows
    ]
    return [u for u in unsigned if u.type == mb.MISBEHAVIOR_DUPLICATE_SEQUENCE_ID]


async def in_log(node: Any) -> list[bytes]:
    rows = await node.pool.fetch(
        "SELECT envelope FROM originator_envelopes WHERE originator_node_id = 200"
        " ORDER BY originator_sequence_id"
    )
    return [bytes(r[0]) for r in rows]


async def test_nodes_that_saw_a_fork_in_opposite_orders_converge(
    start_node: Any, network: Network
) -> None:
    key = network.spec.keys[200]
    one, other = signed(key, 1, b"one"), signed(key, 1, b"other")
    winner = log_keeps(one, other)
    rest = [signed(key, seq, b"%d" % seq) for seq in range(2, 21)]  # a stored subtree of 16
    registry = Registry(NodeEntry(n, k.public_key, "") for n, k in network.spec.keys.items())
    peer = ForkingPeer(registry)
    server = await peer.serve(network.addresses[200])
    nodes = []
    try:
        for node_id, order in ((100, [one, other]), (300, [other, one])):
            peer.scripts[node_id] = {0: [order[0], *rest], 20: [order[1]]}
            node = await start_node(**network.settings(node_id))
            nodes.append(node)

            async def forked(node: Any = node) -> bool:
                return bool(await duplicate_reports(node))

            await eventually(forked)
    finally:
        await server.stop(None)

    keys = {200: [key.public_key]}
    for node in nodes:
        assert await in_log(node) == [winner, *rest]
        [fork] = await forks_of(node)
        assert (fork.originator_node_id, fork.originator_sequence_id) == (200, 1)
        assert list(fork.versions) == [winner, one if winner == other else other]
        [report] = await duplicate_reports(node)
        assert report.misbehaving_node_id == 200
        assert {e.SerializeToString() for e in report.safety.envelopes} == {one, other}
        assert why_unproven(report, keys) is None
    for query in (
        "SELECT * FROM sequence_forks ORDER BY envelope_hash",
        # The committed log follows the envelope the log keeps, on both nodes alike.
        "SELECT * FROM log_leaves WHERE originator_node_id = 200 ORDER BY sequence_id",
        "SELECT * FROM log_nodes WHERE originator_node_id = 200 ORDER BY level, node_index",
        "SELECT * FROM log_trees WHERE originator_node_id = 200",
    ):
        rows = [[tuple(r) for r in await n.pool.fetch(query)] for n in nodes]
        assert rows[0] == rows[1], query
        assert rows[0], query
    leaf = await nodes[0].pool.fetchval(
        "SELECT leaf_hash FROM log_leaves WHERE originator_node_id = 200 AND sequence_id = 1"
    )
    assert bytes(leaf) == envelope_leaf(winner)
    size = "SELECT tree_size FROM log_trees WHERE originator_node_id = 200"
    assert await nodes[0].pool.fetchval(size) == 20
