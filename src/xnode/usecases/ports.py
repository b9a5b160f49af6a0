"""Extension points the API calls but the chain side implements (XIP-49 3.3.4 step 4, 3.3.3)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from xnode.core.envelopes import ValidPayerEnvelope


class ChainPublisher(Protocol):
    """Sends commits and identity updates to their contract instead of originating them."""

    def handles(self, envelope: ValidPayerEnvelope) -> bool:
        """True for payloads that need the chain's total order."""
        ...

    async def publish(self, envelopes: Sequence[ValidPayerEnvelope]) -> list[bytes]:
        """Returns, in order, the serialized OriginatorEnvelopes the indexer built from the
        mined events. Raises Rejected(UNAVAILABLE) when the chain cannot take them now."""
        ...


class InboxResolver(Protocol):
    """Maps identifiers (e.g. Ethereum addresses) to inbox ids from indexed identity updates."""

    async def inbox_ids(self, identifiers: Sequence[tuple[str, int]]) -> list[str | None]:
        """One answer per (identifier, IdentifierKind); None when no inbox is associated."""
        ...
