"""An in-process network of nodes 100, 200, 300 (file registry) and a gateway in front."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from tests.conftest import Network
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xmtp.xmtpv4.payer_api import payer_api_pb2_grpc
from xnode.client.node import CHANNEL_OPTIONS
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port
from xnode.gateway.server import Gateway, start_gateway
from xnode.gateway.settings import GatewaySettings


@dataclass
class GatewayClient:
    gateway: Gateway
    channel: grpc.aio.Channel
    stub: Any
    payer: SigningKey

    async def publish(
        self, envelopes: list[envelopes_pb2.ClientEnvelope]
    ) -> list[envelopes_pb2.OriginatorEnvelope]:
        response = await self.stub.PublishClientEnvelopes(
            payer_api.PublishClientEnvelopesRequest(envelopes=envelopes), timeout=30
        )
        return list(response.originator_envelopes)

    async def nodes(self) -> dict[int, str]:
        return dict((await self.stub.GetNodes(payer_api.GetNodesRequest(), timeout=10)).nodes)


@pytest.fixture
async def gateway_for(
    network: Network,
) -> AsyncIterator[Callable[..., Any]]:
    """`await gateway_for(**settings)` starts a gateway on the network's registry file."""
    started: list[GatewayClient] = []

    async def _start(**extra: Any) -> GatewayClient:
        payer = SigningKey.generate()
        settings = GatewaySettings(
            listen_address=f"127.0.0.1:{free_port()}",
            payer_key=payer.hex(),
            nodes_file=network.spec.nodes_file,
            registry_source="file",
            **{"publish_timeout_seconds": 10.0, **extra},
        )
        gateway = await start_gateway(settings)
        channel = grpc.aio.insecure_channel(gateway.address, options=CHANNEL_OPTIONS)
        client = GatewayClient(
            gateway,
            channel,
            payer_api_pb2_grpc.PayerApiStub(channel),
            payer,
        )
        started.append(client)
        return client

    yield _start
    for client in started:
        await client.channel.close(None)
        await client.gateway.stop()
