"""Anti-entropy repair benchmark, each figure printed beside its bound:

- repair of two logs of `--envelopes` leaves that differ by `--missing` envelopes in
  `--ranges` ranges: verified envelopes/s and round trips (<= 2 x log2(log size));
- reconciling the two (then identical) logs again: round trips (<= 3) and bytes (<= 64 KiB).

    .venv/bin/python bench/bench_repair.py [--envelopes 1000000] [--missing 10000] [--ranges 100]

Measured at the store + use case level between two databases on one Postgres cluster (fsync
on), in one process, no gRPC: node B runs `replication.anti_entropy.Repair` (its LogStore,
ReplicationStore and an OriginatorLog with the verifying processes, `--processes 0`: the
threads) against a peer adapter
over node A's `LogQueries` / `LogStore` and envelope rows. Bytes are the protobuf sizes of
the LogApi / QueryEnvelopes messages the gRPC peer would send and receive. Only the missing
envelopes are real signed envelopes; the other leaves are synthetic (both sides hold them,
reconciliation reads only leaves). Round trips: fingerprint and listing rounds, plus one
for fetching the envelopes (parallel requests) and one for the proofs of the runs (one
GetRunProofs request, sent while the envelopes are fetched). The verified rate is stored
envelopes over the whole repair's wall time (reconcile, fetch, signature and run-inclusion
checks, insert, tree growth; both pools' connections opened before it, as a serving node
holds them: `warm`). Beside it, two ceilings from the same run: the same envelopes
verified alone by the same workers, and the rate the repair's CPU per envelope (this
process, its children, the Postgres cluster; Linux /proc) allows on the idle cores."""

from __future__ import annotations

import argparse
import asyncio
import bisect
import math
import os
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import Checkpoint, sign_checkpoint
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import IndexedEnvelope, build_payer_envelope, originate
from xnode.core.envelopes import validate_payer_envelope as valid_payer
from xnode.core.reconciliation import Fingerprint, SequenceRange, fingerprint_part
from xnode.devtools.postgres import start_cluster
from xnode.replication.anti_entropy import FETCH_SPAN, Repair
from xnode.replication.ingest import IngestContext, OriginatorLog
from xnode.replication.verifiers import Verifiers
from xnode.server.bootstrap import settle_heap
from xnode.store.logs import STORED_MIN_LEVEL, LogStore
from xnode.store.migrate import upgrade_to_head
from xnode.store.replication import ReplicationStore
from xnode.usecases.logs import LogQueries
from xnode_api.logs.v1 import logs_pb2 as pb

NODE = 100
PAYER = SigningKey.generate()


def _ranges(ranges: Sequence[SequenceRange]) -> list[pb.SequenceRange]:
    return [pb.SequenceRange(first=r.first, last=r.last) for r in ranges]


