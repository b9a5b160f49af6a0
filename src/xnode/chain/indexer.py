"""The chain indexer: GroupMessages and IdentityUpdates events become envelopes of originators
0 and 1, stored in chain order (XIP-49 2.2.3, 2.2.4).

It backfills in pages from the deployment block, then follows the head, indexing a block
only once `confirmations` blocks are on top of it (soft finality). Re-orgs are found from
block hashes, not from the RPC's `removed` flag (anvil never sets it): every step first checks
that the last indexed block is still on the chain; when it is not, the indexer walks back
through the hashes it stored to the highest block still canonical, deletes everything the
dropped blocks added, and indexes the new canonical blocks. Live subscribers are told about a
block only once it is indexed, so a re-org no deeper than `confirmations` never reaches them;
a deeper one corrects the store, but a subscriber may already have received a dropped payload.

RPC failures never stop it: it backs off and resumes from its last committed block.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass

import structlog

from xnode.chain import abi
from xnode.chain.contracts import DeployedContracts
from xnode.chain.logs import build_payloads, log_skipped
from xnode.chain.ports import ChainIndexStore, IndexerLock
from xnode.chain.rpc import BlockHeader, ChainRpc, ChainRpcError, ChainUnavailable, Log
from xnode.chain.verify import ChainSetupError
from xnode.core.chain_index import IndexedRange
from xnode.core.chain_payloads import ChainPayload, SkippedEvent
from xnode.core.crypto import SigningKey
from xnode.core.envelopes import StoredEnvelope

log = structlog.get_logger(__name__)

OnIndexed = Callable[[list[StoredEnvelope]], Awaitable[None]]
OnRewound = Callable[[dict[int, int]], Awaitable[None]]

GROUP_MESSAGES = "group_messages"
IDENTITY_UPDATES = "identity_updates"
# While a publish waits for its event, the indexer polls this often.
FAST_POLL_S = 0.05
# Pages with more events than this are signed in a worker thread.
THREAD_BUILD_MIN = 64


@dataclass(frozen=True, slots=True)
class IndexerConfig:
    confirmations: int = 0
    poll_s: float = 0.5
    page_blocks: int = 2000
    max_lag_blocks: int = 2
    rpc_timeout_s: float = 10.0
    reorg_window: int = 1024  # block hashes kept; a deeper re-org re-indexes from the start


class Backoff:
    def __init__(self, first: float = 0.2, most: float = 10.0) -> None:
        self._first, self._most = first, most
        self.delay = first

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, self._most)
        return delay

    def reset(self) -> None:
        self.delay = self._first


@dataclass(frozen=True, slots=True)
class Tip:
    number: int
    hash: bytes


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
    ) -> None:
        self._rpc = rpc
        self._store = store
        self._contracts = contracts
        self._key = key
        self._config = config
        self._on_indexed = on_indexed
        self._on_rewound = on_rewound
        self._lock = lock
        self._addresses = {
            GROUP_MESSAGES: bytes.fromhex(contracts.group_messages[2:]),
            IDENTITY_UPDATES: bytes.fromhex(contracts.identity_updates[2:]),
        }
        self._contract_of = {a.hex(): name for name, a in self._addresses.items()}
        self._tip: Tip | None = None
        self._head: int | None = None
        self._last_ok: float | None = None
        self._failing_since: float | None = None
        self._page = config.page_blocks
        self._progress = asyncio.Event()
        self._waiting = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        await self._load_tip()
        self._task = asyncio.create_task(self._run(), name="chain-indexer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._lock.release()

    async def _load_tip(self) -> None:
        """Resume from the stored progress, refusing progress made for other contracts."""
        progress = await self._store.progress()
        for name, address in self._addresses.items():
            stored = progress.get(name)
            if stored is not None and stored.address != address:
                raise ChainSetupError(
                    f"this database indexed {name} at 0x{stored.address.hex()}, but the "
                    f"contracts file names 0x{address.hex()}; use a new database for "
                    "another deployment"
                )
        mine = [progress[n] for n in self._addresses if n in progress]
        if mine:
            lowest = min(mine, key=lambda p: p.block_number)
            self._tip = Tip(lowest.block_number, lowest.block_hash)

    # --- status, for the publisher -------------------------------------------------------

    @property
    def tip(self) -> int | None:
        return self._tip.number if self._tip else None

    def unavailable_reason(self) -> str | None:
        """Why chain publishes must wait (XIP-49 3.2.6), or None when the index is current."""
        if self._last_ok is None or self._head is None or self._tip is None:
            return "the chain indexer has not synced with the chain yet"
        age = time.monotonic() - self._last_ok
        if age > max(3 * self._config.poll_s, 2.0) + self._config.rpc_timeout_s:
            return f"the chain RPC has not answered for {age:.0f} s"
        behind = self._head - self._config.confirmations - self._tip.number
        if behind > self._config.max_lag_blocks:
            return f"the chain indexer is {behind} blocks behind the chain head"
        return None

    @contextlib.contextmanager
    def awaited(self) -> Iterator[None]:
        """While a publish waits for its event, poll every FAST_POLL_S instead of poll_s: the
        publish is answered right after the block that holds it, not up to a poll later."""
        self._waiting += 1
        self._wake.set()
        try:
            yield
        finally:
            self._waiting -= 1

    async def wait_available(self, most_s: float) -> str | None:
        """Waits up to `most_s` for the index to be current; returns why it is not, if not."""
        deadline = time.monotonic() + most_s
        while (reason := self.unavailable_reason()) is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                return reason
            await self.wait_progress(left)
        return None

    async def wait_progress(self, most_s: float) -> None:
        """Returns after the next indexing step (or poll), or after `most_s` seconds."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._progress.wait(), most_s)

    def _pulse(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    # --- the loop ------------------------------------------------------------------------

    async def _run(self) -> None:
        backoff = Backoff()
        while True:
            try:
                more = await self._step() if await self._lock.held() else await self._observe()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the node keeps serving whatever the chain does
                self._failed(exc)
                await asyncio.sleep(backoff.next())
                continue
            self._recovered()
            backoff.reset()
            self._pulse()
            if not more:
                await self._sleep()

    async def _sleep(self) -> None:
        poll = self._config.poll_s
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._wake.wait(), min(poll, FAST_POLL_S) if self._waiting else poll
            )

    def _failed(self, exc: Exception) -> None:
        if self._failing_since is not None:
            return  # logged when it started failing
        self._failing_since = time.monotonic()
        transient = isinstance(exc, ChainUnavailable | ChainRpcError | OSError)
        (log.warning if transient else log.error)(
            "chain_indexer_failing",
            error=repr(exc),
            tip=self.tip,
            exc_info=not transient,
        )

    def _recovered(self) -> None:
        self._last_ok = time.monotonic()
        if self._failing_since is not None:
            down = self._last_ok - self._failing_since
            self._failing_since = None
            log.info("chain_indexer_recovered", down_s=round(down, 2), tip=self.tip)

    async def _observe(self) -> bool:
        """Another process indexes: follow its progress so the publisher knows the state."""
        self._head = await self._rpc.block_number()
        progress = await self._store.progress()
        if progress:
            lowest = min(progress.values(), key=lambda p: p.block_number)
            self._tip = Tip(lowest.block_number, lowest.block_hash)
        return False

    async def _initial_tip(self) -> Tip:
        """The block before the deployment: indexing starts at the deployment block."""
        number = self._contracts.deployment_block - 1
        if number < 0:
            return Tip(-1, b"")
        header = await self._rpc.header(number)
        if header is None:
            raise ChainSetupError(f"the chain has no block {number} (before the deployment)")
        return Tip(number, header.hash)

    async def _step(self) -> bool:
        """Indexes one page; True when more is ready right away."""
        if self._tip is None:
            self._tip = await self._initial_tip()
        tip = self._tip
        head, tip_block = await self._rpc.batch(
            [("eth_blockNumber", ()), ("eth_getBlockByNumber", (hex(max(tip.number, 0)), False))]
        )
        self._head = abi.hex_int(head)
        if tip.number >= 0 and (not tip_block or abi.hex_bytes(tip_block["hash"]) != tip.hash):
            await self._rewind(tip)
            return True
        safe = self._head - self._config.confirmations
        if safe <= tip.number:
            return False
        first, last = tip.number + 1, min(safe, tip.number + self._page)
        return await self._index(tip, first, last) and last < safe

    async def _index(self, tip: Tip, first: int, last: int) -> bool:
        """Indexes blocks first..last. True when it did, or should be retried at once."""
        started = time.perf_counter()
        fetched = await self._fetch(tip, first, last)
        if fetched is None:
            return True
        logs, start, end = fetched
        fetched_at = time.perf_counter()
        payloads, skipped = await self._build(logs)
        built_at = time.perf_counter()
        blocks = {first: start.hash, last: end.hash}
        blocks.update({p.event.block_number: p.event.block_hash for p in payloads})
        stored = await self._store.commit_range(
            IndexedRange(
                payloads=payloads,
                skipped=skipped,
                blocks=blocks,
                tip=(last, end.hash),
                addresses=self._addresses,
                keep_blocks_from=last - self._config.reorg_window,
            )
        )
        self._tip = Tip(last, end.hash)
        log.debug(
            "chain_range_indexed",
            first=first,
            last=last,
            events=len(logs),
            fetch_s=round(fetched_at - started, 3),
            build_s=round(built_at - fetched_at, 3),
            store_s=round(time.perf_counter() - built_at, 3),
        )
        log_skipped(skipped)
        if stored:
            await self._on_indexed(stored)
        return True

    async def _fetch(
        self, tip: Tip, first: int, last: int
    ) -> tuple[list[Log], BlockHeader, BlockHeader] | None:
        """The range's logs and end headers; None when the range must be fetched again."""
        before = await self._rpc.header(last)
        try:
            logs = await self._rpc.logs(
                first, last, self._contracts_list(), list(abi.ORIGINATOR_OF_TOPIC)
            )
        except ChainRpcError:
            if self._page == 1:
                raise
            self._page = max(1, self._page // 2)  # e.g. "too many results": smaller pages
            return None
        start, end = await self._rpc.headers([first, last])
        if start is None or end is None or not self._consistent(tip, before, start, end, logs):
            return None  # the chain moved meanwhile; the next step looks again
        self._page = min(self._config.page_blocks, self._page * 2)
        return logs, start, end

    def _contracts_list(self) -> list[str]:
        return [self._contracts.group_messages, self._contracts.identity_updates]

    @staticmethod
    def _consistent(
        tip: Tip,
        before: BlockHeader | None,
        start: BlockHeader | None,
        end: BlockHeader | None,
        logs: Sequence[Log],
    ) -> bool:
        """The logs and both range ends come from one chain that extends the tip."""
        if before is None or start is None or end is None or before.hash != end.hash:
            return False
        if tip.number >= 0 and start.parent_hash != tip.hash:
            return False
        ends = {start.number: start.hash, end.number: end.hash}
        for entry in logs:
            number = abi.hex_int(entry["blockNumber"])
            if number in ends and abi.hex_bytes(entry["blockHash"]) != ends[number]:
                return False
        return True

    async def _build(self, logs: Sequence[Log]) -> tuple[list[ChainPayload], list[SkippedEvent]]:
        timestamps = await self._timestamps(logs)
        if len(logs) >= THREAD_BUILD_MIN:
            return await asyncio.to_thread(
                build_payloads, logs, timestamps, self._key, self._contract_of
            )
        return build_payloads(logs, timestamps, self._key, self._contract_of)

    async def _timestamps(self, logs: Sequence[Log]) -> dict[int, int]:
        """Block timestamps for logs whose RPC does not include `blockTimestamp`."""
        missing = sorted(
            {abi.hex_int(e["blockNumber"]) for e in logs if e.get("blockTimestamp") is None}
        )
        headers = await self._rpc.headers(missing) if missing else []
        return {h.number: h.timestamp for h in headers if h is not None}

    # --- re-orgs -------------------------------------------------------------------------

    async def _fork_point(self, tip: Tip) -> Tip | None:
        """The highest stored block still on the canonical chain."""
        up_to = tip.number
        while up_to >= 0:
            stored = await self._store.recent_blocks(up_to, 64)
            if not stored:
                return None
            headers = await self._rpc.headers([n for n, _ in stored])
            for (number, block_hash), header in zip(stored, headers, strict=True):
                if header is not None and header.hash == block_hash:
                    return Tip(number, block_hash)
            up_to = stored[-1][0] - 1
        return None

    async def _rewind(self, tip: Tip) -> None:
        fork = await self._fork_point(tip)
        if fork is None:
            log.error(
                "chain_reorg_deeper_than_window",
                tip=tip.number,
                window=self._config.reorg_window,
                action="re-indexing from the deployment block",
            )
            fork = await self._initial_tip()
        deleted, tops = await self._store.rewind(fork.number, fork.hash, self._addresses)
        self._tip = fork
        log.warning(
            "chain_reorg",
            old_tip=tip.number,
            fork_block=fork.number,
            rewound_blocks=tip.number - fork.number,
            envelopes_removed=deleted,
            sequence_ids=tops,
        )
        await self._on_rewound(tops)
