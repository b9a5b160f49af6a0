"""Reading what the node stores (XIP-49 3.3.3): envelope queries, the newest envelope per
topic, and inbox ids from indexed identity updates."""

from __future__ import annotations

from collections.abc import Sequence

from xnode.core.envelopes import StoredEnvelope
from xnode.core.errors import Reason, Rejected
from xnode.core.query import MAX_QUERY_TOPICS, EnvelopeQuery, effective_limit
from xnode.core.topics import Topic, TopicError
from xnode.usecases.identity import IdentityUpdates
from xnode.usecases.limits import ANONYMOUS, ApiLimits, Caller
from xnode.usecases.ports import EnvelopeReader, InboxResolver


def _at_most(count: int, what: str) -> None:
    if count > MAX_QUERY_TOPICS:
        raise Rejected(Reason.LIMIT_EXCEEDED, f"{count} {what}, the limit is {MAX_QUERY_TOPICS}")


class Query:
    def __init__(
        self,
        store: EnvelopeReader,
        inbox_resolver: InboxResolver | None = None,
        limits: ApiLimits | None = None,
        identity: IdentityUpdates | None = None,
    ) -> None:
        self._store = store
        self._identity = identity
        self._inbox_resolver = inbox_resolver
        self._limits = limits

    async def envelopes(
        self, query: EnvelopeQuery, limit: int, caller: Caller = ANONYMOUS
    ) -> list[StoredEnvelope]:
        """`limit` as the client asked: 0 is the default, anything above the cap is capped."""
        if self._limits is not None:
            await self._limits.query(caller)
        found = await self._store.query(query, effective_limit(limit))
        if self._limits is not None:
            await self._limits.answered(caller, sum(len(e.raw) for e in found))
        return found

    async def admit(self, caller: Caller) -> None:
        """The query limits for the other reads (newest envelopes, inbox ids)."""
        if self._limits is not None:
            await self._limits.query(caller)

    async def newest(self, topics: Sequence[bytes]) -> list[bytes | None]:
        """One answer per topic, in request order: the serialized envelope, or None."""
        _at_most(len(topics), "topics")
        for i, topic in enumerate(topics):
            try:
                Topic.parse(topic)
            except TopicError as exc:
                raise Rejected(Reason.BAD_TOPIC, f"topics[{i}]: {exc}") from None
        return await self._store.newest(topics)

    async def inbox_ids(self, identifiers: Sequence[tuple[str, int]]) -> list[str | None]:
        """One answer per (identifier, kind); all None when the chain is not configured.
        With `identity`, only inboxes whose validated association state holds the identifier
        are answered (XIP-46)."""
        _at_most(len(identifiers), "identifiers")
        if self._identity is not None:
            return await self._identity.inbox_ids(identifiers)
        resolver = self._inbox_resolver
        if resolver is None:
            return [None] * len(identifiers)
        return await resolver.inbox_ids(identifiers)
