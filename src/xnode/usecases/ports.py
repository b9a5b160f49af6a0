"""What the use cases need from the adapters (store, chain), as Protocols: the adapters
implement them, xnode.server wires them (XIP-49 3.3.3, 3.3.4 step 4, 3.2.8)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

from xmtp.xmtpv4.message_api import misbehavior_api_pb2 as mb
from xnode.core.associations import WalletCheck
from xnode.core.chain_evidence import ChainFacts
from xnode.core.cursors import Cursor
from xnode.core.envelopes import IndexedEnvelope, Originable, StoredEnvelope, ValidPayerEnvelope
from xnode.core.forks import Fork, ForkDigest
from xnode.core.limits import Charge, LimitExceeded
from xnode.core.query import EnvelopeQuery

T = TypeVar("T")


class StoreUnavailable(Exception):
    """The store cannot answer now (its connection lost, its host failing over, a transaction
    the database gave up): nothing was half-done, the caller retries later. The store raises
    it for every driver failure, so no layer above it knows the driver."""


class StoreCorrupt(StoreUnavailable):
    """The database holds a page it refuses to read: its data checksum fails, or its file was
    cut short (SQLSTATE class XX, "invalid page in block ..."). A retry on this node fails
    the same until an operator repairs the page (docs/operations.md, "Corrupt pages");
    callers still answer UNAVAILABLE, so clients read from another node."""


class CryptoThreads(Protocol):
    """Where signature recoveries and signatures run beside the event loop (libsecp256k1
    releases the GIL); the process's threads are the adapter's (xnode.runtime)."""

    async def run(self, call: Callable[[], T]) -> T: ...


class EnvelopeReader(Protocol):
    """The envelope store as the query, subscribe and publish use cases read it."""

    async def query(self, query: EnvelopeQuery, limit: int) -> list[StoredEnvelope]:
        """Envelopes past the query's cursor, in (originator, sequence id) order."""
        ...

    async def vector_clock(self) -> Cursor:
        """What the store holds per originator, committed by any process."""
        ...


class AnswerReader(EnvelopeReader, Protocol):
    """The envelope store as the query use case reads it: answers within a byte budget
    (core.sizes), so no answer is read whole before the send limit would refuse it."""

    async def query_within(
        self, query: EnvelopeQuery, limit: int, budget: int
    ) -> tuple[list[StoredEnvelope], bool]:
        """query's envelopes until their bytes pass `budget` (always the first); and whether
        that left rows out."""
        ...

    async def newest(self, topics: Sequence[bytes], budget: int) -> list[bytes | None]:
        """The newest stored envelope of each topic, serialized (None when there is none),
        for a prefix of `topics` whose envelopes fit `budget` (always the first)."""
        ...


class Originate(Protocol):
    """Signs, sequences and commits payer envelopes as this node (the group commit)."""

    async def publish(self, envelopes: Sequence[Originable]) -> list[IndexedEnvelope]: ...


class MisbehaviorReports(Protocol):
    """The misbehavior reports this node hosts (XIP-49 3.2.8)."""

    async def add(self, unsigned: mb.UnsignedMisbehaviorReport) -> mb.MisbehaviorReport:
        """Stores the report signed by this node."""
        ...

    async def after(self, after_ns: int, *, budget: int = 0) -> list[bytes]:
        """Serialized reports stored after `after_ns`, oldest first, a page at most; with a
        `budget`, as many as fit it in bytes (always the first)."""
        ...


class ChainTransactions(Protocol):
    """The chain's own record of transactions (what BLOCKCHAIN_INCONSISTENCY is judged by)."""

    async def facts(self, transaction_hashes: Iterable[bytes]) -> ChainFacts:
        """The outcomes of those the chain knows; Rejected(UNAVAILABLE) when it cannot be
        asked now."""
        ...


class ForkEvidence(Protocol):
    """Every signed version of forked sequence ids (xnode.core.forks), as this node keeps."""

    async def forks(self, originator: int, after_sequence_id: int, limit: int) -> list[Fork]:
        """Forks of `originator` above `after_sequence_id`, in order, at most `limit`."""
        ...

    async def digest(self, originator: int) -> ForkDigest:
        """The digest of every version of `originator`'s forks kept (core.forks)."""
        ...


class ChainPublisher(Protocol):
    """Sends commits and identity updates to their contract instead of originating them."""

    def handles(self, envelope: ValidPayerEnvelope) -> bool:
        """True for payloads that need the chain's total order."""
        ...

    async def publish(self, envelopes: Sequence[ValidPayerEnvelope]) -> list[bytes]:
        """Returns, in order, the serialized OriginatorEnvelopes the indexer built from the
        mined events. Raises Rejected(UNAVAILABLE) when the chain cannot take them now."""
        ...

    async def check_originated(self, envelopes: Sequence[ValidPayerEnvelope]) -> None:
        """XIP-49 3.3.4 rule 2.4 for payloads this node originates (the chain does not take
        them): raises Rejected(CHAIN_DEPENDS_ON_MISMATCH) for a stale chain dependency,
        Rejected(UNAVAILABLE) when the chain index cannot tell yet. Indexes name envelopes."""
        ...


class InboxResolver(Protocol):
    """Maps identifiers (e.g. Ethereum addresses) to inbox ids from indexed identity updates."""

    async def inbox_ids(self, identifiers: Sequence[tuple[str, int]]) -> list[str | None]:
        """One answer per (identifier, IdentifierKind); None when no inbox is associated."""
        ...


class InboxClaims(Protocol):
    """Which inboxes the indexed identity updates say hold an identifier, validated or not."""

    async def inbox_claims(self, identifiers: Sequence[tuple[str, int]]) -> list[list[str]]:
        """Per (identifier, IdentifierKind): the inbox ids whose latest action on it associates
        it, latest first; empty for an identifier that is malformed or claimed by none."""
        ...


class SmartContractWallets(Protocol):
    """ERC-1271 answers from the chain, for identity updates signed by contract wallets."""

    chain_id: int

    async def accepts(self, check: WalletCheck) -> bool:
        """Whether the account accepts the signature at the block; raises ConnectionError
        when the chain cannot be asked now."""
        ...


class DatabaseProbe(Protocol):
    error: str | None  # why the last probe failed

    async def reachable(self) -> bool:
        """True when a trivial query answers within a short timeout."""
        ...


class ChainStatus(Protocol):
    def unhealthy_reason(self) -> str | None:
        """Why chain publishes cannot be served now (the indexer stopped, or trailing the
        head by more than chain_max_lag_blocks), or None."""
        ...


class HealthBoard(Protocol):
    """Where serving status is published (the gRPC health service)."""

    def set_serving(self, service: str, serving: bool) -> None: ...


class LimitBuckets(Protocol):
    """The token buckets of the API limits, shared by the node's processes (XIP-49 3.2.5)."""

    async def take(self, charges: Sequence[Charge]) -> LimitExceeded | None:
        """Takes every charge, or none of them and returns the first refusal."""
        ...

    async def spend(self, charge: Charge) -> None:
        """Takes the charge even past empty: what was already served is owed."""
        ...


class SubscriptionSlots(Protocol):
    """Concurrent subscriptions per key, counted across the node's processes (XIP-49 3.2.5)."""

    async def hold(self, key: str, allowed: int) -> bool:
        """Takes one of `key`'s slots, or returns False when `allowed` are held already."""
        ...

    async def release(self, key: str) -> None:
        """Gives back a slot this process holds."""
        ...
