"""The gateway's gRPC-web and JSON port: the same PayerApi handlers as its gRPC port."""

from __future__ import annotations

import struct
from typing import Any

import aiohttp
from google.protobuf import json_format

from tests.conftest import Network
from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xnode.client.node import group_message_envelope
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.postgres import free_port

GET_NODES = "/xmtp.xmtpv4.payer_api.PayerApi/GetNodes"
GRPC_WEB = {"Content-Type": "application/grpc-web+proto"}


async def test_get_nodes_and_publish_over_grpc_web_and_json(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    for node_id in (100, 200, 300):
        await start_node(**network.settings(node_id))
    gateway = await gateway_for(http_listen_address=f"127.0.0.1:{free_port()}")
    base = f"http://{gateway.gateway.http_address}"
    # Browsers read from the nodes (the gateway serves reads on its gRPC port only).
    listed = {n: f"http://{a}" for n, a in network.addresses.items()}
    expected = payer_api.GetNodesResponse(nodes=listed).SerializeToString(deterministic=True)
    message = group_message_envelope(bytes(16), b"over json")
    publish = payer_api.PublishClientEnvelopesRequest(envelopes=[message])
    async with aiohttp.ClientSession() as http:
        async with http.post(base + GET_NODES, data=b"", headers=GRPC_WEB) as r:
            body = await r.read()
        async with http.post(base + "/mls/v2/payer/get-nodes", data="{}") as r:
            nodes = json_format.ParseDict(await r.json(), payer_api.GetNodesResponse())
        async with http.post(
            base + "/mls/v2/payer/publish-client-envelopes",
            data=json_format.MessageToJson(publish),
        ) as r:
            assert r.status == 200, await r.text()
            published = json_format.ParseDict(
                await r.json(), payer_api.PublishClientEnvelopesResponse()
            )
        async with http.post(base + "/mls/v2/payer/get-nodes", data="[1") as r:
            bad = r.status, (await r.json())["message"]
    size = struct.unpack(">I", body[1:5])[0]
    assert body[0] == 0 and body[5 : 5 + size] == expected
    assert b"grpc-status:0" in body[5 + size :]
    assert nodes.SerializeToString(deterministic=True) == expected
    [answer] = published.originator_envelopes
    got = parse_originator_envelope(answer.SerializeToString())
    assert got.payer_envelope.unsigned_client_envelope == message.SerializeToString()
    assert bad[0] == 400 and "does not parse as" in bad[1]


async def test_get_nodes_on_the_http_port_lists_the_nodes_grpc_web_urls(
    network: Network, gateway_for: Any
) -> None:
    gateway = await gateway_for(
        http_listen_address=f"127.0.0.1:{free_port()}",
        http_node_urls="100=http://127.0.0.1:5150, 300=http://127.0.0.1:5152",
    )
    base = f"http://{gateway.gateway.http_address}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + "/mls/v2/payer/get-nodes", data="{}") as r,
    ):
        over_http = json_format.ParseDict(await r.json(), payer_api.GetNodesResponse())
    assert dict(over_http.nodes) == {100: "http://127.0.0.1:5150", 300: "http://127.0.0.1:5152"}
    # The gRPC port names the gateway, which serves the reads (gateway/reads.py).
    assert await gateway.nodes() == {0: f"http://{gateway.gateway.address}"}
