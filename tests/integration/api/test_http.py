"""gRPC-web and HTTP/JSON on a real node: the same answers as gRPC, byte for byte."""

from __future__ import annotations

import asyncio
import json
import struct
import time
from typing import Any

import aiohttp
import grpc
from google.protobuf import json_format

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope

GROUP = bytes(range(16))
TOPIC = b"\x00" + GROUP
QUERY = "/xmtp.xmtpv4.message_api.ReplicationApi/QueryEnvelopes"
SUBSCRIBE = "/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeEnvelopes"
GRPC_WEB = {"Content-Type": "application/grpc-web+proto", "X-Grpc-Web": "1"}
ORIGIN = "http://page.test"


def _frame(payload: bytes, flag: int = 0) -> bytes:
    return struct.pack(">BI", flag, len(payload)) + payload


def _frames(body: bytes) -> list[tuple[int, bytes]]:
    frames, at = [], 0
    while at < len(body):
        flag, size = struct.unpack_from(">BI", body, at)
        frames.append((flag, body[at + 5 : at + 5 + size]))
        at += 5 + size
    return frames


async def _node(start_node: Any, database: str, node_spec: Any) -> Any:
    from tests.conftest import node_settings

    return await start_node(
        **node_settings(database, node_spec),
        http_listen_address="127.0.0.1:0",
        http_cors_origins=ORIGIN,
    )


def _query_request() -> api.QueryEnvelopesRequest:
    return api.QueryEnvelopesRequest(query=api.EnvelopesQuery(topics=[TOPIC]))


async def _grpc_raw(address: str, path: str, request: bytes) -> bytes:
    async with grpc.aio.insecure_channel(address) as channel:
        # No (de)serializers: the bytes as sent.
        call: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(path)
        raw: bytes = await call(request)
        return raw


async def test_query_answers_the_same_bytes_over_grpc_grpc_web_and_json(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await _node(start_node, database, node_spec)
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(SigningKey.generate(), 100, GROUP, [b"a", b"b"])
    request = _query_request().SerializeToString()
    over_grpc = await _grpc_raw(node.address, QUERY, request)
    base = f"http://{node.http_address}"
    async with aiohttp.ClientSession() as http:
        async with http.post(base + QUERY, data=_frame(request), headers=GRPC_WEB) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "application/grpc-web+proto"
            frames = _frames(await r.read())
        body = json_format.MessageToJson(_query_request())
        async with http.post(base + "/mls/v2/query-envelopes", data=body) as r:
            assert r.status == 200
            answer = await r.json()
    assert len(api.QueryEnvelopesResponse.FromString(over_grpc).envelopes) == 2
    assert frames[0] == (0x00, over_grpc)
    assert frames[1][0] == 0x80 and b"grpc-status:0\r\n" in frames[1][1]
    over_json = json_format.ParseDict(answer, api.QueryEnvelopesResponse())
    assert over_json.SerializeToString() == over_grpc


async def test_json_publish_and_newline_delimited_subscribe(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await _node(start_node, database, node_spec)
    payer = SigningKey.generate()
    publish = api.PublishPayerEnvelopesRequest(
        payer_envelopes=[build_payer_envelope(group_message_envelope(GROUP, b"j"), payer, 100)]
    )
    base = f"http://{node.http_address}"
    subscribe = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[TOPIC]))
    async with aiohttp.ClientSession() as http:
        async with http.post(
            base + "/mls/v2/publish-payer-envelopes", data=json_format.MessageToJson(publish)
        ) as r:
            assert r.status == 200, await r.text()
            published = json_format.ParseDict(await r.json(), api.PublishPayerEnvelopesResponse())
        async with http.post(
            base + "/mls/v2/subscribe-envelopes", data=json_format.MessageToJson(subscribe)
        ) as r:
            assert r.headers["Content-Type"] == "application/x-ndjson"
            line = json.loads(await r.content.readline())
        async with http.post(
            base + SUBSCRIBE, data=_frame(subscribe.SerializeToString()), headers=GRPC_WEB
        ) as r:
            header = await r.content.readexactly(5)
            web_frame = await r.content.readexactly(struct.unpack(">BI", header)[1])
    streamed = json_format.ParseDict(line["result"], api.SubscribeEnvelopesResponse())
    assert list(streamed.envelopes) == list(published.originator_envelopes)
    assert api.SubscribeEnvelopesResponse.FromString(web_frame) == streamed


