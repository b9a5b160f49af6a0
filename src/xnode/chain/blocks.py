"""Re-org detection from block hashes, not from the RPC's `removed` flag (anvil never sets
it): each step first checks that the tip is still on the chain; when it is not, the stored
hashes are walked back to the highest block still canonical, the fork point."""

from __future__ import annotations

from xnode.chain import abi
from xnode.chain.index_status import Tip
from xnode.chain.ports import ChainIndexStore
from xnode.chain.rpc import ChainRpc
from xnode.chain.verify import ChainSetupError

# Stored hashes compared with the chain per RPC batch while looking for the fork point.
FORK_SEARCH_BATCH = 64


class BlockTracker:
    def __init__(self, rpc: ChainRpc, store: ChainIndexStore, deployment_block: int) -> None:
        self._rpc = rpc
        self._store = store
        self._deployment_block = deployment_block

    async def initial_tip(self) -> Tip:
        """The block before the deployment: indexing starts at the deployment block."""
        number = self._deployment_block - 1
        if number < 0:
            return Tip(-1, b"")
        header = await self._rpc.header(number)
        if header is None:
            raise ChainSetupError(f"the chain has no block {number} (before the deployment)")
        return Tip(number, header.hash)

    async def head_and_check(self, tip: Tip) -> tuple[int, bool]:
        """The chain head, and whether `tip` is still on the chain (one RPC round trip)."""
        head, tip_block = await self._rpc.batch(
            [("eth_blockNumber", ()), ("eth_getBlockByNumber", (hex(max(tip.number, 0)), False))]
        )
        canonical = tip.number < 0 or bool(
            tip_block and abi.hex_bytes(tip_block["hash"]) == tip.hash
        )
        return abi.hex_int(head), canonical

    async def fork_point(self, tip: Tip) -> Tip | None:
        """The highest stored block still on the canonical chain; None past the stored
        window."""
        up_to = tip.number
        while up_to >= 0:
            stored = await self._store.recent_blocks(up_to, FORK_SEARCH_BATCH)
            if not stored:
                return None
            headers = await self._rpc.headers([n for n, _ in stored])
            for (number, block_hash), header in zip(stored, headers, strict=True):
                if header is not None and header.hash == block_hash:
                    return Tip(number, block_hash)
            up_to = stored[-1][0] - 1
        return None
