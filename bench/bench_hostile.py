"""The limits under a stranger's attacks: two replicating `xnode run`
processes with their default limits, attacked anonymously while an honest client publishes
to node A and reads the envelopes back on node B.

    .venv/bin/python bench/bench_hostile.py [--flood 20000] [--connections 500]

The floods are sent by `h2load` (Debian's nghttp2-client, one C thread: the load costs
little CPU); the statuses by a small Python client beside it (h2load counts HTTP 200
whatever the grpc-status says). The attacks: QueryEnvelopes carrying a node token whose
subject is "²"; publishes of 1,000 envelopes (the payer's burst is 400); GetSignedHoldings
and GetFingerprints floods (each holdings answer is a node signature); GetFingerprints over
1,024 copies of 1..2^63; 150 SubscribeCheckpoints follows (100 allowed per IP); silent gRPC
connections and slowloris HTTP headers. Printed, each beside its ceiling: node A's peak
RSS, the honest client's replication lag, signed holdings answers per second, how long
silent and slow connections stayed open, the statuses seen and the reports filed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_cores import grpc_frame, h2load, require_h2load
from bench_replication import A, B, Nodes, fresh_database

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.devtools.postgres import free_port, start_cluster
from xnode_api.logs.v1 import logs_pb2 as logs
from xnode_api.withholding.v1 import withholding_pb2 as wh

QUERY = "/xmtp.xmtpv4.message_api.ReplicationApi/QueryEnvelopes"
HOLDINGS = "/xnode.withholding.v1.HoldingsApi/GetSignedHoldings"
FINGERPRINTS = "/xnode.logs.v1.LogApi/GetFingerprints"
FOLLOW = "/xnode.logs.v1.LogApi/SubscribeCheckpoints"
GROUP = b"\x61" * 16
PAYER = SigningKey.generate()
RSS_BOUND_MIB = 1024  # node A's resident memory through every attack
LAG_CEILING_S = 5.0  # the honest client's publish-to-replica time
HOLDINGS_CEILING = 50 * 1.25  # limit_query_requests_per_second, plus its burst over the run
HANDSHAKE_S = 10.0  # connection_handshake_seconds (the default)
FORBIDDEN = {"UNKNOWN", "INTERNAL"}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def superscript_token() -> str:
    """A signed token whose subject passes str.isdigit() and fails int(): "²"."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.unit.replication.test_auth import signed_token

    now = int(time.time())
    claims: dict[str, object] = {"sub": "\u00b2", "aud": [str(A)], "iat": now, "exp": now + 600}
    return signed_token(claims, SigningKey.generate())


def limited(metrics: str) -> int:
    """xnode_limited_total summed over its labels, from node A's metrics port."""
    text = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("xnode_limited_total{")
        )
    )


class Honest:
    """Publishes to A every 0.2 s and times each envelope until B holds it."""

    def __init__(self, nodes: Nodes) -> None:
        self.nodes = nodes
        self.lags: list[float] = []
        self.unreplicated = 0
        self.stop = asyncio.Event()

    async def run(self) -> None:
        async with (
            NodeClient(self.nodes.addresses[A]) as a,
            NodeClient(self.nodes.addresses[B]) as b,
        ):
            while not self.stop.is_set():
                group = os.urandom(16)  # a topic of its own: B's answer is this envelope
                started = time.monotonic()
                [sent] = await a.publish_group_messages(PAYER, A, group, [b"honest"])
                wanted = sent.SerializeToString()
                while time.monotonic() - started < 30:
                    got = await b.query(topics=[b"\x00" + group])
                    if any(e.SerializeToString() == wanted for e in got):
                        self.lags.append(time.monotonic() - started)
                        break
                    await asyncio.sleep(0.05)
                else:
                    self.unreplicated += 1
                await asyncio.sleep(0.2)


async def code_of(call: Awaitable[Any]) -> str:
    try:
        await call
    except grpc.aio.AioRpcError as exc:
        return exc.code().name
    return "OK"


def unary(channel: grpc.aio.Channel, method: str) -> Any:
    return channel.unary_unary(
        method, request_serializer=lambda m: m.SerializeToString(), response_deserializer=bytes
    )


