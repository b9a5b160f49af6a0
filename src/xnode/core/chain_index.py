"""What the chain indexer keeps between steps (XIP-49 2.2.3, 2.2.4): how far it indexed each
contract, and what one indexed block range writes. Records only, shared by the chain side
(chain.ports) and the store that implements its ports."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xnode.core.chain_payloads import ChainPayload, SkippedEvent


@dataclass(frozen=True, slots=True)
class ChainProgress:
    """The last indexed block of one contract, and the contract's address."""

    address: bytes
    block_number: int
    block_hash: bytes


@dataclass(frozen=True, slots=True)
class IndexedRange:
    """What one indexed block range writes, in one transaction."""

    payloads: Sequence[ChainPayload]
    skipped: Sequence[SkippedEvent]
    blocks: Mapping[int, bytes]  # block hashes kept to find re-orgs
    tip: tuple[int, bytes]  # the range's last block: the new progress
    addresses: Mapping[str, bytes]  # contract name -> address
    keep_blocks_from: int  # block hashes below this are dropped
