"""Completeness proofs from a real node: its checkpoints commit to its topic map, and its
CompletenessApi answers (signed) prove each topic's envelopes after a cursor complete, an
absent topic absent, across a restart and the checkpoints after it. A replica recomputes an
originator's topic map from the envelopes it holds and flags a checkpoint whose map does not
match them."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import grpc
import pytest
from structlog.testing import capture_logs

from tests.conftest import Network, NodeSpec, node_settings
from tests.integration.export.helpers import Item, group, publish
from tests.integration.logs.helpers import FAST_CHECKPOINTS, checkpoint_at, log_api
from tests.support.waiting import eventually_value
from tests.unit.usecases.fakes import FixedClock
from xnode.client.node import group_message_envelope
from xnode.core import merkle
from xnode.core.checkpoints import TopicCommitment, envelope_leaf, sign_checkpoint
from xnode.core.completeness import Verdict, entry_of, judge, open_answer
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import (
    IndexedEnvelope,
    build_payer_envelope,
    originate,
    validate_payer_envelope,
)
from xnode.core.topic_map import SparseMap, TopicEntry, head_value, topic_key
from xnode.core.topics import Topic, TopicKind
from xnode.store.logs import LogStore
from xnode.store.replication import ReplicationStore
from xnode.store.topics import TopicStore
from xnode.usecases.completeness import CompletenessAnswers
from xnode.usecases.logs import CheckpointIntake
from xnode_api.completeness.v1 import completeness_pb2 as cp
from xnode_api.completeness.v1 import completeness_pb2_grpc

A, B = Item(TopicKind.GROUP_MESSAGES, group(1)), Item(TopicKind.GROUP_MESSAGES, group(2))
TOPIC_A, TOPIC_B = (Topic(i.kind, i.identifier).raw for i in (A, B))
ABSENT = Topic(TopicKind.GROUP_MESSAGES, group(3)).raw


@asynccontextmanager
async def completeness_api(
    address: str,
) -> AsyncIterator[completeness_pb2_grpc.CompletenessApiStub]:
    async with grpc.aio.insecure_channel(address) as channel:
        yield completeness_pb2_grpc.CompletenessApiStub(channel)


async def verdicts(
    address: str, key: bytes, topics: list[tuple[bytes, int]], node_key: bytes | None = None
) -> list[Verdict]:
    """`key`: the originator's (100); `node_key`: the answering node's, when another."""
    async with completeness_api(address) as api:
        response = await api.ProveTopics(
            cp.ProveTopicsRequest(
                originator_node_id=100,
                topics=[cp.TopicCursor(topic=t, after_sequence_id=a) for t, a in topics],
            )
        )
    return [judge(open_answer(a, [node_key or key]), [key]) for a in response.answers]


def ids(verdict: Verdict) -> list[int]:
    assert verdict.problem is None, verdict.problem
    assert verdict.complete is not None
    return [e.sequence_id for e in verdict.complete.entries]


async def bad_requests_are_refused_precisely(address: str) -> None:
    async def code(originator: int, topics: list[bytes]) -> tuple[grpc.StatusCode, str]:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            async with completeness_api(address) as api:
                await api.ProveTopics(
                    cp.ProveTopicsRequest(
                        originator_node_id=originator,
                        topics=[cp.TopicCursor(topic=t) for t in topics],
                    )
                )
        return refused.value.code(), refused.value.details() or ""

    assert (await code(100, []))[0] is grpc.StatusCode.INVALID_ARGUMENT
    assert (await code(100, [TOPIC_A] * 65))[0] is grpc.StatusCode.INVALID_ARGUMENT
    status, details = await code(100, [b"\xee" + bytes(16)])
    assert status is grpc.StatusCode.INVALID_ARGUMENT and "kind" in details
    status, details = await code(300, [TOPIC_A])
    assert status is grpc.StatusCode.NOT_FOUND and "originator 300" in details


async def test_a_nodes_answers_prove_its_topics_complete_across_a_restart(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    key = node_spec.keys[100].public_key
    settings = node_settings(database, node_spec, **FAST_CHECKPOINTS)
    node = await start_node(**settings)
    await publish(node.address, 100, [A, B, A, A, B, A, A])  # A: 1 3 4 6 7, B: 2 5
    async with log_api(node.address) as api:
        checkpoint = await checkpoint_at(api, 100, key, 7)
    assert checkpoint.topics is not None and checkpoint.topics.first_sequence_id == 1
    a, a_after_4, b, absent = await verdicts(
        node.address, key, [(TOPIC_A, 0), (TOPIC_A, 4), (TOPIC_B, 0), (ABSENT, 0)]
    )
    assert ids(a) == [1, 3, 4, 6, 7]
    assert ids(a_after_4) == [6, 7]
    assert ids(b) == [2, 5]
    assert ids(absent) == []
    assert a.omissions is not None and not a.omissions.omitted and not a.omissions.expired
    await bad_requests_are_refused_precisely(node.address)

    await node.stop()
    node = await start_node(**{**settings, "listen_address": "127.0.0.1:0"})
    (a,) = await verdicts(node.address, key, [(TOPIC_A, 7)])
    assert ids(a) == [] and a.checkpoint is not None and a.checkpoint.tree_size == 7
    await publish(node.address, 100, [B, A])  # 8 9
    async with log_api(node.address) as api:
        await checkpoint_at(api, 100, key, 9)
    a, b = await verdicts(node.address, key, [(TOPIC_A, 4), (TOPIC_B, 2)])
    assert ids(a) == [6, 7, 9]
    assert ids(b) == [5, 8]


PEER = 200
PEER_KEY = SigningKey.generate()
PAYER = SigningKey.generate()


def peer_envelope(seq: int, group_id: bytes) -> IndexedEnvelope:
    payer = build_payer_envelope(group_message_envelope(group_id, b"%d" % seq), PAYER, PEER)
    return originate(validate_payer_envelope(payer, PEER), PEER, seq, 1000 + seq, PEER_KEY)


async def no_proof(first: int, second: int) -> list[bytes]:
    raise AssertionError("no consistency proof expected")


async def test_a_replica_recomputes_topic_maps_and_flags_one_that_does_not_match(
    database: str,
) -> None:
    log_ = [peer_envelope(s, bytes([s % 2]) * 16) for s in range(1, 6)]
    leaves = merkle.root_of([envelope_leaf(e.raw) for e in log_])
    honest = SparseMap()
    by_topic: dict[bytes, list[TopicEntry]] = {}
    for e in log_:
        by_topic.setdefault(e.topic, []).append(entry_of(e.raw, e.sequence_id))
    honest.set(
        {
            topic_key(t): head_value(len(es), merkle.root_of([x.hash for x in es]))
            for t, es in by_topic.items()
        }
    )
    async with asyncpg.create_pool(database, min_size=1, max_size=4) as pool:
        await ReplicationStore(pool).insert_received(log_[:3], "t")
        intake = CheckpointIntake(LogStore(pool))
        first = sign_checkpoint(
            PEER_KEY,
            PEER,
            3,
            merkle.root_of([envelope_leaf(e.raw) for e in log_[:3]]),
            10,
            None,
            TopicCommitment(bytes(32)),  # a map root no log of these envelopes has
        )
        with capture_logs() as logged:
            assert await intake.receive(first.signed, PEER_KEY.public_key, no_proof, PEER)
        assert [e["event"] for e in logged if e["event"] == "topic_map_mismatch"] == [
            "topic_map_mismatch"
        ]
        assert await TopicStore(pool).material(PEER, [(log_[0].topic, 0)], 10) is None

        await ReplicationStore(pool).insert_received(log_[3:], "t")
        second = sign_checkpoint(
            PEER_KEY, PEER, 5, leaves, 11, first, TopicCommitment(honest.root())
        )

        async def consistency(a: int, b: int) -> list[bytes]:
            hashes = {(0, i): envelope_leaf(e.raw) for i, e in enumerate(log_)}
            return merkle.consistency_proof(
                a,
                b,
                lambda level, index: merkle.root_of(
                    [hashes[(0, i)] for i in range(index << level, (index + 1) << level)]
                ),
            )

        with capture_logs() as logged:
            assert await intake.receive(second.signed, PEER_KEY.public_key, consistency, PEER)
        assert not [e for e in logged if e["event"] == "topic_map_mismatch"]
        found = await TopicStore(pool).material(PEER, [(log_[0].topic, 0)], 10)
        assert found is not None
        checkpoint, [material] = found
        assert checkpoint.tree_size == 5
        assert [e.sequence_id for e in material.log] == [1, 3, 5]


async def test_a_replica_proves_the_originators_topics(start_node: Any, network: Network) -> None:
    key = network.spec.keys[100].public_key
    for node_id in (100, 200):
        await start_node(**network.settings(node_id, **FAST_CHECKPOINTS))
    await publish(network.addresses[100], 100, [A, B, A])

    async def proven() -> list[int] | None:
        try:
            (a,) = await verdicts(
                network.addresses[200], key, [(TOPIC_A, 0)], network.spec.keys[200].public_key
            )
        except grpc.aio.AioRpcError as exc:  # no checkpoint with its topic map taken in yet
            assert exc.code() is grpc.StatusCode.NOT_FOUND, exc
            return None
        return ids(a)

    assert await eventually_value(proven, lambda found: found == [1, 3], 20) == [1, 3]


async def test_a_lost_envelope_is_not_signed_away_and_an_expired_one_shows_expired(
    start_node: Any, database: str, node_spec: NodeSpec
) -> None:
    """A node that lost an envelope (not expired) answers UNAVAILABLE rather than sign an
    answer proving its own omission; once the envelope's committed expiry has passed (a
    prune took it), the answer says "expired" and still verifies."""
    key = node_spec.keys[100]
    node = await start_node(**node_settings(database, node_spec, **FAST_CHECKPOINTS))
    sent = await publish(node.address, 100, [A, B, A, A])  # A: 1 3 4
    async with log_api(node.address) as api:
        await checkpoint_at(api, 100, key.public_key, 4)
    async with asyncpg.create_pool(database, min_size=1, max_size=2) as pool:
        await pool.execute(
            "DELETE FROM originator_envelopes"
            " WHERE originator_node_id = 100 AND originator_sequence_id = 3"
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await verdicts(node.address, key.public_key, [(TOPIC_A, 0)])
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        assert "[3]" in (refused.value.details() or "")
        (a,) = await verdicts(node.address, key.public_key, [(TOPIC_A, 3)])
        assert ids(a) == [4]  # after the lost one, nothing is held back

        expiry = entry_of(sent[2], 3).expiry
        answers = CompletenessAnswers(100, key, TopicStore(pool), FixedClock(expiry))
        (signed,) = await answers.prove(100, [(TOPIC_A, 0)])
    verdict = judge(open_answer(signed, [key.public_key]), [key.public_key])
    assert ids(verdict) == [1, 3, 4]
    assert verdict.omissions is not None
    assert [e.sequence_id for e in verdict.omissions.expired] == [3]


async def test_the_stored_map_is_the_reference_map_over_many_topics(database: str) -> None:
    """Two checkpoints' worth of envelopes on 120 topics: the map kept in Postgres, grown
    in two steps, has the root of the in-memory map of every topic's log."""
    rng = random.Random(7)
    log_ = [peer_envelope(s, rng.randrange(120).to_bytes(16, "big")) for s in range(1, 301)]
    by_topic: dict[bytes, list[TopicEntry]] = {}
    for e in log_:
        by_topic.setdefault(e.topic, []).append(entry_of(e.raw, e.sequence_id))
    reference = SparseMap()
    reference.set(
        {
            topic_key(t): head_value(len(es), merkle.root_of([x.hash for x in es]))
            for t, es in by_topic.items()
        }
    )
    async with asyncpg.create_pool(database, min_size=1, max_size=2) as pool:
        store = ReplicationStore(pool)
        logs = LogStore(pool)
        await store.insert_received(log_[:170], "t")
        assert await logs.advance_topics(PEER, 170) is not None
        await store.insert_received(log_[170:], "t")
        grown = await logs.advance_topics(PEER, 300)
    assert grown is not None and grown.first_sequence_id == 1
    assert grown.map_root == reference.root()
