"""Contract logs in block ranges past the tip: paged backfill from the deployment block, then
following the head. A range is used only when its logs and both its end blocks come from one
chain that extends the tip; otherwise the next step looks again."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from xnode.chain import abi
from xnode.chain.contracts import DeployedContracts
from xnode.chain.index_status import Tip
from xnode.chain.rpc import BlockHeader, ChainRpc, ChainRpcError, Log


@dataclass(frozen=True, slots=True)
class Page:
    """The logs of blocks first..last and what building and storing them needs."""

    first: int
    last: int
    start: BlockHeader
    end: BlockHeader
    logs: list[Log]
    timestamps: dict[int, int]  # for logs whose RPC does not include `blockTimestamp`
    fetch_s: float


def consistent(
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


class LogStreamer:
    def __init__(self, rpc: ChainRpc, contracts: DeployedContracts, page_blocks: int) -> None:
        self._rpc = rpc
        self._contracts = [contracts.group_messages, contracts.identity_updates]
        self._most = page_blocks
        self._page = page_blocks  # halved when the RPC refuses a range, regrown after

    def next_range(self, tip: Tip, safe: int) -> tuple[int, int] | None:
        """The blocks to index next, up to the highest `safe` (confirmed) one."""
        if safe <= tip.number:
            return None
        return tip.number + 1, min(safe, tip.number + self._page)

    async def fetch(self, tip: Tip, first: int, last: int) -> Page | None:
        """The range's logs and end headers; None when the range must be fetched again."""
        started = time.perf_counter()
        before = await self._rpc.header(last)
        try:
            logs = await self._rpc.logs(first, last, self._contracts, list(abi.ORIGINATOR_OF_TOPIC))
        except ChainRpcError:
            if self._page == 1:
                raise
            self._page = max(1, self._page // 2)  # e.g. "too many results": smaller pages
            return None
        start, end = await self._rpc.headers([first, last])
        if start is None or end is None or not consistent(tip, before, start, end, logs):
            return None  # the chain moved meanwhile; the next step looks again
        self._page = min(self._most, self._page * 2)
        timestamps = await self._timestamps(logs)
        return Page(first, last, start, end, logs, timestamps, time.perf_counter() - started)

    async def _timestamps(self, logs: Sequence[Log]) -> dict[int, int]:
        missing = sorted(
            {abi.hex_int(e["blockNumber"]) for e in logs if e.get("blockTimestamp") is None}
        )
        headers = await self._rpc.headers(missing) if missing else []
        return {h.number: h.timestamp for h in headers if h is not None}
