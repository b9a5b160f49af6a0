"""Why the core refuses an input. Adapters map each reason to their own status codes."""

from __future__ import annotations

from enum import StrEnum

from xnode.core.cursors import Cursor


class Reason(StrEnum):
    MALFORMED = "malformed"
    MISSING_PAYLOAD = "missing_payload"
    BAD_TOPIC = "bad_topic"
    TOPIC_MISMATCH = "topic_mismatch"
    WRONG_ORIGINATOR = "wrong_originator"
    BAD_SIGNATURE = "bad_signature"
    INVALID_PAYLOAD = "invalid_payload"
    LIMIT_EXCEEDED = "limit_exceeded"
    DEPENDS_ON_AHEAD = "depends_on_ahead"
    # XIP-49 3.3.4 rule 2.4: depends_on must name the topic's latest chain payload.
    CHAIN_DEPENDS_ON_MISMATCH = "chain_depends_on_mismatch"
    UNAVAILABLE = "unavailable"
    # XIP-49 3.4: a read-only node originates nothing; clients publish to registered nodes.
    READ_ONLY = "read_only"
    # A claim only the chain can settle, sent to a node that reads no chain.
    NO_CHAIN = "no_chain"
    # A payer envelope this originator already holds (or is storing): a replay bills nobody.
    ALREADY_PUBLISHED = "already_published"


class Rejected(Exception):
    """An input the node refuses; `index` names the envelope in a batch, `cursor` the node's."""

    def __init__(
        self,
        reason: Reason,
        detail: str,
        *,
        index: int | None = None,
        cursor: Cursor | None = None,
    ) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.index = index
        self.cursor = cursor

    def at(self, index: int) -> Rejected:
        return Rejected(self.reason, self.detail, index=index, cursor=self.cursor)

    def __str__(self) -> str:
        where = f"payer_envelopes[{self.index}]: " if self.index is not None else ""
        return f"{where}{self.detail}"
