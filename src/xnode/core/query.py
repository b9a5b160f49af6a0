"""Envelope queries: topics XOR originators, a cursor and a limit (XIP-49 3.3.3)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from xnode.core.cursors import Cursor, out_of_range
from xnode.core.errors import Reason, Rejected
from xnode.core.topics import Topic, TopicError

MAX_QUERY_TOPICS = 1024
MAX_QUERY_ORIGINATORS = 1024
DEFAULT_QUERY_LIMIT = 100
MAX_QUERY_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class EnvelopeQuery:
    topics: tuple[bytes, ...] = ()
    originators: tuple[int, ...] = ()
    cursor: Cursor = field(default_factory=Cursor)

    def with_cursor(self, cursor: Cursor) -> EnvelopeQuery:
        return replace(self, cursor=cursor)

    @classmethod
    def validated(
        cls, topics: list[bytes], originators: list[int], cursor: Cursor
    ) -> EnvelopeQuery:
        if topics and originators:
            raise Rejected(Reason.MALFORMED, "set topics or originator_node_ids, not both")
        if not topics and not originators:
            raise Rejected(Reason.MALFORMED, "set topics or originator_node_ids")
        if len(topics) > MAX_QUERY_TOPICS:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"query has {len(topics)} topics, the limit is {MAX_QUERY_TOPICS}",
            )
        if len(originators) > MAX_QUERY_ORIGINATORS:
            raise Rejected(
                Reason.LIMIT_EXCEEDED,
                f"query has {len(originators)} originators, the limit is {MAX_QUERY_ORIGINATORS}",
            )
        for i, node_id in enumerate(originators):
            problem = out_of_range(node_id)
            if problem:
                raise Rejected(Reason.MALFORMED, f"originator_node_ids[{i}]: {problem}")
        for i, topic in enumerate(topics):
            try:
                Topic.parse(topic)
            except TopicError as exc:
                raise Rejected(Reason.BAD_TOPIC, f"topics[{i}]: {exc}") from None
        unique_topics = tuple(dict.fromkeys(bytes(t) for t in topics))
        return cls(unique_topics, tuple(sorted(set(originators))), cursor)


def effective_limit(requested: int) -> int:
    """0 means the default; larger requests are capped, not refused."""
    if requested <= 0:
        return DEFAULT_QUERY_LIMIT
    return min(requested, MAX_QUERY_LIMIT)
