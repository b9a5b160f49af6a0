"""A client of one node's gRPC APIs, unchecked: xnode.client.network checks what it
receives; tests that poke a node directly use this."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from types import TracebackType

import grpc

from xmtp.mls.api.v1 import mls_pb2
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import message_api_pb2_grpc, misbehavior_api_pb2_grpc
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import build_payer_envelope, cursor_to_proto
from xnode.core.key_packages import encode_key_package, installation_key_of
from xnode.core.mls import mls_group_message as mls_group_message
from xnode.core.topics import Topic, TopicKind
from xnode.tls import ClientTls, open_channel
from xnode_api.completeness.v1 import completeness_pb2 as cp
from xnode_api.completeness.v1 import completeness_pb2_grpc

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 25 * 1024 * 1024),
    ("grpc.max_send_message_length", 25 * 1024 * 1024),
]
# Channels of one process to one address share a connection unless given this option.
OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)


def group_message_envelope(
    group_id: bytes, data: bytes, depends_on: Cursor | None = None
) -> envelopes_pb2.ClientEnvelope:
    """A client envelope carrying an MLS group message on the group's topic (plain bytes are
    wrapped in an application PrivateMessage, see mls_group_message)."""
    data = mls_group_message(group_id, data)
    return envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(
            target_topic=Topic(TopicKind.GROUP_MESSAGES, group_id).raw,
            depends_on=cursor_to_proto(depends_on or Cursor()),
        ),
        group_message=mls_pb2.GroupMessageInput(v1=mls_pb2.GroupMessageInput.V1(data=data)),
    )


def key_package_envelope(
    installation: bytes, made_s: int, lifetime_s: int = 90 * 86_400
) -> envelopes_pb2.ClientEnvelope:
    """A key package upload on `installation`'s topic (an Ed25519 seed, which signs it),
    valid from `made_s` (unix seconds) for `lifetime_s`."""
    package = encode_key_package(installation, made_s, lifetime_s)
    return envelopes_pb2.ClientEnvelope(
        aad=envelopes_pb2.AuthenticatedData(
            target_topic=Topic(TopicKind.KEY_PACKAGES, installation_key_of(installation)).raw
        ),
        upload_key_package=mls_pb2.UploadKeyPackageRequest(
            key_package=mls_pb2.KeyPackageUpload(key_package_tls_serialized=package)
        ),
    )


class NodeClient:
    """A client of one node. `address` is host:port (plaintext) or https://host:port (TLS,
    the server checked against `tls.root_certificates`, or the system roots)."""

    def __init__(
        self, address: str, tls: ClientTls | None = None, own_connection: bool = False
    ) -> None:
        """`own_connection`: not shared with this process's other channels to `address` (so
        connections spread over a node's worker processes)."""
        options = [*CHANNEL_OPTIONS, *([OWN_CONNECTION] if own_connection else [])]
        self.channel = open_channel(address, tls, options)
        self.replication = message_api_pb2_grpc.ReplicationApiStub(self.channel)
        self.misbehavior = misbehavior_api_pb2_grpc.MisbehaviorApiStub(self.channel)
        self.completeness = completeness_pb2_grpc.CompletenessApiStub(self.channel)

    async def __aenter__(self) -> NodeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close(None)

    async def publish(
        self, payer_envelopes: Sequence[envelopes_pb2.PayerEnvelope], deadline_s: float = 30.0
    ) -> list[envelopes_pb2.OriginatorEnvelope]:
        response = await self.replication.PublishPayerEnvelopes(
            api.PublishPayerEnvelopesRequest(payer_envelopes=payer_envelopes), timeout=deadline_s
        )
        return list(response.originator_envelopes)

    async def prove_topics(
        self, originator: int, topics: Sequence[tuple[bytes, int]], deadline_s: float = 30.0
    ) -> list[cp.SignedAnswer]:
        """The node's signed completeness answers (xnode.completeness.v1), one per
        (topic, after sequence id), for `originator`'s envelopes."""
        response = await self.completeness.ProveTopics(
            cp.ProveTopicsRequest(
                originator_node_id=originator,
                topics=[cp.TopicCursor(topic=t, after_sequence_id=a) for t, a in topics],
            ),
            timeout=deadline_s,
        )
        return list(response.answers)

    async def submit_misbehavior_report(
        self, report: mb.UnsignedMisbehaviorReport, deadline_s: float = 10.0
    ) -> None:
        await self.misbehavior.SubmitMisbehaviorReport(
            mb.SubmitMisbehaviorReportRequest(report=report), timeout=deadline_s
        )

    async def publish_group_messages(
        self,
        payer: SigningKey,
        node_id: int,
        group_id: bytes,
        payloads: Sequence[bytes],
    ) -> list[envelopes_pb2.OriginatorEnvelope]:
        envelopes = [
            build_payer_envelope(group_message_envelope(group_id, data), payer, node_id)
            for data in payloads
        ]
        return await self.publish(envelopes)

    async def query(
        self,
        topics: Sequence[bytes] = (),
        originators: Sequence[int] = (),
        cursor: Cursor | None = None,
        limit: int = 0,
    ) -> list[envelopes_pb2.OriginatorEnvelope]:
        request = api.QueryEnvelopesRequest(
            query=api.EnvelopesQuery(
                topics=topics,
                originator_node_ids=originators,
                last_seen=cursor_to_proto(cursor or Cursor()),
            ),
            limit=limit,
        )
        return list((await self.replication.QueryEnvelopes(request)).envelopes)

    def subscribe(
        self,
        topics: Sequence[bytes] = (),
        originators: Sequence[int] = (),
        cursor: Cursor | None = None,
    ) -> grpc.aio.UnaryStreamCall[api.SubscribeEnvelopesRequest, api.SubscribeEnvelopesResponse]:
        request = api.SubscribeEnvelopesRequest(
            query=api.EnvelopesQuery(
                topics=topics,
                originator_node_ids=originators,
                last_seen=cursor_to_proto(cursor or Cursor()),
            )
        )
        call: grpc.aio.UnaryStreamCall[
            api.SubscribeEnvelopesRequest, api.SubscribeEnvelopesResponse
        ] = self.replication.SubscribeEnvelopes(request)
        return call


async def envelopes_of(
    call: grpc.aio.UnaryStreamCall[api.SubscribeEnvelopesRequest, api.SubscribeEnvelopesResponse],
) -> AsyncIterator[envelopes_pb2.OriginatorEnvelope]:
    async for response in call:
        for envelope in response.envelopes:
            yield envelope
