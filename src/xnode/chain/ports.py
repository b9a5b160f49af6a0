"""What the chain side needs from the rest of the node, implemented by the store and wired in
xnode.server: the chain side never imports the store."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from xnode.core.chain_index import ChainProgress, IndexedRange
from xnode.core.chain_payloads import ChainPayload
from xnode.core.envelopes import StoredEnvelope
from xnode.usecases.ports import InboxClaims, InboxResolver


class ChainIndexStore(Protocol):
    """The indexer's progress, the block hashes it checks for re-orgs, and its payloads."""

    async def progress(self) -> dict[str, ChainProgress]:
        """Each contract's last indexed block, by contract name."""
        ...

    async def recent_blocks(self, up_to: int, limit: int) -> list[tuple[int, bytes]]:
        """Stored (block number, block hash) at or below `up_to`, newest first."""
        ...

    async def commit_range(self, indexed: IndexedRange) -> list[StoredEnvelope]:
        """Stores one indexed range, all or nothing; returns the envelopes that were new, in
        order (other processes hear of them)."""
        ...

    async def rewind(
        self, block_number: int, block_hash: bytes, addresses: Mapping[str, bytes]
    ) -> tuple[int, dict[int, int]]:
        """Forgets everything indexed above `block_number` (a re-org dropped it). Returns how
        many envelopes were deleted and the chain originators' new highest sequence ids."""
        ...


class ChainVouchers(Protocol):
    """A read-only node's source of registered nodes' proofs for the payloads it indexes."""

    async def vouched(self, payloads: Sequence[ChainPayload]) -> list[ChainPayload]:
        """The payloads, each with a registered node's copy (core.chain_payloads.vouches_for)
        in place of this node's own; raises NotVouched when a registered node serves none
        yet (the indexer tries the page again)."""
        ...


class ChainPayloadLookup(Protocol):
    """What the publisher reads of the indexed payloads."""

    async def latest_sequence_ids(self, keys: Sequence[tuple[bytes, int]]) -> list[int]:
        """The highest stored sequence id of each (topic, chain originator); 0 when none."""
        ...

    async def count_after(self, keys: Sequence[tuple[bytes, int, int]]) -> list[int]:
        """Per (topic, chain originator, sequence id): how many stored payloads follow it."""
        ...

    async def envelopes_by_transaction(
        self, transaction_hashes: Sequence[bytes]
    ) -> dict[tuple[bytes, int], bytes]:
        """Stored envelopes mined by these transactions, by (transaction hash, log index)."""
        ...


class GasLedger(Protocol):
    """Where the publisher records what a payer's chain payloads cost this node in gas."""

    async def record_gas(
        self, payer_address: bytes, originator: int, originator_ns: int, wei: int
    ) -> None:
        """Adds `wei` to the payer's usage for that chain originator and UTC day."""
        ...


class ChainStorage(
    ChainIndexStore, ChainPayloadLookup, InboxResolver, InboxClaims, GasLedger, Protocol
):
    """Everything the chain side stores and reads: the indexer's, the publisher's, and the
    inbox associations the indexed identity updates make."""


class IndexerLock(Protocol):
    """Held by one process per database: the one that indexes (the others observe)."""

    async def held(self) -> bool:
        """Whether this process holds the lock, taking it when it is free."""
        ...

    async def release(self) -> None: ...
