"""Committed logs on a real Postgres: checkpoints over the published envelopes, inclusion and
consistency proofs that verify, fingerprints and leaves, replication of checkpoints, leaves
that outlive pruning."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from tests.conftest import Network, NodeSpec, node_settings
from tests.integration.export.helpers import Item, group, publish, write_plan
from tests.integration.logs.helpers import (
    FAST_CHECKPOINTS,
    checkpoint_at,
    checkpoints,
    leaves_of,
    log_api,
)
from tests.support.waiting import eventually
from xnode.api.logs import SERVICE_NAME
from xnode.client.grpc_services import health_check, reflection_info
from xnode.commands.prune import apply_plan
from xnode.config import Settings
from xnode.core import merkle
from xnode.core.checkpoints import check_chain, check_consistent, check_inclusion
from xnode.core.reconciliation import Fingerprint, SequenceRange
from xnode.core.topics import TopicKind
from xnode.replication.repair_peer import GrpcRepairPeer
from xnode_api.logs.v1 import logs_pb2 as pb
from xnode_api.logs.v1 import logs_pb2_grpc

GROUP = Item(TopicKind.GROUP_MESSAGES, group(1))
LATER = 2**40  # past every retention


async def test_checkpoints_commit_the_published_log_and_proofs_verify(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    key = node_spec.keys[100].public_key
    node = await start_node(**node_settings(database, node_spec, **FAST_CHECKPOINTS))
    first = await publish(node.address, 100, [GROUP] * 37)
    async with log_api(node.address) as api:
        small = await checkpoint_at(api, 100, key, 37)
        assert small.root == merkle.root_of(leaves_of(first))
        second = await publish(node.address, 100, [GROUP] * 26)
        large = await checkpoint_at(api, 100, key, 63)
        leaves = leaves_of(first + second)
        assert large.root == merkle.root_of(leaves)
        check_chain(await checkpoints(api, 100, key))  # a history anyone can replay

        for sequence_id in range(1, 64):
            answer = await api.GetInclusionProof(
                pb.GetInclusionProofRequest(
                    originator_node_id=100, sequence_id=sequence_id, tree_size=63
                )
            )
            assert answer.leaf_hash == leaves[sequence_id - 1]
            assert answer.checkpoint.SerializeToString() == large.signed
            check_inclusion(large, sequence_id, answer.leaf_hash, list(answer.proof))
        latest = await api.GetInclusionProof(
            pb.GetInclusionProofRequest(originator_node_id=100, sequence_id=5)
        )
        assert latest.tree_size == 63
        assert latest.checkpoint.SerializeToString() == large.signed
        check_inclusion(large, 5, latest.leaf_hash, list(latest.proof))

        proof = await api.GetConsistencyProof(
            pb.GetConsistencyProofRequest(originator_node_id=100, first_size=37, second_size=63)
        )
        check_consistent(small, large, list(proof.proof))


async def test_a_node_not_committing_its_log_publishes_the_same_and_keeps_no_log(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    settings = node_settings(database, node_spec, log_commit_enabled=False, **FAST_CHECKPOINTS)
    node = await start_node(**settings)
    published = await publish(node.address, 100, [GROUP] * 37)
    conn = await asyncpg.connect(database)
    try:
        rows = await conn.fetch(
            "SELECT envelope FROM originator_envelopes WHERE originator_node_id = 100"
            " ORDER BY originator_sequence_id"
        )
        assert [bytes(r[0]) for r in rows] == published
        for table in ("log_leaves", "log_nodes", "log_trees"):
            assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    finally:
        await conn.close()
    async with log_api(node.address) as api:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await api.GetInclusionProof(
                pb.GetInclusionProofRequest(originator_node_id=100, sequence_id=5)
            )
        assert refused.value.code() == grpc.StatusCode.NOT_FOUND


class OldLogApi(logs_pb2_grpc.LogApiServicer):
    """A peer from before GetRunProofs (UNIMPLEMENTED): inclusion proofs from a real node."""

    def __init__(self, node: logs_pb2_grpc.LogApiStub) -> None:
        self.node = node
        self.asked: list[int] = []

    async def GetInclusionProof(
        self, request: pb.GetInclusionProofRequest, context: Any
    ) -> pb.GetInclusionProofResponse:
        self.asked.append(request.sequence_id)
        answer: pb.GetInclusionProofResponse = await self.node.GetInclusionProof(request)
        return answer


async def test_run_proofs_prove_whole_runs_and_old_peers_are_asked_per_end(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    key = node_spec.keys[100].public_key
    node = await start_node(**node_settings(database, node_spec, **FAST_CHECKPOINTS))
    leaves = leaves_of(await publish(node.address, 100, [GROUP] * 50))
    runs = [SequenceRange(1, 50), SequenceRange(5, 9), SequenceRange(20, 20), SequenceRange(33, 49)]
    async with log_api(node.address) as api:
        checkpoint = await checkpoint_at(api, 100, key, 50)
        answer = await api.GetRunProofs(
            pb.GetRunProofsRequest(
                originator_node_id=100,
                runs=[pb.SequenceRange(first=r.first, last=r.last) for r in runs],
            )
        )
        assert answer.tree_size == 50  # 0 asked: the newest checkpoint's
        proofs = [(list(p.first_proof), list(p.last_proof)) for p in answer.proofs]
        for r, (first, last) in zip(runs, proofs, strict=True):
            run = leaves[r.first - 1 : r.last]
            assert merkle.run_root(r.first - 1, run, 50, first, last) == checkpoint.root
        forged = [*leaves[32:40], bytes(32), *leaves[41:49]]
        assert merkle.run_root(32, forged, 50, *proofs[3]) != checkpoint.root
        with pytest.raises(grpc.aio.AioRpcError) as beyond:
            await api.GetRunProofs(
                pb.GetRunProofsRequest(
                    originator_node_id=100, tree_size=50, runs=[pb.SequenceRange(first=45, last=51)]
                )
            )
        assert beyond.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "45..51" in (beyond.value.details() or "")

        old = OldLogApi(api)
        server = grpc.aio.server()
        logs_pb2_grpc.add_LogApiServicer_to_server(old, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                peer = GrpcRepairPeer(300, channel)
                assert await peer.run_proofs(100, runs, 50) == proofs
                assert await peer.run_proofs(100, runs[1:2], 50) == proofs[1:2]
        finally:
            await server.stop(None)
    # GetRunProofs once (UNIMPLEMENTED), then each run's two ends, never GetRunProofs again
    assert sorted(old.asked) == sorted([s for r in runs + runs[1:2] for s in (r.first, r.last)])


async def test_log_api_is_in_health_and_reflection(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    node = await start_node(**node_settings(database, node_spec))
    async with grpc.aio.insecure_channel(node.address) as channel:
        health = health_check(channel)
        answer = await health(health_pb2.HealthCheckRequest(service=SERVICE_NAME))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_info(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for response in reflection(iter([request])):
            names = [s.name for s in response.list_services_response.service]
            assert SERVICE_NAME in names
            break


async def test_fingerprints_and_leaves_match_the_log(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    node = await start_node(**node_settings(database, node_spec, **FAST_CHECKPOINTS))
    leaves = leaves_of(await publish(node.address, 100, [GROUP] * 40))
    # Two requests: the ranges of one request may not overlap (each reads its tiles once).
    asked = [[(1, 40), (41, 50)], [(3, 17), (18, 18), (35, 90)]]
    ranges = [r for one in asked for r in one]
    request = [pb.SequenceRange(first=f, last=last) for f, last in ranges]
    async with log_api(node.address) as api:
        prints = [
            f
            for one in asked
            for f in (
                await api.GetFingerprints(
                    pb.GetFingerprintsRequest(
                        originator_node_id=100,
                        ranges=[pb.SequenceRange(first=f, last=last) for f, last in one],
                    )
                )
            ).fingerprints
        ]
        with pytest.raises(grpc.aio.AioRpcError) as overlapping:
            await api.GetFingerprints(
                pb.GetFingerprintsRequest(originator_node_id=100, ranges=request)
            )
        assert overlapping.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "overlap" in (overlapping.value.details() or "")
        held = await api.GetLeaves(pb.GetLeavesRequest(originator_node_id=100, ranges=request[2:4]))
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await api.GetLeaves(
                pb.GetLeavesRequest(
                    originator_node_id=100, ranges=[pb.SequenceRange(first=5, last=2)]
                )
            )
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as beyond:
            await api.GetInclusionProof(
                pb.GetInclusionProofRequest(originator_node_id=100, sequence_id=1, tree_size=41)
            )
        assert beyond.value.code() == grpc.StatusCode.NOT_FOUND
    expected = [Fingerprint.of(leaves[f - 1 : last]) for f, last in ranges]
    assert [Fingerprint(f.count, f.xor) for f in prints] == expected
    assert [(leaf.sequence_id, leaf.leaf_hash) for leaf in held.leaves] == [
        (s, leaves[s - 1]) for s in [*range(3, 18), 18]
    ]


async def test_the_peer_holds_the_originators_checkpoints_and_leaves(
    start_node: Any, network: Network
) -> None:
    key = network.spec.keys[100].public_key
    a = await start_node(**network.settings(100, **FAST_CHECKPOINTS))
    b = await start_node(**network.settings(200, **FAST_CHECKPOINTS))
    sent = await publish(a.address, 100, [GROUP] * 25)
    async with log_api(a.address) as on_a:
        issued = await checkpoint_at(on_a, 100, key, 25)
    async with log_api(b.address) as on_b:
        held = await checkpoint_at(on_b, 100, key, 25)
        assert held.signed == issued.signed
        leaves: list[bytes] = []

        async def all_leaves() -> bool:
            # Checkpoints and envelopes travel on streams of their own: the checkpoint may
            # arrive before the envelopes it covers.
            answer = await on_b.GetLeaves(
                pb.GetLeavesRequest(
                    originator_node_id=100, ranges=[pb.SequenceRange(first=1, last=25)]
                )
            )
            leaves[:] = [leaf.leaf_hash for leaf in answer.leaves]
            return len(leaves) == 25

        await eventually(all_leaves)
        assert leaves == leaves_of(sent)
        proof = await on_b.GetInclusionProof(
            pb.GetInclusionProofRequest(originator_node_id=100, sequence_id=7, tree_size=25)
        )
        check_inclusion(held, 7, proof.leaf_hash, list(proof.proof))
        more = await publish(a.address, 100, [GROUP] * 9)
        later = await checkpoint_at(on_b, 100, key, 34)
        assert later.root == merkle.root_of(leaves_of(sent + more))
        check_chain(await checkpoints(on_b, 100, key))


async def test_prune_leaves_the_leaves_and_old_roots_stay_checkable(
    start_node: Any, database: str, node_spec: NodeSpec, tmp_path: Path
) -> None:
    key = node_spec.keys[100].public_key
    node = await start_node(**node_settings(database, node_spec, **FAST_CHECKPOINTS))
    leaves = leaves_of(await publish(node.address, 100, [GROUP] * 20))
    plan = write_plan(tmp_path / "plan.json", [(100, 1, 20)], LATER)
    # Run as if at LATER, when every retention has passed (a plan may not pass the clock).
    settings = Settings(database_dsn=database)
    _, result = await apply_plan(settings, plan, show_progress=False, now_unix=LATER)
    assert result[100].deleted == 20
    conn = await asyncpg.connect(database)
    try:
        assert await conn.fetchval("SELECT count(*) FROM originator_envelopes") == 0
        assert await conn.fetchval("SELECT count(*) FROM log_leaves") == 20
    finally:
        await conn.close()
    async with log_api(node.address) as api:
        checkpoint = await checkpoint_at(api, 100, key, 20)
        assert checkpoint.root == merkle.root_of(leaves)
        for sequence_id in itertools.chain(range(1, 21, 6), [20]):
            answer = await api.GetInclusionProof(
                pb.GetInclusionProofRequest(
                    originator_node_id=100, sequence_id=sequence_id, tree_size=20
                )
            )
            check_inclusion(checkpoint, sequence_id, answer.leaf_hash, list(answer.proof))


async def test_a_checkpoint_follow_ends_with_unavailable_when_the_node_drains(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    """At once, not held open until the grace runs out (which would hold the drain as long):
    the follower resumes elsewhere from its last checkpoint."""
    key = node_spec.keys[100].public_key
    grace = {"shutdown_grace_seconds": 120}
    node = await start_node(**node_settings(database, node_spec, **FAST_CHECKPOINTS, **grace))
    await publish(node.address, 100, [GROUP] * 10)
    async with log_api(node.address) as api:
        await checkpoint_at(api, 100, key, 10)
        follow = api.SubscribeCheckpoints(pb.SubscribeCheckpointsRequest(originator_node_id=100))
        first = await follow.read()
        assert isinstance(first, pb.SubscribeCheckpointsResponse)
        assert [c.SerializeToString() for c in first.checkpoints]  # the follow is open
        stopping = asyncio.create_task(node.stop())
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            await asyncio.wait_for(follow.read(), 30)  # well within the grace
        assert ended.value.code() is grpc.StatusCode.UNAVAILABLE
        await stopping
