"""A losing fork version spreads by repair (issue 9 parts 4 and 8), on real nodes: nodes
100 and 200 saw originator 400 sign two versions of sequence id 2 while node 300 was down;
originator 400 is down too when 300 comes back, so 300 fills its log by anti-entropy only
(streams relay the log's version, never the other). Node 300 ends with the same conflicts
rows as 100 and 200 and files the DUPLICATE_SEQUENCE_ID report, which proves itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest

from tests.conftest import Network, NodeSpec
from tests.integration.export.helpers import Item, group, received_row, store_received
from tests.integration.replication.test_forks import duplicate_reports
from tests.integration.replication.test_replication import stored
from tests.support.waiting import eventually
from xnode.core.crypto import SigningKey
from xnode.core.evidence import why_unproven
from xnode.core.forks import log_keeps
from xnode.core.topics import TopicKind
from xnode.store.replication import ReplicationStore
from xnode_api.forks.v1 import forks_pb2 as pb
from xnode_api.forks.v1 import forks_pb2_grpc

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))
FAST: dict[str, Any] = {"replication_repair_seconds": 0.3}
FORKS = "SELECT * FROM sequence_forks ORDER BY originator_sequence_id, envelope_hash"


@pytest.fixture
def node_spec(tmp_path: Path) -> NodeSpec:
    """Four nodes: 400 is the forking originator."""
    spec = NodeSpec(tmp_path, {100 * (i + 1): SigningKey.generate() for i in range(4)})
    spec.write()
    return spec


async def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [tuple(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def _digest(node: Any) -> pb.GetForkDigestResponse:
    async with grpc.aio.insecure_channel(node.address) as channel:
        stub = forks_pb2_grpc.ForkApiStub(channel)
        got: pb.GetForkDigestResponse = await stub.GetForkDigest(
            pb.GetForkDigestRequest(originator_node_id=400)
        )
        return got


async def test_a_node_that_missed_a_fork_takes_it_by_repair(
    start_node: Any, network: Network
) -> None:
    key = network.spec.keys[400]
    now = time.time_ns()  # not expired: peers serve only live envelopes
    log = [received_row(400, key, s, now + s, GROUP) for s in range(1, 6)]
    other = received_row(400, key, 2, now + 2, Item(GROUP.kind, group(2)))
    winner = log_keeps(log[1].raw, other.raw)
    for node_id in (100, 200):  # both saw the fork while 300 was down
        await store_received(network.dsns[node_id], log)
        pool = await asyncpg.create_pool(network.dsns[node_id], min_size=1, max_size=2)
        try:
            [resolution] = await ReplicationStore(pool).resolve_forks([other])
        finally:
            await pool.close()
        assert resolution is not None and resolution.new_evidence
    expected = await _rows(network.dsns[100], FORKS)
    assert len(expected) == 2
    assert expected == await _rows(network.dsns[200], FORKS)
    a = await start_node(**network.settings(100, **FAST))
    await start_node(**network.settings(200, **FAST))
    c = await start_node(**network.settings(300, **FAST))

    async def conflicts_held() -> bool:
        return await _rows(network.dsns[300], FORKS) == expected and bool(
            await duplicate_reports(c)
        )

    await eventually(conflicts_held, within_s=60)
    in_log = await stored(c.address, 400)
    assert in_log == [winner if e == log[1].raw else e for e in (r.raw for r in log)]
    [report] = await duplicate_reports(c)
    assert report.misbehaving_node_id == 400
    assert {e.SerializeToString() for e in report.safety.envelopes} == {log[1].raw, other.raw}
    assert why_unproven(report, {400: [key.public_key]}) is None
    # What anti-entropy compares before paging: equal now, so later passes page nothing.
    digest = await _digest(a)
    assert digest.versions == 2 and len(digest.digest) == 32
    assert await _digest(c) == digest
