"""The node registry read from the NodeRegistry contract (XIP-49 2.2.1, 3.1.1).

All nodes are loaded at start-up with `allNodes()`. Afterwards NodeAdded and NodeStatusChanged
events trigger a reload, and a full reload every `refresh_s` is the safety net for anything
missed (an RPC outage, a re-org that undid an event)."""

from __future__ import annotations

import asyncio
import time

import structlog

from xnode.chain import abi
from xnode.chain.rpc import ChainRpc, ChainRpcError, ChainUnavailable
from xnode.core.registry import NodeEntry, Registry
from xnode.usecases.registry_source import WatchedRegistry

log = structlog.get_logger(__name__)

MAX_LOG_BLOCKS = 5000


async def load_registry(rpc: ChainRpc, address: str) -> Registry:
    data = await rpc.eth_call(address, abi.ALL_NODES)
    try:
        return Registry(abi.decode_all_nodes(data))
    except ValueError:
        # One bad entry must not hide the others: keep the entries that are valid.
        entries = []
        for raw in abi.decode_all_nodes_raw(data):
            try:
                entries.append(NodeEntry(*raw))
            except ValueError as exc:
                log.warning("registry_entry_invalid", node_id=raw[0], error=str(exc))
        return Registry(entries)


class ChainRegistrySource(WatchedRegistry):
    task_name = "chain-registry"

    def __init__(
        self,
        rpc: ChainRpc,
        address: str,
        registry: Registry,
        block: int,
        poll_s: float = 2.0,
        refresh_s: float = 60.0,
    ) -> None:
        self._rpc = rpc
        self._address = address
        super().__init__(registry)
        self._block = block
        self._poll_s = poll_s
        self._refresh_s = refresh_s
        self._refreshed = time.monotonic()
        self._failing = False

    @classmethod
    async def open(
        cls, rpc: ChainRpc, address: str, poll_s: float = 2.0, refresh_s: float = 60.0
    ) -> ChainRegistrySource:
        block = await rpc.block_number()
        return cls(rpc, address, await load_registry(rpc, address), block, poll_s, refresh_s)

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                await self._poll()
            except (ChainUnavailable, ChainRpcError, ValueError) as exc:
                if not self._failing:
                    log.warning("registry_poll_failing", error=str(exc))
                self._failing = True
                continue
            if self._failing:
                log.info("registry_poll_recovered")
                self._failing = False

    async def _poll(self) -> None:
        head = await self._rpc.block_number()
        # The chain went back, or too far ahead for one eth_getLogs: re-read everything.
        changed = head < self._block or head - self._block > MAX_LOG_BLOCKS
        if not changed and head > self._block:
            events = await self._rpc.logs(
                self._block + 1, head, [self._address], [abi.NODE_ADDED, abi.NODE_STATUS_CHANGED]
            )
            changed = bool(events)
        if changed or time.monotonic() - self._refreshed >= self._refresh_s:
            await self.refresh()
        self._block = head

    async def refresh(self) -> None:
        registry = await load_registry(self._rpc, self._address)
        self._refreshed = time.monotonic()
        if registry.nodes == self._registry.nodes:
            return
        log.info("registry_changed", source="chain", nodes=len(registry.nodes))
        self._replace(registry)
