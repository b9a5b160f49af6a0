"""Writes what the indexer found: a page's chain payloads (envelopes of originators 0 and 1,
signed by this node, or on a read-only node by a registered one: `vouchers`), skipped
events, block hashes and the new progress in one transaction; and, after a re-org, forgets
what the dropped blocks added."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import structlog

from xnode.chain.contracts import DeployedContracts
from xnode.chain.index_status import Tip
from xnode.chain.log_stream import Page
from xnode.chain.logs import build_payloads, log_skipped
from xnode.chain.ports import ChainIndexStore, ChainVouchers
from xnode.chain.rpc import Log
from xnode.chain.verify import ChainSetupError
from xnode.core.chain_index import ChainProgress, IndexedRange
from xnode.core.chain_payloads import ChainPayload, SkippedEvent
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import StoredEnvelope

log = structlog.get_logger(__name__)

GROUP_MESSAGES = "group_messages"
IDENTITY_UPDATES = "identity_updates"
# Pages with more events than this are signed in a worker thread.
THREAD_BUILD_MIN = 64


def contract_addresses(contracts: DeployedContracts) -> dict[str, bytes]:
    """The indexed contracts by the names their progress is stored under."""
    return {
        GROUP_MESSAGES: bytes.fromhex(contracts.group_messages[2:]),
        IDENTITY_UPDATES: bytes.fromhex(contracts.identity_updates[2:]),
    }


def _lowest(progress: Sequence[ChainProgress]) -> Tip | None:
    if not progress:
        return None
    lowest = min(progress, key=lambda p: p.block_number)
    return Tip(lowest.block_number, lowest.block_hash)


class IndexWriter:
    def __init__(
        self,
        store: ChainIndexStore,
        addresses: dict[str, bytes],
        key: SigningKey,
        reorg_window: int,
        vouchers: ChainVouchers | None = None,
    ) -> None:
        self._store = store
        self._vouchers = vouchers
        self._addresses = addresses
        self._contract_of = {a.hex(): name for name, a in addresses.items()}
        self._key = key
        self._reorg_window = reorg_window

    async def resume_tip(self) -> Tip | None:
        """The stored progress, refusing progress made for other contracts."""
        progress = await self._store.progress()
        for name, address in self._addresses.items():
            stored = progress.get(name)
            if stored is not None and stored.address != address:
                raise ChainSetupError(
                    f"this database indexed {name} at 0x{stored.address.hex()}, but the "
                    f"contracts file names 0x{address.hex()}; use a new database for "
                    "another deployment"
                )
        return _lowest([progress[n] for n in self._addresses if n in progress])

    async def stored_tip(self) -> Tip | None:
        """How far the indexing process got (when another process indexes)."""
        return _lowest(list((await self._store.progress()).values()))

    async def commit(self, page: Page) -> tuple[Tip, list[StoredEnvelope]]:
        """Stores the page; returns the new tip and the envelopes that were new."""
        started = time.perf_counter()
        payloads, skipped = await self._build(page.logs, page.timestamps)
        if self._vouchers is not None and payloads:
            payloads = await self._vouchers.vouched(payloads)
        built_at = time.perf_counter()
        blocks = {page.first: page.start.hash, page.last: page.end.hash}
        blocks.update({p.event.block_number: p.event.block_hash for p in payloads})
        stored = await self._store.commit_range(
            IndexedRange(
                payloads=payloads,
                skipped=skipped,
                blocks=blocks,
                tip=(page.last, page.end.hash),
                addresses=self._addresses,
                keep_blocks_from=page.last - self._reorg_window,
            )
        )
        log.debug(
            "chain_range_indexed",
            first=page.first,
            last=page.last,
            events=len(page.logs),
            fetch_s=round(page.fetch_s, 3),
            build_s=round(built_at - started, 3),
            store_s=round(time.perf_counter() - built_at, 3),
        )
        log_skipped(skipped)
        return Tip(page.last, page.end.hash), stored

    async def _build(
        self, logs: Sequence[Log], timestamps: dict[int, int]
    ) -> tuple[list[ChainPayload], list[SkippedEvent]]:
        if len(logs) >= THREAD_BUILD_MIN:
            return await asyncio.to_thread(
                build_payloads, logs, timestamps, self._key, self._contract_of
            )
        return build_payloads(logs, timestamps, self._key, self._contract_of)

    async def rewind(self, tip: Tip, fork: Tip) -> dict[int, int]:
        """Forgets the blocks above `fork`; returns the chain originators' new highest
        sequence ids."""
        deleted, tops = await self._store.rewind(fork.number, fork.hash, self._addresses)
        log.warning(
            "chain_reorg",
            old_tip=tip.number,
            fork_block=fork.number,
            rewound_blocks=tip.number - fork.number,
            envelopes_removed=deleted,
            sequence_ids=tops,
        )
        return tops
