"""The gateway names each client it calls a node for (`x-forwarded-for`), so nodes that trust
it limit its clients apart: publishes, queries and subscriptions are charged on the nodes to
the client's address, none to the gateway's. The gateway believes the header only from the
proxies it trusts itself (a load balancer in front of several gateways)."""

from __future__ import annotations

from typing import Any

from tests.conftest import Network
from tests.integration.gateway.test_gateway_reads import query, reads_stub, topic_preferring
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.payer_api import payer_api_pb2 as payer_api
from xnode.client.node import group_message_envelope

PUBLISHER, READER, SUBSCRIBER, SPOOFED = (f"203.0.113.{i}" for i in range(1, 5))
LOCAL = "127.0.0.1"  # the test, the gateways and the nodes all call from here


def coming_from(address: str) -> tuple[tuple[str, str], ...]:
    """What a load balancer in front of the gateway adds for its client."""
    return (("x-forwarded-for", address),)


async def charged(nodes: dict[int, Any]) -> set[str]:
    """The names of every node's limit buckets (store.limits)."""
    keys: set[str] = set()
    for node in nodes.values():
        keys |= {row["key"] for row in await node.pool.fetch("SELECT key FROM limit_buckets")}
    return keys


async def publish(gateway: Any, group: bytes, address: str) -> None:
    request = payer_api.PublishClientEnvelopesRequest(
        envelopes=[group_message_envelope(group, address.encode())]
    )
    await gateway.stub.PublishClientEnvelopes(request, metadata=coming_from(address), timeout=30)


async def test_nodes_charge_the_gateways_clients_not_the_gateway(
    start_node: Any, network: Network, gateway_for: Any
) -> None:
    nodes = {
        n: await start_node(**network.settings(n, trusted_proxies=LOCAL)) for n in (100, 200, 300)
    }
    behind_balancer = await gateway_for(trusted_proxies=LOCAL)
    group, topic = topic_preferring(network, 100)

    await publish(behind_balancer, group, PUBLISHER)
    await reads_stub(behind_balancer).QueryEnvelopes(
        query(topic), metadata=coming_from(READER), timeout=30
    )
    stream = reads_stub(behind_balancer).SubscribeEnvelopes(
        api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=[topic])),
        metadata=coming_from(SUBSCRIBER),
    )
    try:
        subscribed = f"subscribe:ip:{SUBSCRIBER}"

        async def stream_charged() -> bool:
            return subscribed in await charged(nodes)

        await eventually(stream_charged, 15, "the node charging the gateway's subscriber")
    finally:
        stream.cancel()
    keys = await charged(nodes)
    assert {f"publish:ip:{PUBLISHER}:envelopes", f"query:ip:{READER}:requests"} <= keys
    assert not [k for k in keys if f"ip:{LOCAL}" in k], keys

    # A gateway that trusts no proxy ignores what its caller claims: it names the caller.
    trusting_nobody = await gateway_for()
    await publish(trusting_nobody, group, SPOOFED)
    keys = await charged(nodes)
    assert f"publish:ip:{LOCAL}:envelopes" in keys
    assert not [k for k in keys if SPOOFED in k], keys