async def test_refusals_map_to_http_statuses_with_the_reason(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await _node(start_node, database, node_spec)
    base = f"http://{node.http_address}"
    wrong_target = api.PublishPayerEnvelopesRequest(
        payer_envelopes=[
            build_payer_envelope(group_message_envelope(GROUP, b"x"), SigningKey.generate(), 200)
        ]
    )
    async with aiohttp.ClientSession() as http:
        async with http.post(base + "/mls/v2/query-envelopes", data="{not json") as r:
            assert r.status == 400
            bad_json = await r.json()
        async with http.post(
            base + "/mls/v2/publish-payer-envelopes", data=json_format.MessageToJson(wrong_target)
        ) as r:
            assert r.status == 400
            refused = await r.json()
        async with http.post(
            base + "/xmtp.xmtpv4.message_api.ReplicationApi/PublishPayerEnvelopes",
            data=_frame(wrong_target.SerializeToString()),
            headers={**GRPC_WEB, "Origin": ORIGIN},
        ) as r:
            web_status, web_headers = r.status, r.headers
    assert bad_json["code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "does not parse as xmtp.xmtpv4.message_api.QueryEnvelopesRequest" in bad_json["message"]
    assert "target originator 200 is not this node (100)" in refused["message"]
    # Trailers-only: the status in headers the page is allowed to read.
    assert web_status == 200 and web_headers["grpc-status"] == "3"
    assert "target%20originator" not in web_headers["grpc-message"]
    assert "target originator 200" in web_headers["grpc-message"]
    assert web_headers["Access-Control-Allow-Origin"] == ORIGIN
    assert "grpc-status" in web_headers["Access-Control-Expose-Headers"]


async def test_cors_preflight_and_health_over_grpc_web(
    start_node: Any, database: str, node_spec: Any
) -> None:
    from grpc_health.v1 import health_pb2

    node = await _node(start_node, database, node_spec)
    base = f"http://{node.http_address}"
    preflight = {
        "Origin": ORIGIN,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-grpc-web",
    }
    check = "/grpc.health.v1.Health/Check"
    async with aiohttp.ClientSession() as http:
        async with http.options(base + check, headers=preflight) as r:
            allowed = r.status, r.headers.get("Access-Control-Allow-Origin")
            allowed_headers = r.headers.get("Access-Control-Allow-Headers")
        async with http.options(base + check, headers={**preflight, "Origin": "http://x"}) as r:
            stranger = r.headers.get("Access-Control-Allow-Origin")
        request = health_pb2.HealthCheckRequest(service="").SerializeToString()
        async with http.post(base + check, data=_frame(request), headers=GRPC_WEB) as r:
            frames = _frames(await r.read())
        async with http.post(
            base + "/xmtp.xmtpv4.message_api.ReplicationApi/SubscribeOriginators",
            data=_frame(b""),
            headers=GRPC_WEB,
        ) as r:
            guarded = r.headers["grpc-status"]
    assert allowed == (204, ORIGIN) and allowed_headers == "content-type,x-grpc-web"
    assert stranger is None
    status = health_pb2.HealthCheckResponse.FromString(frames[0][1]).status
    assert status == health_pb2.HealthCheckResponse.SERVING
    # Node-to-node streams need a node token, which HTTP does not carry: not served there.
    assert guarded == str(grpc.StatusCode.UNIMPLEMENTED.value[0])


async def test_a_request_that_does_not_decode_is_invalid_argument_over_grpc_web(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await _node(start_node, database, node_spec)
    path = "/xmtp.xmtpv4.message_api.MisbehaviorApi/QueryMisbehaviorReports"
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://{node.http_address}{path}", data=_frame(b"\xff\xff"), headers=GRPC_WEB
        ) as r,
    ):
        status, message = r.headers["grpc-status"], r.headers["grpc-message"]
    assert status == str(grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert "does not decode as" in message


async def test_the_node_stops_promptly_with_an_http_subscription_open(
    start_node: Any, database: str, node_spec: Any
) -> None:
    node = await _node(start_node, database, node_spec)
    subscribe = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[TOPIC]))
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"http://{node.http_address}/mls/v2/subscribe-envelopes",
            data=json_format.MessageToJson(subscribe),
        ) as r,
    ):
        await r.content.readline()  # caught up: the stream is open
        started = time.monotonic()
        await asyncio.wait_for(node.stop(), timeout=8)  # well under the 10 s grace
        assert time.monotonic() - started < 8
