"""Completeness proofs (docs/proofs.md, "Completeness proofs"): proof sizes at 10,000,000
topics per originator and a client's verification time, each beside its ceiling.

A map of 10,000,000 topics is not built: a proof reads one path, so the path is made as the
map would have it. Above the bucket depth (20) the sibling subtree at depth d holds a
Poisson number of topics of mean topics / 2^d (at 10,000,000, never none: each is an inner
node); the key's bucket holds a Poisson number (mean topics / 2^20) of other topics, drawn
at random within it. `--check-topics` builds a whole map that large in memory and prints its proofs'
sizes beside the model's at the same size, to show the model is the map.

Then the tables' sizes (`--storage-topics`, 0 to skip): that many topics stored, their bytes
per row extrapolated to `--topics`. Then (`--publish-seconds`, 0 to skip) publish
throughput with topic commitments on vs off: a node (one worker, fsync on, checkpoints at
their defaults) takes batches of 100 from 8 callers, every envelope on one of 1,000 groups
at random (each checkpoint's map update touches about as many topics as it can), rounds in
ABBA order on fresh databases.

    .venv/bin/python bench/bench_proofs.py [--topics 10000000] [--check-topics 50000]
        [--storage-topics 200000] [--publish-seconds 8 --rounds 2]"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import asyncpg
from bench_logs import start_node
from bench_node import NODE, PAYER, run_callers

from xmtp.xmtpv4.envelopes import envelopes_pb2
from xnode.client.node import NodeClient, group_message_envelope
from xnode.core import merkle
from xnode.core.completeness import topic_proof, topic_proof_message
from xnode.core.crypto import SigningKey, keccak256
from xnode.core.envelopes import build_payer_envelope
from xnode.core.topic_map import (
    BUCKET_DEPTH,
    MapNode,
    SparseMap,
    TopicEntry,
    bucket_of,
    head_value,
    node_range,
    prefix,
    prove_topic,
    subtree,
    topic_key,
    updated_top,
    verify_topic,
)
from xnode.devtools.postgres import PgCluster, start_cluster
from xnode.store.migrate import upgrade_to_head
from xnode.store.topics import append_envelopes

THROUGHPUT_FLOOR = 0.9  # publish with topic commitments on / off
SIZE_CEILING = 3072  # bytes, one topic present
ABSENT_CEILING = 1536  # bytes, one topic absent
VERIFY_CEILING_US = 1000.0  # per originator per topic
LOG_ENTRIES = 1000  # the topic's own log (one originator's envelopes of one group)
SAMPLES = 200


def poisson(rng: random.Random, mean: float) -> int:
    """Knuth's method: fine for means of about ten."""
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def modelled(key: bytes, value: bytes, topics: int, rng: random.Random) -> SparseMap:
    """A map holding `key` as a map of `topics` topics holds it, along its path only."""
    m = SparseMap()
    for depth in range(1, BUCKET_DEPTH + 1):
        mean = topics / 2**depth  # topics under the sibling subtree
        held = 2 if mean > 50 else poisson(rng, mean)
        if held:
            leaf = (rng.randbytes(32), rng.randbytes(32)) if held == 1 else None
            m.top[(depth, prefix(key, depth) ^ 1)] = MapNode(rng.randbytes(32), min(held, 2), leaf)
    low, _ = node_range(BUCKET_DEPTH, bucket_of(key))
    others = {
        (int.from_bytes(low, "big") | rng.getrandbits(256 - BUCKET_DEPTH)).to_bytes(32, "big"): (
            rng.randbytes(32)
        )
        for _ in range(poisson(rng, topics / 2**BUCKET_DEPTH))
    }
    m.set({**others, key: value})
    return m


def topic_log(n: int) -> list[TopicEntry]:
    return [TopicEntry(i * 7, 1_900_000_000, keccak256(b"%d" % i)) for i in range(1, n + 1)]


def sizes(m: SparseMap, topic: bytes, log: list[TopicEntry], after: int) -> int:
    proof = prove_topic(topic, after, m.prove(topic_key(topic)), log, 1000)
    return len(topic_proof_message(proof).SerializeToString())


def sample(topics: int, rng: random.Random, after: int) -> tuple[list[int], list[int]]:
    """Proof sizes of SAMPLES present topics (with their logs) and of SAMPLES absent ones."""
    log = topic_log(LOG_ENTRIES)
    value = head_value(len(log), merkle.root_of([e.hash for e in log]))
    present, absent = [], []
    for i in range(SAMPLES):
        topic = b"\x01group-%d" % rng.getrandbits(64)
        present.append(sizes(modelled(topic_key(topic), value, topics, rng), topic, log, after))
        missing = b"\x01absent-%d" % i
        absent_key = topic_key(missing)
        m = modelled(absent_key, value, topics, rng)
        del m.buckets[bucket_of(absent_key)][absent_key]
        absent.append(sizes(_without(m, absent_key), missing, [], 0))
    return present, absent