class LocalPeer:
    """Node A as the gRPC peer would present it, counting the bytes it would exchange."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.node_id = NODE
        self.bytes_exchanged = 0
        self.first_fetch: float | None = None
        self._pool = pool
        self._queries = LogQueries(LogStore(pool), 1.0, 30.0)

    async def fingerprints(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[Fingerprint]:
        found = await self._queries.fingerprints(originator, ranges)
        request = pb.GetFingerprintsRequest(originator_node_id=originator, ranges=_ranges(ranges))
        response = pb.GetFingerprintsResponse(
            fingerprints=[pb.Fingerprint(count=f.count, xor=f.xor) for f in found]
        )
        self.bytes_exchanged += request.ByteSize() + response.ByteSize()
        return found

    async def leaves(
        self, originator: int, ranges: Sequence[SequenceRange]
    ) -> list[tuple[int, bytes]]:
        found = await self._queries.leaves(originator, ranges)
        request = pb.GetLeavesRequest(originator_node_id=originator, ranges=_ranges(ranges))
        response = pb.GetLeavesResponse(
            leaves=[pb.Leaf(sequence_id=s, leaf_hash=h) for s, h in found]
        )
        self.bytes_exchanged += request.ByteSize() + response.ByteSize()
        return found

    async def run_proofs(
        self, originator: int, runs: Sequence[SequenceRange], tree_size: int
    ) -> list[tuple[list[bytes], list[bytes]]]:
        size, found = await self._queries.run_proofs(originator, tree_size, runs)
        request = pb.GetRunProofsRequest(
            originator_node_id=originator, tree_size=tree_size, runs=_ranges(runs)
        )
        response = pb.GetRunProofsResponse(
            tree_size=size,
            proofs=[pb.RunProof(first_proof=p.first, last_proof=p.last) for p in found],
        )
        self.bytes_exchanged += request.ByteSize() + response.ByteSize()
        return [(p.first, p.last) for p in found]

    async def envelopes(self, originator: int, run: SequenceRange) -> list[bytes]:
        if self.first_fetch is None:  # reconcile took until here
            self.first_fetch = time.perf_counter()
        rows = await self._pool.fetch(
            "SELECT envelope FROM originator_envelopes WHERE originator_node_id = $1"
            " AND originator_sequence_id BETWEEN $2 AND $3 ORDER BY originator_sequence_id",
            originator,
            run.first,
            run.last,
        )
        found = [bytes(r[0]) for r in rows]
        self.bytes_exchanged += 20 + sum(len(raw) + 3 for raw in found)
        return found


class NoReports:
    async def record(self, unsigned: mb.UnsignedMisbehaviorReport, detail: str) -> None:
        print(f"  unexpected report: {detail}")


def missing_ids(n: int, missing: int, ranges: int) -> list[int]:
    per = missing // ranges
    stride = n // ranges
    return [i * stride + stride // 2 + j for i in range(ranges) for j in range(per)]


def signed_envelopes(ids: list[int], key: SigningKey) -> list[IndexedEnvelope]:
    payer = valid_payer(
        build_payer_envelope(group_message_envelope(bytes(16), b"m"), PAYER, NODE), NODE
    )
    now = time.time_ns()
    return [originate(payer, NODE, s, now + s, key) for s in ids]


def build_log(
    n: int, real: dict[int, IndexedEnvelope]
) -> tuple[list[tuple[int, int, bytes, int]], list[tuple[int, int, int, bytes, int | None]], bytes]:
    frontier = merkle.Frontier()
    leaves, nodes = [], []
    tile_xor = 0  # tiles keep their leaves' fingerprint, as a replica's inserts store them
    for s in range(1, n + 1):
        env = real.get(s)
        leaf = env.leaf if env is not None and env.leaf else merkle.leaf_hash(s.to_bytes(8, "big"))
        part = fingerprint_part(leaf)
        leaves.append((NODE, s, leaf, part))
        tile_xor ^= part
        for lv, i, h in frontier.append(leaf):
            if lv >= STORED_MIN_LEVEL:
                nodes.append((NODE, lv, i, h, tile_xor if lv == STORED_MIN_LEVEL else None))
        if s % (1 << STORED_MIN_LEVEL) == 0:
            tile_xor = 0
    return leaves, nodes, frontier.root()


async def load(
    dsn: str,
    leaves: list[tuple[int, int, bytes, int]],
    nodes: list[tuple[int, int, int, bytes, int | None]],
    size: int,
    checkpoint: Checkpoint,
    envelopes: list[IndexedEnvelope],
) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.copy_records_to_table("log_leaves", records=leaves)
        await conn.copy_records_to_table("log_nodes", records=nodes)
        await conn.execute("INSERT INTO log_trees VALUES ($1, $2)", NODE, size)
        c = checkpoint
        await conn.execute(
            "INSERT INTO log_checkpoints (originator_node_id, tree_size, root, originator_ns,"
            " previous_hash, signed) VALUES ($1, $2, $3, $4, $5, $6)",
            NODE, c.tree_size, c.root, c.originator_ns, c.previous_hash, c.signed,
        )  # fmt: skip
        records = [
            (e.originator_node_id, e.sequence_id, e.originator_ns, e.topic, e.expiry or None,
             e.payer_address, e.raw)
            for e in envelopes
        ]  # fmt: skip
        await conn.copy_records_to_table(
            "originator_envelopes",
            records=records,
            columns=[
                "originator_node_id", "originator_sequence_id", "originator_ns", "topic",
                "expiry_unixtime", "payer_address", "envelope",
            ],
        )  # fmt: skip
        await conn.execute("VACUUM ANALYZE log_leaves, log_nodes, originator_envelopes")
    finally:
        await conn.close()


def _covers_any(level: int, index: int, sorted_leaves: list[int]) -> bool:
    first = index << level
    at = bisect.bisect_left(sorted_leaves, first)
    return at < len(sorted_leaves) and sorted_leaves[at] < first + (1 << level)


def cpu_seconds(postmaster: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by this process ("node"), its descendants
    ("workers": the verifying processes) and the Postgres cluster ("postgres": both nodes'
    databases); Linux /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    me = os.getpid()

    def part(pid: int) -> str | None:
        if pid == me:
            return "node"
        while pid > 1:
            if pid == postmaster:
                return "postgres"
            if pid == me:
                return "workers"
            pid = parents.get(pid, 0)
        return None

    out = dict.fromkeys(("node", "workers", "postgres"), 0.0)
    for pid, t in used.items():
        if (name := part(pid)) is not None:
            out[name] += t
    return out


def row(what: str, result: str, bound: str) -> None:
    print(f"| {what} | {result} | {bound} | {os.getloadavg()[0]:.1f} |")


async def verify_alone(target: OriginatorLog, raws: list[bytes]) -> float:
    """Envelopes/s verifying `raws` alone, in groups as the repair verifies them: the
    ceiling of this machine's workers for the repair's rate, measured in the same run."""
    started = time.perf_counter()
    groups = [raws[i : i + FETCH_SPAN] for i in range(0, len(raws), FETCH_SPAN)]
    parts = [p for g in groups for p in target.start_verify(g, bulk=True)]
    verdicts = [v for p in parts for v in await p]
    assert all(isinstance(v, IndexedEnvelope) for v in verdicts)
    return len(raws) / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--envelopes", type=int, default=1_000_000)
    parser.add_argument("--missing", type=int, default=10_000)
    parser.add_argument("--ranges", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--processes", type=int, default=2, help="bulk verifiers (0: threads)")
    args = parser.parse_args()
    n = args.envelopes
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-repair-"))
    work.chmod(0o755)
    cluster = start_cluster(work / "pg", fsync=True)
    verifiers = Verifiers(args.threads, args.processes)
    await verifiers.start_bulk()
    bulk = verifiers.bulk is not None
    try:
        key = SigningKey.generate()
        ids = missing_ids(n, args.missing, args.ranges)
        started = time.perf_counter()
        real = {e.sequence_id: e for e in signed_envelopes(ids, key)}
        leaves, nodes, root = await asyncio.to_thread(build_log, n, real)
        checkpoint = sign_checkpoint(key, NODE, n, root, time.time_ns(), None)
        gone = set(ids)
        prefix = min(ids) - 1  # B's tree: the contiguous prefix before its first gap
        for name in ("a", "b"):
            cluster.create_database(name)
            await asyncio.to_thread(upgrade_to_head, cluster.dsn(name))
        await load(cluster.dsn("a"), leaves, nodes, n, checkpoint, list(real.values()))
        # B holds every complete subtree of what it holds, past its gaps too, as its inserts
        # keep them (store.logs.complete_subtrees): those covering no missing leaf.
        missing_leaves = sorted(s - 1 for s in gone)
        b_nodes = [x for x in nodes if not _covers_any(x[1], x[2], missing_leaves)]
        b_leaves = [x for x in leaves if x[1] not in gone]
        await load(cluster.dsn("b"), b_leaves, b_nodes, prefix, checkpoint, [])
        # The set-up's millions of rows are no node's: freed, so that no full garbage
        # collection of them (~0.2 s) lands in the timed repair. What is left leaves the
        # collector's view, as a started node's heap does (server.settle_heap).
        del leaves, nodes, b_leaves, b_nodes, missing_leaves
        settle_heap()
        setup_s = time.perf_counter() - started
        print(f"machine: {os.cpu_count()} cores; {n:,} leaves, {len(ids):,} missing on B in "
              f"{args.ranges} ranges (set up in {setup_s:.0f} s)")  # fmt: skip
        # Pools as a node makes them (server.create_pool): no JIT, no reset query on release.
        pools = (
            asyncpg.create_pool(
                cluster.dsn(db),
                min_size=2,
                max_size=8,
                server_settings={"jit": "off"},
                reset=_keep_session,
            )
            for db in "ab"
        )
        async with next(pools) as pool_a, next(pools) as pool_b:
            await warm(pool_a)
            await warm(pool_b)
            store = ReplicationStore(pool_b)
            ctx = IngestContext(
                store,
                NoReports(),
                _nothing,
                "bench",
                lambda: {NODE: key.public_key},
                verifiers,
            )
            target = OriginatorLog(NODE, None, ctx)
            repair = Repair(LogStore(pool_b), store, lambda _: target, _no_fork)
            peer = LocalPeer(pool_a)
            postmaster = int((work / "pg" / "postmaster.pid").read_text().split()[0])
            before = cpu_seconds(postmaster)
            started = time.perf_counter()
            outcome = await repair.repair(peer, NODE)
            took = time.perf_counter() - started
            cpu_parts = {k: v - before[k] for k, v in cpu_seconds(postmaster).items()}
            cpu = sum(cpu_parts.values())
            trips = outcome.round_trips + 2
            assert outcome.stored == len(ids), outcome
            print("| measure | result | bound | load (1 min) |\n|---|---|---|---|")
            row(f"repair {len(ids):,} of {n:,}: verified envelopes/s",
                f"{outcome.stored / took:,.0f} ({took:.2f} s)", ">= 10,000")  # fmt: skip
            alone = await verify_alone(target, [e.raw for e in real.values()])
            workers = f"{args.processes} processes" if bulk else f"{args.threads} threads"
            row(f"ceiling: verifying the same envelopes alone ({workers}), envelopes/s",
                f"{alone:,.0f}", "")  # fmt: skip
            per = cpu / outcome.stored
            row("repair: CPU per envelope (this process, its workers, Postgres: both nodes)",
                f"{per * 1e6:.0f} us ({cpu:.2f} s)", "")  # fmt: skip
            parts = ", ".join(f"{k} {v / outcome.stored * 1e6:.0f}" for k, v in cpu_parts.items())
            row("repair: of which (us per envelope)", parts, "")
            cores = os.cpu_count() or 1
            row(f"ceiling: the rate that CPU allows on {cores} idle cores, envelopes/s",
                f"{cores / per:,.0f}", ">= 10,000")  # fmt: skip
            first = (peer.first_fetch or started) - started
            row("repair: reconcile (until the first envelopes are asked for), of the whole",
                f"{first:.2f} s of {took:.2f} s", "")  # fmt: skip
            share = cpu_parts["workers"] / (took * args.processes) if bulk else 0.0
            row(f"repair: verifying workers busy ({args.processes} processes)",
                f"{share:.0%} of the repair's wall time", "")  # fmt: skip
            row("repair: inserting (overlapped with the checks), summed",
                f"{outcome.store_s:.2f} s", "")  # fmt: skip
            row("repair: round trips", f"{trips} ({outcome.round_trips} reconcile + 2)",
                f"<= {2 * math.log2(n):.1f}")  # fmt: skip
            row("repair: bytes exchanged", f"{peer.bytes_exchanged / 1024:,.0f} KiB", "")
            tree = await LogStore(pool_b).tree_size(NODE)
            row("B's tree after repair", f"{tree:,} leaves", f"= {n:,}")
            again = LocalPeer(pool_a)
            started = time.perf_counter()
            same = await repair.repair(again, NODE)
            took = time.perf_counter() - started
            row("identical logs: round trips", f"{same.round_trips} ({took * 1e3:.0f} ms)", "<= 3")
            row("identical logs: bytes exchanged", f"{again.bytes_exchanged} B", "<= 65,536 B")
    finally:
        await verifiers.close()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


async def warm(pool: asyncpg.Pool) -> None:
    """Opens all of the pool's connections before the timed repair: a node that has been
    serving holds them (asyncpg keeps an idle one for 300 s), and opening 8 a side within
    the repair measured connection set-up (~80 ms before the first envelope fetch at load
    6), not repair."""
    held = [await pool.acquire() for _ in range(pool.get_max_size())]
    for conn in held:
        await pool.release(conn)


async def _keep_session(conn: asyncpg.Connection) -> None:
    """The node's pool reset (xnode.server.bootstrap._keep_session): nothing beyond asyncpg's
    rollback."""


async def _nothing(stored: object) -> None:
    return None


async def _no_fork(originator: int, stored: bytes, other: bytes) -> None:
    print(f"  unexpected fork at originator {originator}")


if __name__ == "__main__":
    asyncio.run(main())
