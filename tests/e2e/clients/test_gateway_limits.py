"""Per-client limits and usage in `xnode gateway` (issue 11 part 5), on a real devnet: three
node processes on the chain registry (anvil), real Postgres, and a gateway process with two
API keys. A client over its envelope limit is refused (RESOURCE_EXHAUSTED, retry-after) and
nothing of the refused request is published; the other client is unaffected; requests
without a valid key are UNAUTHENTICATED; `xnode gateway usage` prints what was sent, with
the fees the originators signed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import xmtp_bindings.xmtpv3 as xmtp
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.clients.conftest import GatewayProcess, _spawn_gateway
from tests.e2e.clients.xmtp_users import new_user
from tests.e2e.replication.conftest import ChainNetwork
from tests.support.statuses import trailers
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xmtp.xmtpv4.payer_api import payer_api_pb2_grpc
from xnode.api.errors import RETRY_AFTER_TRAILER
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.envelopes import parse_originator_envelope
from xnode.devtools.devnet import wait_serving
from xnode.devtools.postgres import free_port

pytestmark = pytest.mark.slow

KEYS = {"alice": "alice-key-1", "bob": "bob-key-2"}
ALLOWED = 5  # envelopes in a client's bucket: 0.01/s with a 500 s burst, no refill to speak of


@dataclass
class LimitedGateway:
    process: GatewayProcess
    metrics_address: str
    usage_file: Path


@pytest.fixture
def gateway(chain_network: ChainNetwork, tmp_path: Path) -> Iterator[LimitedGateway]:
    yield from limited_gateway(chain_network, tmp_path)


@pytest.fixture
def keyed_reads_gateway(chain_network: ChainNetwork, tmp_path: Path) -> Iterator[LimitedGateway]:
    yield from limited_gateway(chain_network, tmp_path, XNODE_GATEWAY_ANONYMOUS_READS="false")


def limited_gateway(
    chain_network: ChainNetwork, tmp_path: Path, **extra: str
) -> Iterator[LimitedGateway]:
    metrics_address = f"127.0.0.1:{free_port()}"
    for node_id in chain_network.addresses:  # one at a time: each gets its own start deadline
        chain_network.start(node_id)
    process = _spawn_gateway(
        chain_network.chain,
        tmp_path,
        0,
        XNODE_GATEWAY_API_KEYS=",".join(f"{n}={k}" for n, k in KEYS.items()),
        XNODE_GATEWAY_CLIENT_PUBLISH_ENVELOPES_PER_SECOND="0.01",
        XNODE_GATEWAY_CLIENT_LIMIT_BURST_SECONDS="500",
        XNODE_GATEWAY_USAGE_FILE=str(tmp_path / "usage.sqlite"),
        XNODE_GATEWAY_METRICS_ADDRESS=metrics_address,
        **extra,
    )
    if not wait_serving(process.address, 60):
        pytest.fail(f"xnode gateway did not start serving:\n{process.output()[-3000:]}")
    yield LimitedGateway(process, metrics_address, tmp_path / "usage.sqlite")
    process.proc.terminate()
    process.proc.wait(30)


@pytest.fixture
async def stub(gateway: LimitedGateway) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(gateway.process.address) as channel:
        yield payer_api_pb2_grpc.PayerApiStub(channel)


async def publish(
    stub: Any, key: str | None, envelopes: list[envelopes_pb2.ClientEnvelope]
) -> list[bytes]:
    metadata = (("authorization", f"Bearer {key}"),) if key else ()
    reply = await stub.PublishClientEnvelopes(
        payer_api.PublishClientEnvelopesRequest(envelopes=envelopes),
        metadata=metadata,
        timeout=60,
    )
    return [e.SerializeToString() for e in reply.originator_envelopes]


def messages(group: int, count: int, text: str) -> list[envelopes_pb2.ClientEnvelope]:
    return [
        group_message_envelope(group.to_bytes(16, "big"), f"{text} {i}".encode())
        for i in range(count)
    ]


def usage(gateway: LimitedGateway) -> dict[str, dict[str, Any]]:
    """`xnode gateway usage --json`, by client (one day)."""
    done = subprocess.run(
        [sys.executable, "-m", "xnode.cli", "gateway", "usage", "--json"],
        env={**os.environ, "XNODE_GATEWAY_USAGE_FILE": str(gateway.usage_file)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {row["client"]: row for row in json.loads(done.stdout)}


def limited_count(gateway: LimitedGateway) -> float:
    """xnode_limited_total{api="gateway"} from the gateway's /metrics."""
    url = f"http://{gateway.metrics_address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "xnode_limited"
        for sample in family.samples
        if sample.name == "xnode_limited_total" and sample.labels.get("api") == "gateway"
    )


