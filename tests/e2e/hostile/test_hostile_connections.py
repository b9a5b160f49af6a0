"""Connections that cost a node without asking anything: silent gRPC
connections, slowloris HTTP headers and one IP opening many connections, against a real
`xnode run` with short connection timeouts. Each is closed by the node, and the node still
answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import grpc

from tests.conftest import NodeProcess, NodeSpec
from tests.support.waiting import eventually
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port

PER_IP = 10
CALLS_PER_IP = 4
HANDSHAKE_S = 1.0


async def _open(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, _, port = address.rpartition(":")
    return await asyncio.open_connection(host, int(port))


async def closed_by_node(reader: asyncio.StreamReader) -> bool:
    """True once the node has closed the connection (EOF or reset); reads what it sent."""
    try:
        while await asyncio.wait_for(reader.read(65536), 0.05):
            pass
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    return True


async def dribble(writer: asyncio.StreamWriter, stop: asyncio.Event) -> None:
    """A slowloris client: a request line, then one header line at a time, never the end."""
    writer.write(b"POST /mls/v2/payer/get-nodes HTTP/1.1\r\nHost: node\r\n")
    i = 0
    with contextlib.suppress(ConnectionError):
        while not stop.is_set():
            writer.write(b"X-Slow-%d: x\r\n" % i)
            await writer.drain()
            i += 1
            await asyncio.sleep(0.2)


async def test_silent_slow_and_crowding_connections_are_closed(
    spawn_node: Callable[..., NodeProcess], database: str, node_spec: NodeSpec
) -> None:
    http = f"127.0.0.1:{free_port()}"
    node = spawn_node(
        database,
        node_spec,
        http_listen_address=http,
        connection_handshake_seconds=str(HANDSHAKE_S),
        connection_idle_seconds="2",
        http_connections_per_ip=str(PER_IP),
    )
    silent = [await _open(node.address) for _ in range(50)]
    slow = [await _open(http) for _ in range(50)]
    stop = asyncio.Event()
    dribbling = [asyncio.create_task(dribble(w, stop)) for _, w in slow]
    try:

        async def all_closed() -> bool:
            states = await asyncio.gather(*(closed_by_node(r) for r, _ in silent + slow))
            return all(states)

        await eventually(all_closed, within_s=30, what="the node closed every connection")
    finally:
        stop.set()
        await asyncio.gather(*dribbling)
        for _, writer in silent + slow:
            writer.close()

    # The node still serves, on both ports.
    async with NodeClient(node.address) as client:
        await client.publish_group_messages(SigningKey.generate(), 100, b"\x52" * 16, [b"ok"])
    reader, writer = await _open(http)
    writer.write(b"GET /mls/v2/payer/get-nodes HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 "), answer[:100]
    assert "Traceback" not in node.output()


async def test_one_ip_holds_at_most_its_share_of_http_connections(
    spawn_node: Callable[..., NodeProcess], database: str, node_spec: NodeSpec
) -> None:
    http = f"127.0.0.1:{free_port()}"
    spawn_node(
        database,
        node_spec,
        http_listen_address=http,
        connection_handshake_seconds="30",
        http_connections_per_ip=str(PER_IP),
    )
    opened = [await _open(http) for _ in range(3 * PER_IP)]
    try:

        async def refused_the_rest() -> bool:
            states = await asyncio.gather(*(closed_by_node(r) for r, _ in opened))
            return sum(states) >= 2 * PER_IP

        await eventually(refused_the_rest, within_s=10, what="connections past the cap closed")
        states = await asyncio.gather(*(closed_by_node(r) for r, _ in opened))
        assert states.count(False) == PER_IP  # the first ones, still open (within 30 s)
    finally:
        for _, writer in opened:
            writer.close()


async def test_one_ip_holds_at_most_its_share_of_grpc_calls(
    spawn_node: Callable[..., NodeProcess], database: str, node_spec: NodeSpec
) -> None:
    """grpcio caps no connections per IP: the node caps the calls one IP has in progress.
    Streams held open use it up; the next call of any kind is RESOURCE_EXHAUSTED at once,
    and a call goes through again once a stream ends."""
    node = spawn_node(database, node_spec, grpc_calls_per_ip=str(CALLS_PER_IP))
    request = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(originator_node_ids=[100]))
    async with NodeClient(node.address) as client:
        streams = [client.replication.SubscribeEnvelopes(request) for _ in range(CALLS_PER_IP)]
        for stream in streams:
            await stream.initial_metadata()  # each held by the node
        query = api.QueryEnvelopesRequest(query=api.EnvelopesQuery(originator_node_ids=[100]))

        async def refused() -> bool:
            try:
                await client.replication.QueryEnvelopes(query, timeout=10)
            except grpc.aio.AioRpcError as exc:
                assert exc.code() is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                assert "calls in progress on this node" in (exc.details() or "")
                return True
            return False

        await eventually(refused, within_s=10, what="a call past the cap refused")
        streams[0].cancel()

        async def answered() -> bool:
            return not await refused()

        await eventually(answered, within_s=10, what="a call answered once a stream ended")
        for stream in streams[1:]:
            stream.cancel()
    assert "Traceback" not in node.output()
