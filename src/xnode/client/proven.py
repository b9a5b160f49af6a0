"""Reads proven complete (docs/proofs.md, "Completeness proofs"): per topic and originator,
a node's signed answer "these are all of the originator's envelopes of the topic after the
cursor, up to its checkpoint", checked against the registry keys alone.

An answer that leaves an envelope out (one its own proof commits to and that was not
expired when it answered), or whose proof does not hold, is OMISSION proven by the answer
itself: it is filed to the other nodes (xnode.client.reports) and the read goes on from the
next node in failover order. A node that cannot answer (no checkpoint with a topic map yet,
no CompletenessApi, down) is skipped the same way, without a report."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from xnode.client.network import FAILOVER_CODES, NetworkClient, NoNodeAvailable
from xnode.core.client_checks import CheckedEnvelope, EnvelopeCheckFailed
from xnode.core.completeness import AnswerError, judge, open_answer
from xnode.core.cursors import Cursor
from xnode.core.evidence import why_unproven
from xnode.core.withholding import omission_report
from xnode_api.completeness.v1 import completeness_pb2 as cp

# Codes after which another node may answer: besides FAILOVER_CODES, a node without the
# originator's topic map yet (NOT_FOUND) or without CompletenessApi (UNIMPLEMENTED).
_NEXT_NODE = FAILOVER_CODES | {grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNIMPLEMENTED}


@dataclass(frozen=True)
class ProvenRead:
    """What one node's answers prove: every envelope of `originator` on `topic` after the
    cursor up to sequence id `through` (the checkpoint's tree size) is in `envelopes`, but
    `expired` ones (provably: their committed expiry passed)."""

    topic: bytes
    originator: int
    node_id: int
    envelopes: list[CheckedEnvelope]
    expired: list[int]
    through: int


@dataclass(frozen=True)
class Omission:
    """A node's signed answer that proved its own omission (`reported`: filed to others)."""

    node_id: int
    originator: int
    topic: bytes
    problem: str
    reported: bool


class Incomplete(Exception):
    """A node's answer that cannot be used: `omission` when it proves the node's fault."""

    def __init__(self, why: str, omission: Omission | None = None) -> None:
        super().__init__(why)
        self.omission = omission


class ProvenReader:
    """Proven reads through a NetworkClient (its registry keys, failover and reporter)."""

    def __init__(self, client: NetworkClient) -> None:
        if client.keys is None:
            raise ValueError("proven reads need the registry's keys (use --registry)")
        self._client = client
        self._keys = {n: [k] for n, k in client.keys.items()}
        self.omissions: list[Omission] = []

    async def read(
        self, topics: Sequence[bytes], originators: Sequence[int], cursor: Cursor
    ) -> list[ProvenRead]:
        return [
            await self.read_one(topic, originator, cursor.get(originator))
            for topic in topics
            for originator in originators
        ]

    async def read_one(self, topic: bytes, originator: int, after: int) -> ProvenRead:
        deadline = time.monotonic() + self._client.deadline_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            for node_id in self._client.failover_order(topic):
                try:
                    return await self._from(node_id, topic, originator, after)
                except grpc.aio.AioRpcError as exc:
                    if exc.code() not in _NEXT_NODE:
                        raise
                    last = exc
                except EnvelopeCheckFailed as exc:
                    self._client.refuse(node_id, exc)
                    last = exc
                except Incomplete as exc:
                    if exc.omission is not None:
                        self.omissions.append(exc.omission)
                    self._client.exclude(node_id)
                    last = exc
            await asyncio.sleep(0.2)
        raise NoNodeAvailable(
            f"no node proved topic {topic.hex()} of originator {originator} complete"
        ) from last

    async def _from(self, node_id: int, topic: bytes, originator: int, after: int) -> ProvenRead:
        """Pages through the node's answers until one reaches its checkpoint."""
        envelopes: list[CheckedEnvelope] = []
        expired: list[int] = []
        while True:
            node = self._client.node(node_id)
            (answer,) = await node.prove_topics(
                originator, [(topic, after)], self._client.deadline_s
            )
            through, tree_size, found, gone = self._checked(node_id, answer, topic)
            envelopes += found
            expired += gone
            if through >= tree_size or through <= after:
                return ProvenRead(topic, originator, node_id, envelopes, expired, through)
            after = through

    def _checked(
        self, node_id: int, answer: cp.SignedAnswer, topic: bytes
    ) -> tuple[int, int, list[CheckedEnvelope], list[int]]:
        """(complete through, the checkpoint's size, envelopes, expired ids) of an answer."""
        try:
            opened = open_answer(answer, self._keys.get(node_id, ()))
        except AnswerError as exc:
            raise Incomplete(str(exc)) from None
        unsigned = opened.unsigned
        if unsigned.topic != topic or unsigned.node_id != node_id:
            raise Incomplete("the answer is for another topic or node")
        verdict = judge(opened, self._keys.get(unsigned.originator_node_id, ()))
        if verdict.problem is not None:
            raise Incomplete(verdict.problem, self._omitted(node_id, answer, verdict.problem))
        if verdict.complete is None or verdict.omissions is None or verdict.checkpoint is None:
            raise Incomplete("the answer proves nothing")  # judge() says why when it does
        envelopes = [self._client.check(raw, [topic]) for raw in unsigned.envelopes]
        expired = [e.sequence_id for e in verdict.omissions.expired]
        return verdict.complete.through, verdict.checkpoint.tree_size, envelopes, expired

    def _omitted(self, node_id: int, answer: cp.SignedAnswer, problem: str) -> Omission:
        unsigned = cp.UnsignedAnswer.FromString(answer.unsigned_answer)
        report = omission_report(node_id, answer, self._client.clock_ns())
        reporter = self._client.reporter
        proven = why_unproven(report, self._keys) is None
        if proven and reporter is not None:
            reporter.submit(report)
        return Omission(
            node_id,
            unsigned.originator_node_id,
            unsigned.topic,
            problem,
            proven and reporter is not None,
        )
