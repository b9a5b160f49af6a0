"""Payload checks: publish throughput with the checks on vs off, in one run.

    .venv/bin/python bench/bench_payloads.py [--seconds 8] [--rounds 3]

The checks are `xnode.core.envelopes._check_payload`: MLS framing of group messages (group id
= topic), welcome addressing, key package parse + lifetime + both Ed25519 signatures, identity
update inbox. "Off" is a second `xnode run` process whose `_check_payload` is replaced, in that
process only, by what the node checked before the payload rules (a payload of the topic's kind): a
bench-only switch, no setting, nothing a production node can turn off.

Two node processes (a database each, one Postgres cluster, fsync on) are measured alternately,
`--rounds` times (off first in odd rounds, on first in even ones), so the shared machine's
drift and neighbours hit both alike. The verdict is on publish throughput (env/s), what the
goal bounds: checks cost at most 15% of it. Beside it, the node process's CPU per envelope
(from /proc), which says where a throughput difference comes from and is less moved by
neighbours, but is not the bound: the node's throughput also depends on Postgres and on how
its threads overlap, which CPU per envelope does not see. The load average is printed
after each round and beside each one-core figure; read env/s from runs at a low load.
Workloads: group messages only (the bulk of traffic), and a mix of 80% group messages, 10%
welcomes, 10% key package uploads (each checked with two Ed25519 signature verifications).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_node import NODE, PAYER, run_callers, start_node_process

from tests.integration.export.helpers import client_envelope
from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import build_payer_envelope, validate_payer_envelope
from xnode.core.topics import TopicKind
from xnode.devtools.postgres import start_cluster

BOUND = 0.15
NO_LIMITS = {"XNODE_LIMITS_ENABLED": "false"}  # both nodes alike: the checks, not the limits

# The "off" node: before xnode.cli runs, the payload checks are cut to the topic-kind match.
OFF_NODE = """
import sys
import xnode.core.envelopes as envelopes
from xnode.core.errors import Reason, Rejected
from xnode.core.topics import KIND_OF_PAYLOAD

def kind_only(client, topic, now_s):
    payload = client.WhichOneof("payload")
    if payload is None:
        raise Rejected(Reason.MISSING_PAYLOAD, "client envelope has no payload")
    if topic.kind is not KIND_OF_PAYLOAD[payload]:
        raise Rejected(Reason.TOPIC_MISMATCH, "topic kind does not match the payload")
    return payload, None

envelopes._check_payload = kind_only
from xnode.cli import main
sys.exit(main(["run"]))
"""


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def client(kind: TopicKind, i: int) -> envelopes_pb2.ClientEnvelope:
    identifier = (i % 50).to_bytes(2, "big") * 16
    if kind is TopicKind.GROUP_MESSAGES:
        identifier = identifier[:16]
    return client_envelope(kind, identifier, os.urandom(160))


def workload(mix: bool, n: int) -> list[envelopes_pb2.PayerEnvelope]:
    """Group messages, or 80/10/10 group messages, welcomes, key packages."""
    kinds = [TopicKind.GROUP_MESSAGES] * 8
    if mix:
        kinds += [TopicKind.WELCOME_MESSAGES, TopicKind.KEY_PACKAGES]
    else:
        kinds += [TopicKind.GROUP_MESSAGES] * 2
    return [build_payer_envelope(client(kinds[i % 10], i), PAYER, NODE) for i in range(n)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Measured:
    rate: float  # envelopes/s
    cpu_us: float  # node CPU per envelope: what the load average does not distort


async def publish_rate(pid: int, address: str, envs: list[envelopes_pb2.PayerEnvelope],
                       batch: int, callers: int, seconds: float) -> Measured:  # fmt: skip
    batches = [envs[i : i + batch] for i in range(0, len(envs), batch)]
    done = 0
    async with NodeClient(address) as node:
        i = 0

        async def one() -> int:
            nonlocal i, done
            i += 1
            chosen = batches[i % len(batches)]
            await node.publish(chosen)
            done += len(chosen)
            return len(chosen)

        cpu = cpu_seconds(pid)
        rate = await run_callers(callers, seconds, one)
        return Measured(rate, (cpu_seconds(pid) - cpu) / max(done, 1) * 1e6)


def _kind_only() -> Callable[..., object]:
    namespace: dict[str, Callable[..., object]] = {}
    exec(OFF_NODE.split("envelopes._check_payload")[0], namespace)  # defines kind_only
    return namespace["kind_only"]


def validation_cost(envs: list[envelopes_pb2.PayerEnvelope]) -> tuple[float, float, float]:
    """Microseconds of one core per envelope: validating it (checks on, the publish path's
    stateless part), and the payload check alone, off and on. Best of 7 passes, off and on
    interleaved so a neighbour's burst hits both alike."""
    import xnode.core.envelopes as envelopes

    valid = [validate_payer_envelope(payer, NODE) for payer in envs]
    checked = [(v.client_envelope, v.topic) for v in valid]
    now = int(time.time())

    def timed(passes: Callable[[], object]) -> float:
        started = time.perf_counter()
        passes()
        return (time.perf_counter() - started) / len(envs) * 1e6

    def checks(check: Callable[..., object]) -> Callable[[], object]:
        return lambda: [check(client, topic, now) for client, topic in checked]

    off, on = checks(_kind_only()), checks(envelopes._check_payload)
    validate = min(
        timed(lambda: [validate_payer_envelope(p, NODE) for p in envs]) for _ in range(7)
    )
    passes = [(timed(off), timed(on)) for _ in range(7)]
    return validate, min(o for o, _ in passes), min(o for _, o in passes)