def _without(m: SparseMap, key: bytes) -> SparseMap:
    """`m` with its bucket of `key` re-hashed after `key` left it (a path as an absent
    topic's is)."""
    bucket = bucket_of(key)
    m.top.update(updated_top({bucket: subtree(m.bucket_leaves(bucket), BUCKET_DEPTH)}, m.node))
    return m


def whole_map(topics: int, rng: random.Random, after: int) -> tuple[list[int], list[int]]:
    log = topic_log(LOG_ENTRIES)
    value = head_value(len(log), merkle.root_of([e.hash for e in log]))
    names = [b"\x01group-%d" % rng.getrandbits(64) for _ in range(topics)]
    m = SparseMap()
    m.set({topic_key(t): value for t in names})
    present = [sizes(m, t, log, after) for t in rng.sample(names, SAMPLES)]
    absent = [sizes(m, b"\x01absent-%d" % i, [], 0) for i in range(SAMPLES)]
    return present, absent


def verify_us(topics: int, rng: random.Random, seconds: float) -> float:
    """One originator, one topic: the map proof, the run, one new entry (a client's poll)."""
    log = topic_log(LOG_ENTRIES)
    value = head_value(len(log), merkle.root_of([e.hash for e in log]))
    topic = b"\x01group-verify"
    m = modelled(topic_key(topic), value, topics, rng)
    after = log[-2].sequence_id
    wire = topic_proof_message(prove_topic(topic, after, m.prove(topic_key(topic)), log, 1000))
    root, calls, started = m.root(), 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        complete = verify_topic(root, 10**9, after, topic_proof(wire))
        calls += 1
    assert [e.sequence_id for e in complete.entries] == [log[-1].sequence_id]
    return (time.perf_counter() - started) / calls * 1e6


def publish_batches(count: int, node: int) -> list[list[envelopes_pb2.PayerEnvelope]]:
    """`count` batches of 100 envelopes, each on one of 1,000 groups, every payload its own
    (a node refuses a payer envelope it already holds)."""
    rng = random.Random(count)
    envelopes = [
        build_payer_envelope(
            group_message_envelope(rng.randrange(1000).to_bytes(16, "big"), os.urandom(160)),
            PAYER,
            node,
        )
        for _ in range(count * 100)
    ]
    return [envelopes[i : i + 100] for i in range(0, len(envelopes), 100)]


async def publish_round(
    cluster: PgCluster,
    work: Path,
    name: str,
    topics: bool,
    seconds: float,
    batches: list[list[envelopes_pb2.PayerEnvelope]],
) -> tuple[float, int]:
    """Envelopes per second, and the checkpoints issued with a topic commitment."""
    env = {"XNODE_LOG_TOPIC_COMMITMENTS": str(topics).lower()}
    proc, address = await asyncio.to_thread(
        start_node, cluster, work, SigningKey.generate(), name, True, env
    )
    feed = iter(batches)
    try:
        async with NodeClient(address) as client:

            async def batch() -> int:
                await client.publish(next(feed))
                return 100

            rate = await run_callers(8, seconds, batch)
    finally:
        proc.terminate()
        proc.wait(30)
    conn = await asyncpg.connect(cluster.dsn(name))
    try:
        committed = await conn.fetchval("SELECT count(*) FROM topic_maps")
    finally:
        await conn.close()
    return rate, committed


async def publish_on_off(seconds: float, rounds: int) -> tuple[float, float]:
    """Median envelopes per second with topic commitments off and on."""
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-proofs-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    rates: dict[bool, list[float]] = {False: [], True: []}
    # Enough for 10,000 env/s; the same for every round (each a fresh node and database).
    batches = publish_batches(int(seconds * 100) + 50, NODE)
    try:
        for r in range(rounds):
            for topics in (False, True) if r % 2 == 0 else (True, False):  # ABBA
                rate, maps = await publish_round(
                    cluster, work, f"{'on' if topics else 'off'}{r}", topics, seconds, batches
                )
                rates[topics].append(rate)
                print(
                    f"  round {r} topic commitments {'on' if topics else 'off'}: "
                    f"{rate:,.0f} env/s, topic maps {maps}; load {os.getloadavg()[0]:.2f}"
                )
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return statistics.median(rates[False]), statistics.median(rates[True])


def synthetic_envelope(sequence_id: int) -> bytes:
    """An originator envelope as the topic map reads it (unsigned: no signature is checked
    there), its content its own."""
    unsigned = envelopes_pb2.UnsignedOriginatorEnvelope(
        originator_node_id=NODE,
        originator_sequence_id=sequence_id,
        expiry_unixtime=1_900_000_000,
        payer_envelope_bytes=os.urandom(32),
    )
    return envelopes_pb2.OriginatorEnvelope(
        unsigned_originator_envelope=unsigned.SerializeToString()
    ).SerializeToString()