async def test_a_client_over_its_limit_is_refused_and_the_other_is_not(
    stub: Any, gateway: LimitedGateway, chain_network: ChainNetwork
) -> None:
    alice_sent = messages(1, 3, "alice") + messages(2, 2, "alice")
    answers = await publish(stub, KEYS["alice"], alice_sent[:3])
    answers += await publish(stub, KEYS["alice"], alice_sent[3:])

    refused = messages(3, 1, "alice over")
    with pytest.raises(grpc.aio.AioRpcError) as over:
        await publish(stub, KEYS["alice"], refused)
    assert over.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "client alice" in (over.value.details() or "")
    retry = trailers(over.value)[RETRY_AFTER_TRAILER]
    assert int(retry) >= 1

    bob_sent = messages(4, ALLOWED, "bob")
    bob_answers = await publish(stub, KEYS["bob"], bob_sent)
    assert len(bob_answers) == ALLOWED

    for key in (None, "not-a-key"):
        with pytest.raises(grpc.aio.AioRpcError) as unknown:
            await publish(stub, key, messages(5, 1, "nobody"))
        assert unknown.value.code() is grpc.StatusCode.UNAUTHENTICATED

    # Nothing of the refused requests reached a node.
    refused_topics = {e.aad.target_topic for e in refused + messages(5, 1, "nobody")}
    for address in chain_network.addresses.values():
        async with NodeClient(address) as client:
            assert not await client.query(sorted(refused_topics))

    assert limited_count(gateway) == 1

    recorded = usage(gateway)
    assert set(recorded) == {"alice", "bob"}
    for name, sent, got in (
        ("alice", alice_sent, answers),
        ("bob", bob_sent, bob_answers),
    ):
        fees = [parse_originator_envelope(a).fees for a in got]
        assert recorded[name]["envelopes"] == len(sent)
        assert recorded[name]["bytes"] == sum(len(e.SerializeToString()) for e in sent)
        assert recorded[name]["base_fee"] == sum(f.base for f in fees)
        assert recorded[name]["congestion_fee"] == sum(f.congestion for f in fees)


async def test_the_official_client_sends_the_api_key_it_is_given(
    gateway: LimitedGateway, chain_network: ChainNetwork, tmp_path: Path
) -> None:
    """The Python bindings (libxmtp 1.10.0) send a credential set on an FfiAuthHandle as the
    authorization header of their PayerApi calls to the gateway: registering an inbox is paid
    for as bob's (docs/clients.md)."""
    handle: Any = xmtp.FfiAuthHandle  # its constructor is untyped in the bindings
    auth = handle()
    bearer = f"Bearer {KEYS['bob']}"
    await auth.set(xmtp.FfiCredential(name=None, value=bearer, expires_at_seconds=2**62))
    node = f"http://{chain_network.addresses[100]}"
    user = new_user("bob", tmp_path / "users", node, f"http://{gateway.process.address}")
    user.auth = auth
    try:
        await user.connect()
    finally:
        user.close()
    assert usage(gateway)["bob"]["envelopes"] >= 1


async def test_reads_need_a_key_when_the_gateway_has_keys_and_no_anonymous_reads(
    keyed_reads_gateway: LimitedGateway,
) -> None:
    gateway = keyed_reads_gateway
    request = api.QueryEnvelopesRequest(query=api.EnvelopesQuery(topics=[b"\x00" + bytes(16)]))
    async with grpc.aio.insecure_channel(gateway.process.address) as channel:
        query = channel.unary_unary(
            "/xmtp.xmtpv4.message_api.ReplicationApi/QueryEnvelopes",
            request_serializer=api.QueryEnvelopesRequest.SerializeToString,
            response_deserializer=api.QueryEnvelopesResponse.FromString,
        )
        for metadata in ((), (("authorization", "Bearer not-a-key"),)):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await query(request, metadata=metadata, timeout=30)
            assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        key = (("authorization", f"Bearer {KEYS['alice']}"),)
        answer = await query(request, metadata=key, timeout=30)
        assert list(answer.envelopes) == []  # served: nothing was published there
