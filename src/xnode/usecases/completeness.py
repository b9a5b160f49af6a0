"""Completeness answers (docs/proofs.md, "Completeness proofs"): per asked topic, this node's
signed answer "these are all of originator O's envelopes of the topic after the cursor, up
to O's checkpoint", proven against that checkpoint's topic map (xnode.core.completeness)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from xnode.core.checkpoints import Checkpoint
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.completeness import MAX_ENTRIES, MAX_TOPICS, sign_answer, unsigned_answer
from xnode.core.crypto import SigningKey
from xnode.core.errors import Reason, Rejected
from xnode.core.topic_map import MapProof, TopicEntry
from xnode.core.topics import Topic
from xnode.usecases.logs import NotHeld
from xnode_api.completeness.v1 import completeness_pb2 as cp


@dataclass(frozen=True)
class TopicMaterial:
    """What answering one topic needs: its map proof, its whole log, and the envelopes held
    of its entries after the cursor (at most MAX_ENTRIES of them)."""

    topic: bytes
    after: int
    map_proof: MapProof
    log: list[TopicEntry]
    held: dict[int, bytes]


class TopicMaps(Protocol):
    """The topic maps the store holds (xnode.store.topics.TopicStore)."""

    async def material(
        self, originator: int, topics: Sequence[tuple[bytes, int]], limit: int
    ) -> tuple[Checkpoint, list[TopicMaterial]] | None:
        """Read in one snapshot, against the accepted checkpoint of the size the map was
        computed to; None when there is none."""
        ...


class CompletenessAnswers:
    def __init__(
        self, node_id: int, key: SigningKey, maps: TopicMaps, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self._node_id = node_id
        self._key = key
        self._maps = maps
        self._clock = clock

    async def prove(
        self, originator: int, topics: Sequence[tuple[bytes, int]]
    ) -> list[cp.SignedAnswer]:
        """Raises Rejected for a bad request, NotHeld when no checkpoint of `originator`
        with a topic map is held here."""
        if not 1 <= len(topics) <= MAX_TOPICS:
            raise Rejected(
                Reason.LIMIT_EXCEEDED, f"{len(topics)} topics: ask for 1 to {MAX_TOPICS} at a time"
            )
        for topic, _ in topics:
            try:
                Topic.parse(topic)
            except ValueError as exc:
                raise Rejected(Reason.BAD_TOPIC, f"topic 0x{topic.hex()}: {exc}") from None
        found = await self._maps.material(originator, topics, MAX_ENTRIES)
        if found is None:
            raise NotHeld(f"no checkpoint of originator {originator} with a topic map is held here")
        checkpoint, materials = found
        now_ns = self._clock.now_ns()
        return [
            sign_answer(
                self._key,
                unsigned_answer(
                    self._node_id,
                    checkpoint,
                    m.topic,
                    m.after,
                    m.map_proof,
                    m.log,
                    m.held,
                    now_ns,
                ),
            )
            for m in materials
        ]
