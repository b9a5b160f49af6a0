"""Completeness proofs from a real node: its checkpoints commit to its topic map, and its
CompletenessApi answers (signed) prove each topic's envelopes after a cursor complete, an
absent topic absent, across a restart and the checkpoints after it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from tests.conftest import NodeSpec, node_settings
from tests.integration.export.helpers import Item, group, publish
from tests.integration.logs.helpers import FAST_CHECKPOINTS, checkpoint_at, log_api
from xnode.core.completeness import Verdict, judge, open_answer
from xnode.core.topics import Topic, TopicKind
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
        yield completeness_pb2_grpc.CompletenessApiStub(channel)  # type: ignore[no-untyped-call]


async def verdicts(address: str, key: bytes, topics: list[tuple[bytes, int]]) -> list[Verdict]:
    async with completeness_api(address) as api:
        response = await api.ProveTopics(
            cp.ProveTopicsRequest(
                originator_node_id=100,
                topics=[cp.TopicCursor(topic=t, after_sequence_id=a) for t, a in topics],
            )
        )
    return [judge(open_answer(a, [key]), [key]) for a in response.answers]


def ids(verdict: Verdict) -> list[int]:
    assert verdict.problem is None, verdict.problem
    assert verdict.complete is not None
    return [e.sequence_id for e in verdict.complete.entries]


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
