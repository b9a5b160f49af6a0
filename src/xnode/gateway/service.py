"""PayerApi handlers (xmtp.xmtpv4.payer_api) and their registration.

Requests are decoded here rather than by grpc, so a corrupt request is INVALID_ARGUMENT with
a reason instead of an opaque INTERNAL."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
import structlog

from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xnode.api.proxies import ClientAddresses
from xnode.core import wire
from xnode.core.originator_selection import available_nodes
from xnode.gateway.clients import ClientAuth
from xnode.gateway.errors import GatewayError, gateway_errors
from xnode.gateway.limits import ClientLimits
from xnode.gateway.publish import Publisher, check_count
from xnode.gateway.usage import UsageLog
from xnode.usecases.registry_source import RegistrySource

log = structlog.get_logger(__name__)

SERVICE = "xmtp.xmtpv4.payer_api.PayerApi"
_PUBLISH_REQUEST = payer_api.PublishClientEnvelopesRequest.DESCRIPTOR.full_name
Context = grpc.aio.ServicerContext[Any, Any]
# The client keys the URLs GetNodes lists by node id and only logs the key; the gateway is
# no node, and 0 is no registry node's id (they start at 100).
READ_URL_ID = 0


def _identity(data: bytes) -> bytes:
    return data


@dataclass(frozen=True)
class ClientPolicy:
    """Who each client is and where it calls from, what it may publish, and where what it
    published is recorded."""

    auth: ClientAuth
    limits: ClientLimits
    usage: UsageLog
    addresses: ClientAddresses


class PayerService:
    def __init__(
        self,
        registry: RegistrySource,
        publisher: Publisher,
        clients: ClientPolicy,
        node_urls: Mapping[int, str] | None = None,
        read_url: str | None = None,
    ) -> None:
        """`node_urls`, when given, replaces the registry's URLs (and lists only those nodes):
        browsers speak gRPC-web, which nodes serve on their HTTP port, not the registry's.
        `read_url`, when given, is the only URL listed: the gateway's own, which serves the
        reads with failover (gateway/reads.py)."""
        self._registry = registry
        self._publisher = publisher
        self._clients = clients
        self._node_urls = node_urls
        self._read_url = read_url

    async def GetNodes(self, request: bytes, context: Context) -> bytes:
        """Where clients read: the gateway itself, under the id READ_URL_ID, or the enabled
        nodes (id -> URL with scheme) for clients to read from directly."""
        if self._read_url is not None:
            return payer_api.GetNodesResponse(
                nodes={READ_URL_ID: self._read_url}
            ).SerializeToString()
        nodes = {n.node_id: n.http_address for n in available_nodes(self._registry.current())}
        if self._node_urls is not None:
            nodes = {i: self._node_urls[i] for i in nodes if i in self._node_urls}
        return payer_api.GetNodesResponse(nodes=nodes).SerializeToString(deterministic=True)

    async def PublishClientEnvelopes(self, request: bytes, context: Context) -> bytes:
        try:
            raws = wire.length_delimited(request, 1)
        except wire.FrameError as exc:
            raise GatewayError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"request does not decode as {_PUBLISH_REQUEST}: {exc}",
            ) from None
        check_count(raws)  # before the limits: a malformed request is no spending
        address = self._clients.addresses.of(context)
        client = await self._admit(raws, context, address)
        answers = await self._publisher.publish(raws, address)
        await self._clients.usage.record(client, raws, answers)
        # The node's envelopes go out as the node serialized (and signed) them.
        return wire.repeated(1, answers)

    async def _admit(self, raws: list[bytes], context: Context, address: str) -> str:
        """The client's name once it is known and within its limits; raises Unauthenticated
        or LimitExceeded otherwise."""
        client = self._clients.auth.client_of(context.invocation_metadata() or (), address)
        await self._clients.limits.publish(client, raws)
        return client


def payer_handlers(service: PayerService) -> grpc.GenericRpcHandler:
    descriptor = payer_api.DESCRIPTOR.services_by_name["PayerApi"]
    methods = {
        m.name: grpc.unary_unary_rpc_method_handler(
            gateway_errors(getattr(service, m.name)),
            request_deserializer=_identity,
            response_serializer=_identity,
        )
        for m in descriptor.methods
    }
    return grpc.method_handlers_generic_handler(SERVICE, methods)
