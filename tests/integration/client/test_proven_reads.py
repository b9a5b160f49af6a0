"""Proven reads against an omitting node: a fake node (in the registry as node 200, signing
with node 200's key) answers CompletenessApi with a real node's proven answer but leaves
one envelope out. The client catches it, files an OMISSION report that node 100 takes
(it proves itself), and completes the read from node 100; `xnode query --prove` does the
same from the command line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc

from tests.conftest import Network
from tests.integration.client.test_misbehaving_node import group_preferring, reports_held_by
from tests.integration.export.helpers import run_cli_async
from tests.integration.logs.helpers import FAST_CHECKPOINTS, checkpoint_at, log_api
from tests.support.fake_peer import serve_replication_methods
from tests.support.waiting import eventually_value
from xnode.client.network import NetworkClient
from xnode.client.node import NodeClient
from xnode.client.proven import ProvenReader
from xnode.core.completeness import sign_answer
from xnode.core.crypto import SigningKey
from xnode.core.cursors import Cursor
from xnode.core.envelopes import parse_originator_envelope
from xnode.core.evidence import why_unproven
from xnode.core.misbehavior import OMISSION
from xnode.core.registry import Registry
from xnode.core.topics import Topic, TopicKind
from xnode_api.completeness.v1 import completeness_pb2 as cp

SERVICE = "xnode.completeness.v1.CompletenessApi"


async def omitting_node(address: str, real: str, key: SigningKey, left_out: int) -> grpc.aio.Server:
    """Answers as node 200: the real node's answers, `left_out` dropped, signed again."""

    async def prove(request_bytes: bytes, _context: Any) -> bytes:
        request = cp.ProveTopicsRequest.FromString(request_bytes)
        async with NodeClient(real) as node:
            answers = await node.prove_topics(
                request.originator_node_id,
                [(t.topic, t.after_sequence_id) for t in request.topics],
            )
        signed = []
        for answer in answers:
            unsigned = cp.UnsignedAnswer.FromString(answer.unsigned_answer)
            kept = [
                raw
                for raw in unsigned.envelopes
                if parse_originator_envelope(raw).sequence_id != left_out
            ]
            del unsigned.envelopes[:]
            unsigned.envelopes.extend(kept)
            unsigned.node_id = 200
            signed.append(sign_answer(key, unsigned))
        return cp.ProveTopicsResponse(answers=signed).SerializeToString()

    handler = grpc.unary_unary_rpc_method_handler(
        prove, request_deserializer=bytes, response_serializer=bytes
    )
    return await serve_replication_methods({"ProveTopics": handler}, address, service=SERVICE)


async def omissions_held_by(address: str, count: int) -> list[Any]:
    async def against() -> list[Any]:
        return [
            r
            for r in await reports_held_by(address)
            if r.misbehaving_node_id == 200 and int(r.type) == OMISSION
        ]

    return await eventually_value(
        against, lambda found: len(found) >= count, 10, f"{count} OMISSION reports"
    )


async def test_an_omitting_node_is_caught_reported_and_read_around(
    start_node: Any, network: Network, tmp_path: Path
) -> None:
    await start_node(**network.settings(100, **FAST_CHECKPOINTS))
    full = Registry.from_json(network.spec.nodes_file.read_text())
    registry = Registry([full.nodes[100], full.nodes[200]])  # 300 never runs here
    group = group_preferring(registry, 200)
    topic = Topic(TopicKind.GROUP_MESSAGES, group).raw
    async with NetworkClient(registry, deadline_s=10) as writer:
        writer.exclude(200)  # publish on the real node
        sent = await writer.publish_group_messages(group, [b"one", b"two", b"three"])
    assert [e.sequence_id for e in sent] == [1, 2, 3]
    async with log_api(network.addresses[100]) as api:
        await checkpoint_at(api, 100, full.nodes[100].public_key, 3)
    fake = await omitting_node(
        network.addresses[200], network.addresses[100], network.spec.keys[200], left_out=2
    )
    try:
        async with NetworkClient(registry, deadline_s=10) as reader:
            proven = ProvenReader(reader)
            (read,) = await proven.read([topic], [100], Cursor())
        assert read.node_id == 100 and read.through == 3
        assert [e.raw for e in read.envelopes] == [e.raw for e in sent]
        [omission] = proven.omissions
        assert omission.node_id == 200 and omission.reported
        assert "leaves out sequence ids [2]" in omission.problem
        [held] = await omissions_held_by(network.addresses[100], 1)
        assert why_unproven(held, {n: [e.public_key] for n, e in full.nodes.items()}) is None

        registry_file = tmp_path / "nodes.json"
        registry_file.write_text(registry.to_json())
        done = await run_cli_async(
            "query",
            "--registry",
            str(registry_file),
            "--group-id",
            group.hex(),
            "--prove",
            "--originator",
            "100",
        )
        assert done.returncode == 0, done.stderr
        assert len(done.stdout.splitlines()) == 3
        assert "node 200 omission (reported)" in done.stderr
        assert "through sequence id 3, proven by node 100" in done.stderr
        await omissions_held_by(network.addresses[100], 2)
    finally:
        await fake.stop(None)
