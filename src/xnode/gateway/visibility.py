"""Read-your-writes for chain payloads across nodes.

Commits and identity updates go to the chain through one node, which answers once it has
indexed them; every other node indexes the chain on its own a moment later. A client reads
from whichever node answered its health check fastest, and MLS needs what it just published
there: a member validating a commit fetches the identity updates it names and fails the
commit for good (MissingIdentityUpdate) when its node has not indexed them yet. So before
answering, the gateway waits, for a bounded time, until the reachable nodes serve the chain
payloads of the answer. Nodes that stay behind are logged and do not fail the publish: the
payload is durable on the chain either way. Nodes that are down are not waited for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

import grpc
import structlog

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.api.proxies import forwarded_for
from xnode.core.registry import NodeEntry
from xnode.gateway.channels import NodeChannels, UnusableUrl
from xnode.gateway.node_health import NodeHealth

log = structlog.get_logger(__name__)

QUERY_METHOD = "/xmtp.xmtpv4.message_api.QueryApi/QueryEnvelopes"
POLL_S = 0.05


def chain_points(answers: Iterable[bytes]) -> dict[int, int]:
    """Reserved originator id -> highest sequence id among the chain payloads answered."""
    points: dict[int, int] = {}
    for raw in answers:
        envelope = envelopes_pb2.OriginatorEnvelope.FromString(raw)
        if envelope.WhichOneof("proof") != "blockchain_proof":
            continue
        unsigned = envelopes_pb2.UnsignedOriginatorEnvelope.FromString(
            envelope.unsigned_originator_envelope
        )
        originator = unsigned.originator_node_id
        points[originator] = max(points.get(originator, 0), unsigned.originator_sequence_id)
    return points


async def _serves(
    channel: grpc.aio.Channel, originator: int, sequence_id: int, client: str
) -> bool:
    call = channel.unary_unary(
        QUERY_METHOD,
        request_serializer=api.QueryEnvelopesRequest.SerializeToString,
        response_deserializer=api.QueryEnvelopesResponse.FromString,
    )
    # The node's first envelope of that originator after sequence_id - 1: the node indexes
    # the chain in order, so it serves sequence_id once it serves anything from there on.
    request = api.QueryEnvelopesRequest(
        query=api.EnvelopesQuery(
            originator_node_ids=[originator],
            last_seen=envelopes_pb2.Cursor(node_id_to_sequence_id={originator: sequence_id - 1}),
        ),
        limit=1,
    )
    response = await call(request, timeout=1.0, metadata=forwarded_for(client))
    return bool(response.envelopes)


async def _wait_node(
    channels: NodeChannels,
    health: NodeHealth,
    node: NodeEntry,
    points: dict[int, int],
    deadline: float,
    client: str,
) -> bool:
    try:
        channel = channels.channel(node.http_address)
    except UnusableUrl:
        return False
    pending = dict(points)
    while pending:
        if health.is_down(node.node_id):
            return True  # frozen or gone since the wait began: it serves no reader either
        for originator, sequence_id in list(pending.items()):
            try:
                if await _serves(channel, originator, sequence_id, client):
                    del pending[originator]
            except grpc.aio.AioRpcError as exc:
                if exc.code() is grpc.StatusCode.UNAVAILABLE:
                    # A node that is down serves no reader: waiting for it helps no one.
                    channels.mark_down(node.node_id)
                    return True
                # Slow or refusing: it is waited for until the deadline.
        if not pending:
            break
        if time.monotonic() + POLL_S > deadline:
            return False
        await asyncio.sleep(POLL_S)
    return True


async def wait_visible(
    channels: NodeChannels,
    health: NodeHealth,
    nodes: list[NodeEntry],
    answers: list[bytes],
    timeout_s: float,
    client: str,
) -> None:
    """`client`: the address of the publish's client, which the queries name to the nodes
    (they are its reads: the gateway's own address would carry every client's)."""
    points = chain_points(answers)
    if not points or timeout_s <= 0:
        return
    readers = [n for n in nodes if not channels.recently_down(n.node_id)]
    deadline = time.monotonic() + timeout_s
    done = await asyncio.gather(
        *(_wait_node(channels, health, n, points, deadline, client) for n in readers)
    )
    behind = [n.node_id for n, ok in zip(readers, done, strict=True) if not ok]
    if behind:
        log.warning(
            "gateway_chain_payload_not_visible",
            nodes=behind,
            payloads={str(k): v for k, v in points.items()},
            waited_s=timeout_s,
        )