async def sampled(channel: grpc.aio.Channel, method: str, request: Any, **kw: Any) -> Counter[str]:
    call = unary(channel, method)
    codes = await asyncio.gather(*(code_of(call(request, timeout=30, **kw)) for _ in range(200)))
    return Counter(codes)


async def open_until_closed(address: str, count: int, slow: bool) -> float:
    """Opens `count` connections (silent, or sending header lines every 0.5 s); seconds
    until the node has closed the last."""
    host, _, port = address.rpartition(":")
    opened = [await asyncio.open_connection(host, int(port)) for _ in range(count)]
    started = time.monotonic()

    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> float:
        if slow:
            writer.write(b"POST /mls/v2/payer/get-nodes HTTP/1.1\r\nHost: node\r\n")
        with contextlib.suppress(ConnectionError):
            while time.monotonic() - started < 120:
                if slow:
                    writer.write(b"X-Slow: x\r\n")
                try:
                    if not await asyncio.wait_for(reader.read(65536), 0.5):
                        break
                except TimeoutError:
                    continue
        writer.close()
        return time.monotonic() - started

    return max(await asyncio.gather(*(held(r, w) for r, w in opened)))


async def filed(nodes: Nodes) -> list[tuple[int, str, int, int]]:
    """Every report A and B hold: (accused, type, filed at, reporter's time)."""
    reports: list[tuple[int, str, int, int]] = []
    for node_id in (A, B):
        async with NodeClient(nodes.addresses[node_id]) as client:
            answer = await client.misbehavior.QueryMisbehaviorReports(
                mb.QueryMisbehaviorReportsRequest()
            )
        for r in answer.reports:
            unsigned = mb.UnsignedMisbehaviorReport.FromString(r.unsigned_misbehavior_report)
            kind = mb.Misbehavior.Name(unsigned.type)
            reports.append((unsigned.misbehaving_node_id, kind, node_id, unsigned.reporter_time_ns))
    return reports


