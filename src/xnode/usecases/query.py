"""Reading what the node stores (XIP-49 3.3.3): envelope queries, the newest envelope per
topic, and inbox ids from indexed identity updates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xnode.core.envelopes import StoredEnvelope
from xnode.core.errors import Reason, Rejected
from xnode.core.query import MAX_QUERY_TOPICS, EnvelopeQuery, effective_limit
from xnode.core.sizes import DEFAULT_ANSWER_BUDGET_BYTES, repeated_topic
from xnode.core.topics import Topic, TopicError
from xnode.usecases.identity import IdentityUpdates
from xnode.usecases.limits import ANONYMOUS, ApiLimits, Caller
from xnode.usecases.ports import AnswerReader, InboxResolver


def _at_most(count: int, what: str) -> None:
    if count > MAX_QUERY_TOPICS:
        raise Rejected(Reason.LIMIT_EXCEEDED, f"{count} {what}, the limit is {MAX_QUERY_TOPICS}")


@dataclass(frozen=True, slots=True)
class Answer:
    """A query's envelopes; `cut`: the byte budget left rows out (page on from the last)."""

    envelopes: list[StoredEnvelope]
    cut: bool = False


class Query:
    def __init__(
        self,
        store: AnswerReader,
        inbox_resolver: InboxResolver | None = None,
        limits: ApiLimits | None = None,
        identity: IdentityUpdates | None = None,
        budget: int = DEFAULT_ANSWER_BUDGET_BYTES,
    ) -> None:
        """`budget`: the bytes of envelopes one answer holds at most (core.sizes)."""
        self._store = store
        self._budget = budget
        self._identity = identity
        self._inbox_resolver = inbox_resolver
        self._limits = limits

    async def envelopes(
        self, query: EnvelopeQuery, limit: int, caller: Caller = ANONYMOUS
    ) -> Answer:
        """`limit` as the client asked: 0 is the default, anything above the cap is capped;
        the answer stops at the byte budget too (the client pages on from its last row)."""
        if self._limits is not None:
            await self._limits.query(caller)
        found, cut = await self._store.query_within(query, effective_limit(limit), self._budget)
        if self._limits is not None:
            await self._limits.answered(caller, sum(len(e.raw) for e in found))
        return Answer(found, cut)

    async def admit(self, caller: Caller) -> None:
        """The query limits for the other reads (newest envelopes, inbox ids)."""
        if self._limits is not None:
            await self._limits.query(caller)

    async def newest(self, topics: Sequence[bytes]) -> list[bytes | None]:
        """One answer per topic, in request order: the serialized envelope, or None; for as
        many topics as the byte budget holds (always the first): a shorter list than
        `topics` means ask again for the rest. A topic listed twice is refused: it would
        only repeat an answer (and its bytes)."""
        _at_most(len(topics), "topics")
        for i, topic in enumerate(topics):
            try:
                Topic.parse(topic)
            except TopicError as exc:
                raise Rejected(Reason.BAD_TOPIC, f"topics[{i}]: {exc}") from None
        repeated = repeated_topic(topics)
        if repeated is not None:
            later, first = repeated
            raise Rejected(
                Reason.MALFORMED,
                f"topics[{later}] repeats topics[{first}]: list each topic once",
            )
        return await self._store.newest(topics, self._budget)

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
