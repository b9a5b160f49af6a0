"""Client benchmarks on a devnet (`xnode devnet --nodes 3`: anvil, three nodes,
the gateway), started and stopped by this script.

    PYTHONPATH=src .venv/bin/python bench/bench_clients.py [--messages 200] [--seconds 10]
        [--concurrency 16]

1. Latency of a real client's message: two users of the official Python bindings
   (xmtp-bindings 0.1.8, libxmtp 1.10.0, driven as tests/e2e/clients drives them). Alice
   sends `--messages` texts, one after another, in a group whose preferred node is not the
   node Bob's client reads from; each is timed from Alice's send_text call to its arrival in
   Bob's live stream (stream_all_messages), so the path is: MLS encryption, the gateway,
   the preferred node, replication, Bob's node's fan-out, decryption.
2. Publishing throughput through the gateway (PayerApi.PublishClientEnvelopes, the gateway
   signs) beside publishing directly to the node (ReplicationApi.PublishPayerEnvelopes, this
   script signs), one envelope per request, `--concurrency` requests in flight, to the same
   node, alternated twice in the same run. The nodes' API limits and the gateway's
   per-client limits are off (a payer's or client's rate limit would otherwise be what is
   measured).

The machine is shared: the load average is printed beside every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc

from xmtp.xmtpv4.payer_api import payer_api_pb2, payer_api_pb2_grpc
from xnode.client.network import NetworkClient
from xnode.client.node import CHANNEL_OPTIONS, NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.core.originator_selection import failover_order
from xnode.core.registry import NodeEntry, Registry
from xnode.core.topics import Topic, TopicKind


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.2f}/{five:.2f} (1/5 min)"


def start_devnet(state: Path) -> tuple[subprocess.Popen[bytes], dict[str, Any]]:
    described = state / "devnet.json"
    log = (state.parent / "devnet.out").open("ab")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xnode.cli",
            "devnet",
            "--nodes",
            "3",
            "--dir",
            str(state),
            "--base-port",
            "25050",
        ],
        stdout=log,
        stderr=log,
        start_new_session=True,
        # The nodes' API limits and the gateway's per-client limits are off: this
        # measures the paths, not the limits.
        env={
            **os.environ,
            "XNODE_LOG_FORMAT": "json",
            "XNODE_LOG_LEVEL": "warning",
            "XNODE_LIMITS_ENABLED": "false",
            "XNODE_GATEWAY_CLIENT_LIMITS_ENABLED": "false",
        },
    )
    deadline = time.monotonic() + 180
    while not described.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit((state.parent / "devnet.out").read_text()[-3000:])
        time.sleep(0.2)
    return proc, json.loads(described.read_text())


def registry_nodes(described: dict[str, Any]) -> list[NodeEntry]:
    return [
        NodeEntry(n["node_id"], bytes.fromhex(n["public_key"][2:]), n["url"])
        for n in described["nodes"]
    ]


def group_preferring(nodes: list[NodeEntry], node_id: int) -> bytes:
    for g in range(256):
        group = bytes([g]) * 16
        if failover_order(Topic(TopicKind.GROUP_MESSAGES, group).raw, nodes)[0] == node_id:
            return group
    raise AssertionError("no group prefers node {node_id}")


# -- 1. latency, with the official bindings, in a process of its own (see tests/e2e/clients) --


def latency_child(described: dict[str, Any], messages: int, directory: str, out: Any) -> None:
    os.environ.setdefault("RUST_LOG", "error")  # libxmtp logs every envelope at info
    try:
        out.send(("done", asyncio.run(_latency(described, messages, Path(directory)))))
    except BaseException as exc:  # reported to the parent, which prints it
        import traceback

        out.send(("failed", f"{exc}\n{traceback.format_exc()}"))
    sys.stdout.flush()
    os._exit(0)  # libxmtp's worker threads end with the process


async def _latency(described: dict[str, Any], messages: int, directory: Path) -> dict[str, Any]:
    from tests.e2e.clients.network_view import NetworkView
    from tests.e2e.clients.scenarios import read_nodes
    from tests.e2e.clients.xmtp_users import MessageStream, group_options, new_user, until

    class TimedStream(MessageStream):
        def __init__(self) -> None:
            super().__init__()
            self.arrived: dict[str, tuple[float, int]] = {}

        def on_message(self, message: Any) -> None:
            now = time.perf_counter()
            super().on_message(message)
            import xmtp_bindings.xmtpv3 as xmtp

            try:
                text = xmtp.decode_text(message.content)
            except xmtp.FfiError:
                return
            self.arrived[text] = (now, message.originator_id)

    nodes = {n["node_id"]: n for n in described["nodes"]}
    view = NetworkView(
        {i: n["address"] for i, n in nodes.items()},
        {i: n["metrics"] for i, n in nodes.items()},
        {i: bytes.fromhex(n["public_key"][2:]) for i, n in nodes.items()},
        [described["gateway"]["url"]],
        set(nodes),
    )
    gateway = described["gateway"]["url"]
    alice = new_user("alice", directory, view.node_url(100), gateway)
    bob = new_user("bob", directory, view.node_url(200), gateway)
    try:
        await alice.connect()
        await bob.connect()
        await alice.find(bob)
        bob_nodes, _ = await read_nodes(view, bob)
        stream = TimedStream()
        closer = await bob.client.conversations().stream_all_messages(stream, None)
        await closer.wait_for_ready()
        bob.streams.append(closer)
        entries = registry_nodes(described)
        for _ in range(30):
            group = await alice.client.conversations().create_group([bob.inbox_id], group_options())
            topic = Topic(TopicKind.GROUP_MESSAGES, group.id()).raw
            if failover_order(topic, entries)[0] not in bob_nodes:
                break
        preferred = failover_order(topic, entries)[0]
        await bob.group(group.id())

        def delivered(text: str) -> Callable[[], Awaitable[float | None]]:
            async def check() -> float | None:
                return stream.arrived.get(text, (None, 0))[0]

            return check

        for i in range(5):  # warm-up: connections, the group's first epoch
            await group.send_text(f"warm {i}")
            await until("warm-up delivered", delivered(f"warm {i}"), 60)
        latencies, sends, origins = [], [], set()
        for i in range(messages):
            text = f"m {i}"
            started = time.perf_counter()
            await group.send_text(text)
            sends.append(time.perf_counter() - started)
            arrived = await until(f"{text} delivered", delivered(text), 60)
            latencies.append(arrived - started)
            origins.add(stream.arrived[text][1])
        return {
            "bob_reads_from": sorted(bob_nodes),
            "preferred_node": preferred,
            "originators": sorted(origins),
            "latencies": latencies,
            "sends": sends,
        }
    finally:
        alice.close()
        bob.close()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run_latency(described: dict[str, Any], messages: int, directory: Path) -> None:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    proc = context.Process(target=latency_child, args=(described, messages, str(directory), child))
    proc.start()
    if not parent.poll(900):
        proc.kill()
        raise SystemExit("latency run did not finish in 15 min")
    status, result = parent.recv()
    proc.join(30)
    if status != "done":
        raise SystemExit(f"latency run failed: {result}")
    ms = [x * 1000 for x in result["latencies"]]
    sends = [x * 1000 for x in result["sends"]]
    print(
        f"latency, official Python bindings, {len(ms)} messages sent through the gateway to "
        f"node {result['preferred_node']}, read from Bob's stream on node "
        f"{result['bob_reads_from']} (originators seen: {result['originators']}): "
        f"p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms, "
        f"max {max(ms):.1f} ms, mean {statistics.mean(ms):.1f} ms; send_text alone p50 "
        f"{percentile(sends, 50):.1f} ms, p99 {percentile(sends, 99):.1f} ms  [{load()}]",
        flush=True,
    )


# -- 1b. the same path without MLS: xnode.client reading, the gateway publishing -------------


async def run_protocol_latency(described: dict[str, Any], messages: int) -> None:
    """For reference beside the bindings: the network's part alone. Envelopes go through the
    gateway to node 100 (their topic's preferred node); an xnode.client subscription on node
    200 (checks, causal order) receives them."""
    entries = registry_nodes(described)
    group = group_preferring(entries, 100)
    topic = Topic(TopicKind.GROUP_MESSAGES, group).raw
    reader_registry = Registry([e for e in entries if e.node_id == 200])
    reader = NetworkClient(Registry(entries), check_signatures=True)
    reader.registry = reader_registry  # reads from 200 only; keys of every node
    channel = grpc.aio.insecure_channel(described["gateway"]["address"], options=CHANNEL_OPTIONS)
    gateway = payer_api_pb2_grpc.PayerApiStub(channel)
    subscription = reader.subscribe([topic], cursor=None)
    arrivals: asyncio.Queue[tuple[float, int]] = asyncio.Queue()

    async def read() -> None:
        async for env in subscription:
            await arrivals.put((time.perf_counter(), env.originator_node_id))

    reading = asyncio.create_task(read())
    latencies = []
    try:
        for i in range(messages + 5):
            started = time.perf_counter()
            await gateway.PublishClientEnvelopes(
                payer_api_pb2.PublishClientEnvelopesRequest(
                    envelopes=[group_message_envelope(group, b"protocol %d" % i)]
                ),
                timeout=30,
            )
            arrived, origin = await asyncio.wait_for(arrivals.get(), 30)
            assert origin == 100 and subscription.node_id == 200
            if i >= 5:  # the first few warm the connections
                latencies.append((arrived - started) * 1000)
    finally:
        subscription.close()
        reading.cancel()
        await channel.close(None)
        await reader.close()
    print(
        f"latency, xnode.client (no MLS), {len(latencies)} envelopes through the gateway to "
        f"node 100, read from a subscription on node 200: p50 {percentile(latencies, 50):.1f} "
        f"ms, p99 {percentile(latencies, 99):.1f} ms, max {max(latencies):.1f} ms  [{load()}]",
        flush=True,
    )


# -- 2. throughput: gateway beside direct ------------------------------------------------------


async def _drive(seconds: float, concurrency: int, one: Callable[[int], Awaitable[None]]) -> float:
    done = 0
    stop = time.monotonic() + seconds

    async def worker(w: int) -> None:
        nonlocal done
        i = 0
        while time.monotonic() < stop:
            await one(w * 1_000_000 + i)
            i += 1
            done += 1

    started = time.monotonic()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    return done / (time.monotonic() - started)


async def run_throughput(described: dict[str, Any], seconds: float, concurrency: int) -> None:
    nodes = {n["node_id"]: n for n in described["nodes"]}
    group = group_preferring(registry_nodes(described), 100)
    payer = SigningKey.generate()
    gateway_channel = grpc.aio.insecure_channel(
        described["gateway"]["address"], options=CHANNEL_OPTIONS
    )
    gateway = payer_api_pb2_grpc.PayerApiStub(gateway_channel)
    node = NodeClient(nodes[100]["address"])

    async def via_gateway(i: int) -> None:
        envelope = group_message_envelope(group, b"gateway %d" % i)
        await gateway.PublishClientEnvelopes(
            payer_api_pb2.PublishClientEnvelopesRequest(envelopes=[envelope]), timeout=30
        )

    async def direct(i: int) -> None:
        envelope = group_message_envelope(group, b"direct %d" % i)
        envelope.aad.target_originator = 100
        await node.publish([build_payer_envelope(envelope, payer, 100)])

    await _drive(2, concurrency, direct)  # warm-up
    await _drive(2, concurrency, via_gateway)
    totals = {"direct": 0.0, "gateway": 0.0}
    try:
        for round_ in (1, 2):
            for name, one in (("direct", direct), ("gateway", via_gateway)):
                rate = await _drive(seconds, concurrency, one)
                totals[name] += rate
                print(
                    f"throughput round {round_}, {name} to node 100: {rate:.0f} envelopes/s "
                    f"({concurrency} in flight, 1 per request)  [{load()}]",
                    flush=True,
                )
    finally:
        await gateway_channel.close(None)
        await node.close()
    print(
        f"gateway / direct = {totals['gateway'] / totals['direct']:.2f} (goal >= 0.7)  [{load()}]",
        flush=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="xnode-bench-clients-"))
    root.chmod(0o755)  # Postgres runs as `postgres` when this runs as root
    print(f"cores: {os.cpu_count()}, shared with other work  [{load()}]", flush=True)
    proc, described = start_devnet(root / "state")
    try:
        if not args.skip_latency:
            run_latency(described, args.messages, root / "users")
        asyncio.run(run_protocol_latency(described, args.messages))
        asyncio.run(run_throughput(described, args.seconds, args.concurrency))
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(90)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