async def storage(topics: int) -> tuple[dict[str, tuple[int, int]], list[float]]:
    """The topic map's tables after `topics` topics of one envelope each, appended in
    checkpoints of 10,000: (rows, bytes with indexes) per table; and each checkpoint's
    seconds (10,000 envelopes on 10,000 new topics: every bucket path re-hashed)."""
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-proofs-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=False)
    try:
        cluster.create_database("storage")
        await asyncio.to_thread(upgrade_to_head, cluster.dsn("storage"))
        conn = await asyncpg.connect(cluster.dsn("storage"))
        try:
            took = []
            for first in range(1, topics + 1, 10_000):
                rows = [
                    (s, b"\x01" + s.to_bytes(16, "big"), synthetic_envelope(s))
                    for s in range(first, min(first + 10_000, topics + 1))
                ]
                started = time.perf_counter()
                async with conn.transaction():
                    await append_envelopes(conn, NODE, rows)
                took.append(time.perf_counter() - started)
            await conn.execute("VACUUM ANALYZE")
            found = {}
            for table in ("topic_heads", "topic_map_nodes", "topic_entries"):
                count = await conn.fetchval(f"SELECT count(*) FROM {table}")
                size = await conn.fetchval("SELECT pg_total_relation_size($1)", table)
                found[table] = (int(count), int(size))
            return found, took
        finally:
            await conn.close()
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def line(what: str, value: float, unit: str, ceiling: float) -> None:
    verdict = "ok" if value <= ceiling else "OVER"
    print(f"{what:<58} {value:>9.1f} {unit:<3} ceiling {ceiling:>7.0f} {unit}  {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--topics", type=int, default=10_000_000)
    parser.add_argument("--check-topics", type=int, default=50_000, help="0: no check")
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    parser.add_argument("--publish-seconds", type=float, default=8.0, help="0: no publish")
    parser.add_argument("--rounds", type=int, default=2, help="publish rounds, each off and on")
    parser.add_argument(
        "--storage-topics", type=int, default=200_000, help="topics stored to size tables; 0: no"
    )
    args = parser.parse_args()
    rng = random.Random(49)
    log = topic_log(LOG_ENTRIES)
    after = log[-1].sequence_id  # nothing new: the usual poll
    print(f"load average {os.getloadavg()[0]:.2f}; topic log of {LOG_ENTRIES} entries")
    if args.check_topics:
        real = whole_map(args.check_topics, rng, after)
        model = sample(args.check_topics, rng, after)
        print(
            f"at {args.check_topics:,} topics, whole map vs model, mean bytes: present "
            f"{statistics.mean(real[0]):.0f} vs {statistics.mean(model[0]):.0f}, absent "
            f"{statistics.mean(real[1]):.0f} vs {statistics.mean(model[1]):.0f}"
        )
    present, absent = sample(args.topics, rng, after)
    t = f"{args.topics:,} topics"
    line(f"proof, present topic, nothing new, {t}, max", max(present), "B", SIZE_CEILING)
    line(
        f"proof, present topic, nothing new, {t}, mean", statistics.mean(present), "B", SIZE_CEILING
    )
    new = sample(args.topics, random.Random(50), log[-11].sequence_id)[0]
    line(f"proof, present topic, 10 new entries, {t}, max", max(new), "B", SIZE_CEILING)
    line(f"proof, absent topic, {t}, max", max(absent), "B", ABSENT_CEILING)
    if args.storage_topics:
        tables, took = asyncio.run(storage(args.storage_topics))
        print(
            f"a checkpoint of 10,000 envelopes on 10,000 new topics: median"
            f" {statistics.median(took):.2f} s, last {took[-1]:.2f} s (map and topic logs)"
        )
        inner_rows = min(args.topics, 2 ** (BUCKET_DEPTH + 1))  # inner nodes down to depth 20
        heads, nodes, entries = (
            tables["topic_heads"],
            tables["topic_map_nodes"],
            tables["topic_entries"],
        )
        per_head, per_node = heads[1] / heads[0], nodes[1] / max(nodes[0], 1)
        print(
            f"stored at {args.storage_topics:,} topics: topic_heads {per_head:.0f} B/topic,"
            f" topic_map_nodes {nodes[0]:,} rows {per_node:.0f} B/row, topic_entries"
            f" {entries[1] / entries[0]:.0f} B/envelope (tables with their indexes)"
        )
        print(
            f"so at {args.topics:,} topics: topic_heads {per_head * args.topics / 1e9:.2f} GB,"
            f" topic_map_nodes at most {per_node * inner_rows / 1e9:.2f} GB"
            " (Postgres; nothing held in memory between checkpoints)"
        )
    verify_took = verify_us(args.topics, rng, args.seconds)
    line(
        f"client verification, one topic, one originator, {t}", verify_took, "us", VERIFY_CEILING_US
    )
    if args.publish_seconds:
        off, on = asyncio.run(publish_on_off(args.publish_seconds, args.rounds))
        ratio = on / off
        verdict = "ok" if ratio >= THROUGHPUT_FLOOR else "UNDER"
        print(
            f"publish, batches of 100, 1,000 groups: off {off:,.0f} env/s, on {on:,.0f} env/s;"
            f" on / off {ratio:.3f}, floor {THROUGHPUT_FLOOR}  {verdict}"
        )


if __name__ == "__main__":
    main()