SHAPES: list[tuple[str, bool, int, int]] = [
    ("group messages, single envelopes, 64 callers", False, 1, 64),
    ("group messages, batches of 100, 8 callers", False, 100, 8),
    ("80/10/10 mix, single envelopes, 64 callers", True, 1, 64),
    ("80/10/10 mix, batches of 100, 8 callers", True, 100, 8),
]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    envs = {mix: workload(mix, 2000) for mix in (False, True)}
    print(f"machine: {os.cpu_count()} cores, shared; load {load()} (1/5/15 min)")
    print(
        "| one core, per envelope (best of 7) | validate, checks on | payload check off | on "
        "| the checks' share of validate | load |\n|---|---|---|---|---|---|"
    )
    for mix, label in ((False, "group messages"), (True, "80/10/10 mix")):
        validate, off, on = validation_cost(envs[mix][:1000])
        print(
            f"| {label} | {validate:.1f} us | {off:.2f} us | {on:.2f} us "
            f"| {(on - off) / validate:.1%} | {load()} |"
        )
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-payloads-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    key = SigningKey.generate()
    procs = {}
    try:
        for mode, command in (("off", [sys.executable, "-c", OFF_NODE]), ("on", None)):
            procs[mode] = await asyncio.to_thread(
                start_node_process, cluster, work, key, f"payloads_{mode}", NO_LIMITS, command
            )
        results: dict[tuple[str, str], list[Measured]] = {}
        loads: list[str] = []
        for round_ in range(args.rounds):
            order = list(procs.items()) if round_ % 2 == 0 else list(procs.items())[::-1]
            for label, mix, batch, callers in SHAPES:
                for mode, (proc, address) in order:
                    measured = await publish_rate(
                        proc.pid, address, envs[mix], batch, callers, args.seconds
                    )
                    results.setdefault((mode, label), []).append(measured)
            loads.append(load())
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(30)
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args.rounds, loads)


def report(results: dict[tuple[str, str], list[Measured]], rounds: int, loads: list[str]) -> None:
    print(f"\npublish, means of {rounds} alternating rounds; load after each: {loads}")
    print(
        "| publish | env/s off | env/s on | throughput cost (verdict) | bound "
        "| node CPU/env off | on | CPU cost |\n|---|---|---|---|---|---|---|---|"
    )
    worst = 0.0
    for label, *_ in SHAPES:
        off, on = results[("off", label)], results[("on", label)]
        rate_off, rate_on = mean(m.rate for m in off), mean(m.rate for m in on)
        cpu_off, cpu_on = mean(m.cpu_us for m in off), mean(m.cpu_us for m in on)
        # The bound is on throughput: the verdict. CPU per envelope is printed to explain it.
        cost = (rate_off - rate_on) / rate_off
        cpu_cost = (cpu_on - cpu_off) / cpu_on
        worst = max(worst, cost)
        print(
            f"| {label} | {rate_off:,.0f} | {rate_on:,.0f} | {cost:+.1%} | <= {BOUND:.0%} "
            f"| {cpu_off:,.0f} us | {cpu_on:,.0f} us | {cpu_cost:+.1%} |"
        )
    print("env/s of each round (off / on), to judge the spread:")
    for label, *_ in SHAPES:
        pairs = zip(results[("off", label)], results[("on", label)], strict=True)
        print(f"  {label}: " + ", ".join(f"{o.rate:,.0f} / {n.rate:,.0f}" for o, n in pairs))
    verdict = "met" if worst <= BOUND else "NOT met"
    print(f"worst throughput cost {worst:+.1%}; bound {BOUND:.0%}: {verdict}; load {load()}")


if __name__ == "__main__":
    asyncio.run(main())
