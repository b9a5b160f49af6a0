"""Chain benchmarks: indexer throughput and publish-to-indexed latency, on anvil + Postgres.

    .venv/bin/python bench/bench_chain.py [--events 10000] [--payload-bytes 1024] [--publishes 30]

1. Backfill: 10,000 events (80% GroupMessages commits, 20% IdentityUpdates; each a serialized
   ClientEnvelope with a `--payload-bytes` MLS body) are mined into a few blocks before a node
   starts; the node is timed from its start until it has stored them all (payloads/s).
2. Latency: anvil mines a block every second (`--block-time 1`); commits are published
   through the node's gRPC API one at a time (each at a random point within a block), then
   `--concurrent` at once, and each call is timed until the node answers with the indexed
   envelope.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
from eth_account import Account
from eth_account.signers.local import LocalAccount
from web3 import Web3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.chain.helpers import (
    commit_envelope,
    create_inbox,
    identity_update_envelope,
    publish,
)
from xnode.chain import abi
from xnode.chain.admin import add_node
from xnode.chain.anvil import AnvilProcess, rpc_call, start_anvil
from xnode.chain.contracts import deploy_all
from xnode.chain.deployment import write_contracts_file
from xnode.client.node import NodeClient
from xnode.config import Settings
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.devtools.postgres import PgCluster, start_cluster
from xnode.observability.logging import configure_logging
from xnode.server.wiring import Node, start_node
from xnode.store.migrate import upgrade_to_head

BATCH = 500  # raw transactions per JSON-RPC batch


def _chain(work: Path, block_time: float | None, key: SigningKey) -> tuple[AnvilProcess, Path]:
    anvil = start_anvil(block_time, extra_args=("--gas-limit", "300000000"))
    w3 = Web3(Web3.HTTPProvider(anvil.url, request_kwargs={"timeout": 60}))
    owner: LocalAccount = Account.from_key(anvil.private_keys[0])
    contracts_file = work / f"contracts-{anvil.port}.json"
    write_contracts_file(contracts_file, deploy_all(w3, owner))
    add_node(w3, owner, contracts_file, key.public_key, "http://127.0.0.1:1")
    rpc_call(anvil.url, "anvil_setBalance", ["0x" + key.address.hex(), hex(10**24)])
    return anvil, contracts_file


async def _database(cluster: PgCluster, name: str) -> str:
    cluster.create_database(name)
    await asyncio.to_thread(upgrade_to_head, cluster.dsn(name))
    return cluster.dsn(name)


def _settings(dsn: str, key: SigningKey, anvil: AnvilProcess, contracts: Path) -> Settings:
    return Settings(
        listen_address="127.0.0.1:0",
        database_dsn=dsn,
        signer_key=key.hex(),
        metrics_address="",
        chain_rpc_url=anvil.url,
        contracts_file=contracts,
        log_level="warning",
    )


def _event_calls(count: int, payload_bytes: int) -> list[tuple[str, bytes]]:
    """(contract name, call data): 80% commits on 100 groups, 20% identity updates."""
    calls = []
    body = bytes(payload_bytes)
    for i in range(count):
        if i % 5 == 4:
            inbox = i.to_bytes(32, "big")
            update = identity_update_envelope(inbox, [create_inbox("0x" + f"{i:040x}")])
            calls.append(
                (
                    "identity_updates",
                    abi.add_identity_update_data(inbox, update.SerializeToString()),
                )
            )
        else:
            group = (i % 100).to_bytes(16, "big")
            client = commit_envelope(group, epoch=i, body=body).SerializeToString()
            calls.append(("group_messages", abi.add_message_data(group, client)))
    return calls


def _mine_events(anvil: AnvilProcess, contracts: Path, count: int, payload_bytes: int) -> float:
    """Sends `count` pre-signed transactions with automine off, then mines them."""
    import json

    addresses = json.loads(contracts.read_text())
    account: LocalAccount = Account.from_key(anvil.private_keys[1])
    nonce = int(
        str(rpc_call(anvil.url, "eth_getTransactionCount", [account.address, "pending"])), 16
    )
    started = time.perf_counter()
    rpc_call(anvil.url, "evm_setAutomine", [False])
    raws = []
    for i, (name, data) in enumerate(_event_calls(count, payload_bytes)):
        tx = {
            "type": 2,
            "chainId": anvil.chain_id,
            "nonce": nonce + i,
            "to": addresses[name],
            "data": data,
            "gas": 2_000_000,
            "value": 0,
            "maxFeePerGas": 10**11,
            "maxPriorityFeePerGas": 10**9,
        }
        raws.append("0x" + bytes(account.sign_transaction(tx).raw_transaction).hex())
    for start in range(0, len(raws), BATCH):
        _batch(anvil.url, [("eth_sendRawTransaction", [r]) for r in raws[start : start + BATCH]])
    while (
        int(str(rpc_call(anvil.url, "eth_getTransactionCount", [account.address, "latest"])), 16)
        < nonce + count
    ):
        rpc_call(anvil.url, "evm_mine", [])
    rpc_call(anvil.url, "evm_setAutomine", [True])
    return time.perf_counter() - started


def _batch(url: str, calls: list[tuple[str, list[Any]]]) -> None:
    import json
    import urllib.request

    body = json.dumps(
        [{"jsonrpc": "2.0", "id": i, "method": m, "params": p} for i, (m, p) in enumerate(calls)]
    )
    request = urllib.request.Request(url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        replies = json.loads(response.read())
    errors = [r["error"] for r in replies if "error" in r]
    if errors:
        raise RuntimeError(f"{len(errors)} transactions refused, e.g. {errors[0]}")


async def _stored(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        total = await conn.fetchval(
            "SELECT COALESCE(sum(sequence_id), 0) FROM vector_clock"
            " WHERE originator_node_id IN (0, 1)"
        )
        return int(total)
    finally:
        await conn.close()


async def _until_stored(dsn: str, events: int) -> None:
    for _ in range(100_000):
        if await _stored(dsn) >= events:
            return
        await asyncio.sleep(0.02)
    raise TimeoutError("the indexer did not store every event")


async def _index_once(
    cluster: PgCluster,
    name: str,
    key: SigningKey,
    anvil: AnvilProcess,
    contracts: Path,
    events: int,
) -> tuple[float, float]:
    """A node on a fresh database: (start-up s, s from start until every payload is stored)."""
    dsn = await _database(cluster, name)
    started = time.perf_counter()
    node = await start_node(_settings(dsn, key, anvil, contracts))
    up = time.perf_counter() - started
    await _until_stored(dsn, events)
    took = time.perf_counter() - started
    await node.stop()
    return up, took


async def bench_backfill(
    cluster: PgCluster, work: Path, events: int, payload_bytes: int, runs: int
) -> None:
    key = SigningKey.generate()
    anvil, contracts = _chain(work, None, key)
    try:
        mined_s = _mine_events(anvil, contracts, events, payload_bytes)
        head = int(str(rpc_call(anvil.url, "eth_blockNumber")), 16)
        print(f"backfill: {events} events mined into {head} blocks in {mined_s:.1f} s (setup)")
        results = [
            await _index_once(cluster, f"backfill_{i}", key, anvil, contracts, events)
            for i in range(runs)
        ]
    finally:
        anvil.stop()
    for up, took in results:
        print(
            f"backfill run: node start {up:.2f} s, all {events} stored {took:.2f} s after start"
            f" = {events / took:,.0f} payloads/s"
        )
    best = statistics.median(took for _, took in results)
    print(f"backfill: indexer throughput (median of {runs}) {events / best:,.0f} payloads/s")


async def _timed_publish(client: NodeClient, group: bytes, epoch: int, depends: int) -> float:
    started = time.perf_counter()
    await publish(client, 100, [commit_envelope(group, epoch, Cursor({0: depends}))])
    return time.perf_counter() - started


def _summary(name: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    print(
        f"latency ({name}, n={len(samples)}): mean {statistics.mean(samples):.3f} s, "
        f"p50 {statistics.median(samples):.3f} s, p90 {p90:.3f} s, max {ordered[-1]:.3f} s"
    )


async def bench_latency(cluster: PgCluster, work: Path, publishes: int, concurrent: int) -> None:
    key = SigningKey.generate()
    anvil, contracts = _chain(work, 1.0, key)
    node: Node | None = None
    try:
        dsn = await _database(cluster, "bench_latency")
        node = await start_node(_settings(dsn, key, anvil, contracts))
        async with NodeClient(node.address) as client:
            group = bytes(16)
            sequential = []
            jitter = random.Random(7)
            for i in range(publishes):
                await asyncio.sleep(jitter.uniform(0, 1))  # a random point within a block
                sequential.append(await _timed_publish(client, group, i + 1, i))
            await asyncio.sleep(0.37)  # start the burst at an arbitrary point of a block
            burst = await asyncio.gather(
                *(
                    _timed_publish(client, (i + 1).to_bytes(16, "big"), 1, 0)
                    for i in range(concurrent)
                )
            )
    finally:
        if node is not None:
            await node.stop()
        anvil.stop()
    _summary("one at a time at random points, 1 s blocks", sequential)
    _summary(f"{concurrent} concurrent, 1 s blocks", list(burst))


def _workdir() -> Path:
    work = Path(tempfile.mkdtemp(prefix="xnode-bench-chain-"))
    work.chmod(0o755)  # the `postgres` user must reach the data directory inside
    return work


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--payload-bytes", type=int, default=1024)
    parser.add_argument("--publishes", type=int, default=30)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="backfills of the same chain")
    args = parser.parse_args()
    configure_logging("warning")
    work = _workdir()
    cluster = start_cluster(work / "pg", fsync=False)
    try:
        await bench_backfill(cluster, work, args.events, args.payload_bytes, args.runs)
        await bench_latency(cluster, work, args.publishes, args.concurrent)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
