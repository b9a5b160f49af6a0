"""`xnode watchdog` alone (as a client), one round against a real node 100 on anvil and
Postgres, a misbehaving node 200 that serves a doctored chain payload, and node 300 down:
the two are reported where they can be checked (node 100 re-checks the chain claim), node
100 is not reported at all."""

from __future__ import annotations

from typing import Any

import grpc

from tests.conftest import ChainEnv, NodeSpec, node_settings
from tests.fake_peer import serve_replication_methods
from tests.integration.api.test_misbehavior_evidence import resigned, taken
from tests.integration.chain.helpers import commit_envelope, publish
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient
from xnode.commands.watch import watch
from xnode.config import Settings
from xnode.core import misbehavior
from xnode.devtools.postgres import free_port

GROUP = bytes(range(16))


async def test_one_round_reports_the_doctored_chain_payload_and_the_node_down(
    start_node: Any, database: str, node_spec: NodeSpec, chain_env: ChainEnv
) -> None:
    addresses = {n: f"127.0.0.1:{free_port()}" for n in node_spec.keys}
    chain_env.register(node_spec, addresses)
    settings = node_settings(database, node_spec, **chain_env.settings())
    node = await start_node(**{**settings, "listen_address": addresses[100]})
    async with NodeClient(node.address) as client:
        (indexed,) = await publish(client, 100, [commit_envelope(GROUP)])
    doctored = envelopes_pb2.OriginatorEnvelope.FromString(
        resigned(indexed, node_spec.keys[200], b"doctored")
    )

    async def query(request: bytes, context: Any) -> bytes:
        return api.QueryEnvelopesResponse(envelopes=[indexed, doctored]).SerializeToString()

    handler = grpc.unary_unary_rpc_method_handler(
        query, request_deserializer=bytes, response_serializer=bytes
    )
    fake = await serve_replication_methods({"QueryEnvelopes": handler}, addresses[200])
    try:
        watchdog = Settings(
            **{
                **chain_env.settings(),
                "metrics_address": "",
                "watchdog_timeout_seconds": 5,
                "watchdog_slow_seconds": 2,
            }
        )
        await watch(watchdog, once=True)
    finally:
        await fake.stop(None)
    async with NodeClient(node.address) as client:
        reports = await taken(client)
    assert sorted(reports) == [
        (misbehavior.FAILED_REQUEST, 300),
        (misbehavior.BLOCKCHAIN_INCONSISTENCY, 200),
    ]
