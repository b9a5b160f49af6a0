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
connections and slowloris HTTP headers; then big answers: the largest envelopes node A
takes on a few topics, and concurrent callers asking for them again and again
(GetNewestEnvelope, QueryEnvelopes of 1,000, GetSignedHoldings of 256, SubscribeEnvelopes
catch-up), an envelope over the cap, a payer envelope replayed as it was and with another
retention, an oversized report. Printed, each beside its ceiling: node A's peak RSS through
all of it (the bound of docs/operations.md "Sizes and budgets": idle, plus per concurrent
big answer twice the answer budget and one envelope), the honest client's replication lag,
signed holdings answers per second, how long silent and slow connections stayed open, the
statuses seen and the reports filed.
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

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.devtools.postgres import free_port, start_cluster
from xnode_api.logs.v1 import logs_pb2 as logs
from xnode_api.withholding.v1 import withholding_pb2 as wh

QUERY = "/xmtp.xmtpv4.message_api.ReplicationApi/QueryEnvelopes"
HOLDINGS = "/xnode.withholding.v1.HoldingsApi/GetSignedHoldings"
FINGERPRINTS = "/xnode.logs.v1.LogApi/GetFingerprints"
FOLLOW = "/xnode.logs.v1.LogApi/SubscribeCheckpoints"
GROUP = b"\x61" * 16
PAYER = SigningKey.generate()
MIB = 1024 * 1024
ANSWER_BUDGET_MIB = 16  # answer_budget_bytes, the default
LARGEST = 4 * MIB - 1024  # a payer envelope just under max_payer_envelope_bytes (4 MiB)
BIG_CALLERS = 4  # concurrent callers asking for big answers
BIG_TOPICS = 4
# The rest of the attacks (floods, follows, connections) hold no envelopes: an allowance.
OTHER_ATTACKS_MIB = 64
LAG_CEILING_S = 5.0  # the honest client's publish-to-replica time
HOLDINGS_CEILING = 50 * 1.25  # limit_query_requests_per_second, plus its burst over the run
HANDSHAKE_S = 10.0  # connection_handshake_seconds (the default)
FORBIDDEN = {"UNKNOWN", "INTERNAL"}


def rss_mib(pid: int, field: str = "VmRSS") -> float:
    """`field` of /proc/<pid>/status in MiB: VmRSS now, VmHWM its peak so far."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
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


def largest_envelope(group: bytes, size: int = LARGEST) -> envelopes_pb2.PayerEnvelope:
    """A payer envelope of about `size` bytes, from a payer of its own (a payer's byte
    limit holds two of them)."""
    data = (group * (size // len(group) + 1))[: size - 512]
    return build_payer_envelope(group_message_envelope(group, data), SigningKey.generate(), A)


async def big_answers(address: str, groups: list[bytes], rounds: int) -> Counter[str]:
    """One caller asking, `rounds` times, for answers as big as the node gives."""
    codes: Counter[str] = Counter()
    topics = [b"\x00" + g for g in groups]
    async with NodeClient(address, own_connection=True) as client:
        stub = client.replication
        holdings = wh.GetSignedHoldingsRequest(originator_node_id=A, first=1, last=256)
        catch_up = api.SubscribeEnvelopesRequest(query=api.EnvelopesQuery(topics=topics))
        for _ in range(rounds):
            newest = api.GetNewestEnvelopeRequest(topics=topics)
            codes[await code_of(stub.GetNewestEnvelope(newest, timeout=60))] += 1
            query = api.QueryEnvelopesRequest(
                query=api.EnvelopesQuery(originator_node_ids=[A]), limit=1000
            )
            codes[await code_of(stub.QueryEnvelopes(query, timeout=60))] += 1
            codes[await code_of(unary(client.channel, HOLDINGS)(holdings, timeout=60))] += 1
            stream = stub.SubscribeEnvelopes(catch_up, timeout=60)
            codes[await code_of(stream.read())] += 1
            stream.cancel()
            await asyncio.sleep(0.1)
    return codes


async def big_answer_attacks(address: str, rounds: int) -> Counter[str]:
    """The largest envelopes on a few topics, then concurrent callers asking for them, an
    envelope over the cap, a replay as it was and with another retention, an oversized
    report: the statuses."""
    codes: Counter[str] = Counter()
    groups = [bytes([0x70 + i]) * 16 for i in range(BIG_TOPICS)]
    async with NodeClient(address) as client:
        for group in groups:
            codes[await code_of(client.publish([largest_envelope(group)], deadline_s=120))] += 1
        over = largest_envelope(groups[0], 5 * MIB)
        codes[await code_of(client.publish([over], deadline_s=120))] += 1
        replayed = largest_envelope(groups[0], 1000)
        for _ in range(2):  # the second is answered from the store
            codes[await code_of(client.publish([replayed]))] += 1
        other = envelopes_pb2.PayerEnvelope()
        other.CopyFrom(replayed)
        other.message_retention_days += 1
        codes[await code_of(client.publish([other]))] += 1
        report = mb.UnsignedMisbehaviorReport(
            reporter_time_ns=1,
            misbehaving_node_id=B,
            type=mb.MISBEHAVIOR_UNRESPONSIVE_NODE,
            liveness=mb.LivenessFailure(
                response_time_ns=1,
                subscribe=api.SubscribeEnvelopesRequest(
                    query=api.EnvelopesQuery(topics=[b"\x01" * (1 * MIB)])
                ),
            ),
        )
        codes[await code_of(client.submit_misbehavior_report(report))] += 1
    callers = [big_answers(address, groups, rounds) for _ in range(BIG_CALLERS)]
    for caller_codes in await asyncio.gather(*callers):
        codes += caller_codes
    return codes


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

    seen += await big_answer_attacks(address, args.big_rounds)
    print(f"big answers: {BIG_CALLERS} callers x {args.big_rounds} rounds")

    silent_s, slow_s = await asyncio.gather(
        open_until_closed(address, args.connections, slow=False),
        open_until_closed(http, args.connections, slow=True),
    )
    await asyncio.sleep(2)
    honest.stop.set()
    await honest_task
    await rss_task
    peak[0] = max(peak[0], rss_mib(pid, "VmHWM"))

    reports = [r for r in await filed(nodes) if r not in before_attacks]

    lag = max(honest.lags, default=float("inf"))
    per_answer = 2 * (ANSWER_BUDGET_MIB + LARGEST / MIB)
    bound = baseline + BIG_CALLERS * per_answer + OTHER_ATTACKS_MIB
    print(
        f"node A RSS peak          {peak[0]:>8.0f} MiB   bound {bound:.0f} MiB (at start "
        f"{baseline:.0f}, + {BIG_CALLERS} big answers x {per_answer:.0f}, + "
        f"{OTHER_ATTACKS_MIB} for the rest)"
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
    parser.add_argument("--big-rounds", type=int, default=20, help="rounds per big-answer caller")
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
