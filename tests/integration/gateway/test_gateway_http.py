"""The gateway's gRPC-web and JSON port: the same PayerApi handlers and reads as its gRPC
port; GetNodes there names that port, so browsers read with failover too."""

from __future__ import annotations

import struct
from typing import Any

import aiohttp
from google.protobuf import json_format
from google.protobuf.message import Message

from tests.conftest import Network
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xnode.client.node import group_message_envelope
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.postgres import free_port

GET_NODES = "/xmtp.xmtpv4.payer_api.PayerApi/GetNodes"
QUERY = "/xmtp.xmtpv4.message_api.ReplicationApi/QueryEnvelopes"
GRPC_WEB = {"Content-Type": "application/grpc-web+proto"}


async def test_get_nodes_and_publish_over_grpc_web_and_json(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    for node_id in (100, 200, 300):
        await start_node(**network.settings(node_id))
    gateway = await gateway_for(http_listen_address=f"127.0.0.1:{free_port()}")
    base = f"http://{gateway.gateway.http_address}"
    # Browsers read through this port (READ_URL_ID names the gateway, not a node).
    expected = payer_api.GetNodesResponse(nodes={0: base}).SerializeToString(deterministic=True)
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
        topic = parse_originator_envelope(
            published.originator_envelopes[0].SerializeToString()
        ).topic()
        query = api.QueryEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic]), limit=10)
        async with http.post(base + QUERY, data=grpc_web_frame(query), headers=GRPC_WEB) as r:
            read = await r.read()
    size = struct.unpack(">I", body[1:5])[0]
    assert body[0] == 0 and body[5 : 5 + size] == expected
    assert b"grpc-status:0" in body[5 + size :]
    assert nodes.SerializeToString(deterministic=True) == expected
    [answer] = published.originator_envelopes
    got = parse_originator_envelope(answer.SerializeToString())
    assert got.payer_envelope.unsigned_client_envelope == message.SerializeToString()
    assert bad[0] == 400 and "does not parse as" in bad[1]
    # The published envelope, read back through the gateway's gRPC-web port.
    [found] = api.QueryEnvelopesResponse.FromString(first_message(read)).envelopes
    assert found == answer


NODE_URLS = "100=http://127.0.0.1:5150, 300=http://127.0.0.1:5152"


async def http_nodes(gateway: Any) -> dict[int, str]:
    base = f"http://{gateway.gateway.http_address}"
    async with (
        aiohttp.ClientSession() as http,
        http.post(base + "/mls/v2/payer/get-nodes", data="{}") as r,
    ):
        listed = json_format.ParseDict(await r.json(), payer_api.GetNodesResponse())
    return dict(listed.nodes)


async def test_get_nodes_on_each_port_names_the_gateway(network: Network, gateway_for: Any) -> None:
    listen = f"127.0.0.1:{free_port()}"
    gateway = await gateway_for(http_listen_address=listen, http_node_urls=NODE_URLS)
    assert await http_nodes(gateway) == {0: f"http://{listen}"}
    # The gRPC port names itself likewise (gateway/reads.py serves both).
    assert await gateway.nodes() == {0: f"http://{gateway.gateway.address}"}


async def test_without_reads_through_the_gateway_the_http_port_lists_the_nodes_grpc_web_urls(
    network: Network, gateway_for: Any
) -> None:
    gateway = await gateway_for(
        http_listen_address=f"127.0.0.1:{free_port()}",
        http_node_urls=NODE_URLS,
        reads_through_gateway=False,
    )
    assert await http_nodes(gateway) == {100: "http://127.0.0.1:5150", 300: "http://127.0.0.1:5152"}


def grpc_web_frame(message: Message) -> bytes:
    data = message.SerializeToString()
    return b"\x00" + struct.pack(">I", len(data)) + data


def first_message(body: bytes) -> bytes:
    """The first data frame of a gRPC-web response (flag 0), whose trailers say OK."""
    size = struct.unpack(">I", body[1:5])[0]
    assert body[0] == 0 and b"grpc-status:0" in body[5 + size :], body
    return body[5 : 5 + size]
