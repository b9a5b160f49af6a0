"""The chain indexer: GroupMessages and IdentityUpdates events become envelopes of originators
0 and 1, stored in chain order (XIP-49 2.2.3, 2.2.4).

It backfills in pages from the deployment block, then follows the head (LogStreamer),
indexing a block only once `confirmations` blocks are on top of it (soft finality). Every step
first checks that the last indexed block is still on the chain (BlockTracker); when it is
not, the indexer rewinds to the highest block still canonical, deleting everything the
dropped blocks added (IndexWriter), and indexes the new canonical blocks. Live subscribers are
told about a block only once it is indexed, so a re-org no deeper than `confirmations` never
reaches them; a deeper one corrects the store, but a subscriber may already have received a
dropped payload.

One process per database indexes (the leader lock); the others observe its progress. RPC
failures never stop it: it backs off and resumes from its last committed block.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from xnode.chain.blocks import BlockTracker
from xnode.chain.contracts import DeployedContracts
from xnode.chain.index_status import IndexerConfig, IndexStatus, Tip
from xnode.chain.index_writer import IndexWriter, contract_addresses
from xnode.chain.log_stream import LogStreamer
from xnode.chain.ports import ChainIndexStore, ChainVouchers, IndexerLock
from xnode.chain.rpc import ChainRpc
from xnode.core.backoff import Backoff
from xnode.core.clock import SYSTEM_CLOCK, Clock
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import StoredEnvelope

log = structlog.get_logger(__name__)

OnIndexed = Callable[[list[StoredEnvelope]], Awaitable[None]]
OnRewound = Callable[[dict[int, int]], Awaitable[None]]

# Waits before retrying after a failed step.
RETRY_FIRST_S = 0.2
RETRY_MOST_S = 10.0


class ChainIndexer:
    def __init__(
        self,
        rpc: ChainRpc,
        store: ChainIndexStore,
        contracts: DeployedContracts,
        key: SigningKey,
        config: IndexerConfig,
        on_indexed: OnIndexed,
        on_rewound: OnRewound,
        lock: IndexerLock,
        clock: Clock = SYSTEM_CLOCK,
        vouchers: ChainVouchers | None = None,
    ) -> None:
        self.status = IndexStatus(config, clock)
        self._rpc = rpc
        self._confirmations = config.confirmations
        self._reorg_window = config.reorg_window
        self._blocks = BlockTracker(rpc, store, contracts.deployment_block)
        self._logs = LogStreamer(rpc, contracts, config.page_blocks)
        self._writer = IndexWriter(
            store, contract_addresses(contracts), key, config.reorg_window, vouchers
        )
        self._on_indexed = on_indexed
        self._on_rewound = on_rewound
        self._lock = lock
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.status.tip = await self._writer.resume_tip()
        self._task = asyncio.create_task(self._run(), name="chain-indexer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._lock.release()

    async def _run(self) -> None:
        backoff = Backoff(RETRY_FIRST_S, RETRY_MOST_S)
        while True:
            try:
                more = await self._step() if await self._lock.held() else await self._observe()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the node keeps serving whatever the chain does
                self.status.failed(exc)
                await asyncio.sleep(backoff.next_delay())
                continue
            self.status.stepped()
            backoff.reset()
            if not more:
                await self.status.idle()

    async def _observe(self) -> bool:
        """Another process indexes: follow its progress so the publisher knows the state."""
        self.status.head = await self._rpc.block_number()
        self.status.tip = await self._writer.stored_tip() or self.status.tip
        return False

    async def _step(self) -> bool:
        """Indexes one page; True when more is ready right away."""
        status = self.status
        if status.tip is None:
            status.tip = await self._blocks.initial_tip()
        tip = status.tip
        status.head, canonical = await self._blocks.head_and_check(tip)
        if not canonical:
            await self._rewind(tip)
            return True
        safe = status.head - self._confirmations
        span = self._logs.next_range(tip, safe)
        if span is None:
            return False
        page = await self._logs.fetch(tip, *span)
        if page is not None:
            status.tip, stored = await self._writer.commit(page)
            if stored:
                await self._on_indexed(stored)
        return span[1] < safe

    async def _rewind(self, tip: Tip) -> None:
        fork = await self._blocks.fork_point(tip)
        if fork is None:
            log.error(
                "chain_reorg_deeper_than_window",
                tip=tip.number,
                window=self._reorg_window,
                action="re-indexing from the deployment block",
            )
            fork = await self._blocks.initial_tip()
        tops = await self._writer.rewind(tip, fork)
        self.status.tip = fork
        await self._on_rewound(tops)