async def attack(nodes: Nodes, http: str, metrics: str, args: argparse.Namespace) -> None:
    pid = nodes.processes[A].pid
    # A starts before B, and may report B unreachable meanwhile: only what the attacks
    # bring counts.
    before_attacks = await filed(nodes)
    baseline = rss_mib(pid)
    peak = [baseline]
    honest = Honest(nodes)
    honest_task = asyncio.create_task(honest.run())

    async def watch_rss() -> None:
        while not honest.stop.is_set():
            peak[0] = max(peak[0], rss_mib(pid))
            await asyncio.sleep(0.2)

    rss_task = asyncio.create_task(watch_rss())
    seen: Counter[str] = Counter()
    work = nodes.work
    address = nodes.addresses[A]
    token = superscript_token()
    async with grpc.aio.insecure_channel(address) as channel:
        query = api.QueryEnvelopesRequest(query=api.EnvelopesQuery(originator_node_ids=[A]))
        (work / "query.bin").write_bytes(grpc_frame(query.SerializeToString()))
        flood = h2load(
            address, QUERY, work / "query.bin", args.flood, (4, 16), [("node-authorization", token)]
        )
        seen += await sampled(channel, QUERY, query, metadata=(("node-authorization", token),))
        print(f"'²' token floods: {flood.succeeded + flood.failed:,} sent by h2load")

        async with NodeClient(address) as client:
            for _ in range(20):
                seen[
                    await code_of(
                        client.publish_group_messages(
                            PAYER, A, GROUP, [b"%d" % i for i in range(1000)]
                        )
                    )
                ] += 1

        holdings = wh.GetSignedHoldingsRequest(originator_node_id=A, first=1, last=1)
        (work / "holdings.bin").write_bytes(grpc_frame(holdings.SerializeToString()))
        before = limited(metrics)
        flood = h2load(address, HOLDINGS, work / "holdings.bin", args.flood, (4, 16))
        signed = flood.succeeded - (limited(metrics) - before)
        signed_rate = signed / flood.seconds
        seen += await sampled(channel, HOLDINGS, holdings)

        whole = logs.SequenceRange(first=1, last=2**63 - 1)
        overlapping = logs.GetFingerprintsRequest(originator_node_id=A, ranges=[whole] * 1024)
        seen += await sampled(channel, FINGERPRINTS, overlapping)

        follow: grpc.aio.UnaryStreamMultiCallable[logs.SubscribeCheckpointsRequest, bytes] = (
            channel.unary_stream(
                FOLLOW,
                request_serializer=logs.SubscribeCheckpointsRequest.SerializeToString,
                response_deserializer=bytes,
            )
        )
        follows = [
            follow(logs.SubscribeCheckpointsRequest(originator_node_id=A)) for _ in range(150)
        ]
        # A follow the node holds answers nothing within 5 s (no new checkpoint): held.
        ended = await asyncio.gather(
            *(code_of(asyncio.wait_for(f.read(), 5)) for f in follows), return_exceptions=True
        )
        for f in follows:
            f.cancel()
        follow_codes = Counter(c if isinstance(c, str) else "held" for c in ended)
        seen += Counter(c for c in ended if isinstance(c, str))

    silent_s, slow_s = await asyncio.gather(
        open_until_closed(address, args.connections, slow=False),
        open_until_closed(http, args.connections, slow=True),
    )
    await asyncio.sleep(2)
    honest.stop.set()
    await honest_task
    await rss_task

    reports = [r for r in await filed(nodes) if r not in before_attacks]

    lag = max(honest.lags, default=float("inf"))
    print(
        f"node A RSS peak          {peak[0]:>8.0f} MiB   bound {RSS_BOUND_MIB} MiB "
        f"(at start {baseline:.0f} MiB)"
    )
    print(
        f"replication lag max      {lag:>8.2f} s     ceiling {LAG_CEILING_S} s "
        f"({len(honest.lags)} envelopes, {honest.unreplicated} never replicated: ceiling 0)"
    )
    print(
        f"signed holdings answers  {signed_rate:>8.1f} /s    ceiling {HOLDINGS_CEILING:.0f}/s "
        f"({signed:,} of {flood.succeeded + flood.failed:,} in {flood.seconds:.1f} s)"
    )
    print(
        f"silent gRPC connections  {silent_s:>8.1f} s     ceiling {HANDSHAKE_S + 2:.0f} s "
        f"until the last of {args.connections} was closed"
    )
    print(
        f"slowloris HTTP headers   {slow_s:>8.1f} s     ceiling {HANDSHAKE_S + 2:.0f} s "
        f"until the last of {args.connections} was closed"
    )
    held = follow_codes["held"] + follow_codes["OK"]
    print(f"checkpoint follows held  {held:>8}       ceiling 100 ({dict(follow_codes)})")
    bad = {code: n for code, n in seen.items() if code in FORBIDDEN}
    print(f"statuses seen            {dict(seen)}")
    print(f"UNKNOWN or INTERNAL      {sum(bad.values()):>8}       ceiling 0")
    honest_ids = {A, B}
    against = [r for r in reports if r[0] in honest_ids]
    print(f"reports against A or B   {len(against):>8}       ceiling 0 {against or ''}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flood", type=int, default=20_000, help="requests per h2load flood")
    parser.add_argument("--connections", type=int, default=500)
    parser.add_argument("--keep", action="store_true", help="keep the nodes' logs and Postgres")
    args = parser.parse_args()
    require_h2load()
    work = Path(tempfile.mkdtemp(prefix="xnode-hostile-bench-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg")
    nodes = Nodes(work, cluster, {A: SigningKey.generate(), B: SigningKey.generate()})
    http, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    try:
        extra = {"XNODE_HTTP_LISTEN_ADDRESS": http, "XNODE_METRICS_ADDRESS": metrics}
        if args.keep:
            extra["XNODE_LOG_LEVEL"] = "info"
        nodes.start(A, await asyncio.to_thread(fresh_database, cluster, "hostile_a"), extra)
        nodes.start(B, await asyncio.to_thread(fresh_database, cluster, "hostile_b"))
        await attack(nodes, http, metrics, args)
    finally:
        nodes.stop()
        cluster.stop()
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
