"""Node memory under hostile reads: tiny requests asking for big answers.

One `xnode run` process (limits off, so only the answers' byte budget bounds them) holds the
largest envelopes it accepts on a few topics. Callers then ask, concurrently and again and
again: GetNewestEnvelope listing those topics `--listed` times over (repeats, when the node
takes them; each topic once when it refuses repeats) and QueryEnvelopes of 1,000 rows. The
node's resident memory is read from /proc (VmRSS before, VmHWM: the peak) and printed beside
its ceiling: the idle figure plus, per concurrent caller, twice (stored bytes, then framed)
the answer budget and one envelope.

Run it against any version of the node (it imports nothing of xnode newer than the size caps):

    .venv/bin/python bench/bench_hostile_reads.py
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

import grpc
from bench_node import NODE, PAYER, start_node_process

from xmtp.xmtpv4.message_api import message_api_pb2 as api
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope
from xnode.devtools.postgres import start_cluster

MIB = 1024 * 1024
ANSWER_BUDGET = 16 * MIB  # the node's default answer_budget_bytes


def proc_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/{pid}/status")


async def publish_largest(client: NodeClient, topics: list[bytes]) -> int:
    """The largest envelope the node stores on each topic (15 MiB, else its 4 MiB cap, less
    a little); its size in bytes."""
    for size in (15 * MIB, 4 * MIB - 1024):
        try:
            for group in topics:
                data = group * (size // len(group))
                envelope = build_payer_envelope(group_message_envelope(group, data), PAYER, NODE)
                await client.publish([envelope], deadline_s=120)
            return size
        except grpc.aio.AioRpcError as exc:
            if exc.code() is not grpc.StatusCode.INVALID_ARGUMENT:
                raise
    raise SystemExit("the node took no large envelope")


async def attack(client: NodeClient, topics: list[bytes], listed: int, rounds: int) -> str:
    """One caller's requests; how the node answered the newest request."""
    raw = [b"\x00" + g for g in topics]
    asked = (raw * (listed // len(raw) + 1))[:listed]
    answered = "repeats answered"
    for _ in range(rounds):
        try:
            await client.replication.GetNewestEnvelope(
                api.GetNewestEnvelopeRequest(topics=asked), timeout=120
            )
        except grpc.aio.AioRpcError as exc:
            answered = f"repeats refused: {exc.code().name}"
            if exc.code() is grpc.StatusCode.INVALID_ARGUMENT:
                asked = raw  # each topic once
        try:
            await client.query(originators=[NODE], limit=1000)
        except grpc.aio.AioRpcError as exc:
            answered += f"; query {exc.code().name}"
    return answered


async def publish_all(address: str, topics: list[bytes]) -> int:
    async with NodeClient(address) as client:
        return await publish_largest(client, topics)


async def attack_all(address: str, topics: list[bytes], args: argparse.Namespace) -> list[str]:
    clients = [NodeClient(address, own_connection=True) for _ in range(args.callers)]
    try:
        return await asyncio.gather(*(attack(c, topics, args.listed, args.rounds) for c in clients))
    finally:
        for c in clients:
            await c.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--topics", type=int, default=8)
    parser.add_argument("--listed", type=int, default=256)
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    cluster = start_cluster(work / "pg", fsync=False)
    proc = None
    try:
        key = SigningKey.generate()
        proc, address = start_node_process(
            cluster, work, key, extra={"XNODE_LIMITS_ENABLED": "false"}
        )
        topics = [bytes([i + 1]) * 16 for i in range(args.topics)]
        size = asyncio.run(publish_all(address, topics))
        idle = proc_mib(proc.pid, "VmRSS")
        outcomes = asyncio.run(attack_all(address, topics, args))
        peak = proc_mib(proc.pid, "VmHWM")
        ceiling = idle + args.callers * 2 * (ANSWER_BUDGET + size) / MIB
        print(f"envelopes stored: {args.topics} of {size / MIB:.1f} MiB; {outcomes[0]}")
        print(f"{args.callers} callers x {args.rounds} rounds, newest listing {args.listed}")
        print(f"node RSS idle      {idle:8.0f} MiB")
        print(f"node RSS peak      {peak:8.0f} MiB   ceiling {ceiling:.0f} MiB")
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
