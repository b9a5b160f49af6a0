"""The NodeRegistry's history read from the chain: every NodeAdded and NodeStatusChanged event
with its block's time (xnode.core.registry_history replays them). `xnode chain
registry-snapshot` writes it for the council's jobs, which judge against it instead of
anything an export says."""

from __future__ import annotations

from eth_abi.abi import decode

from xnode.chain import abi
from xnode.chain.registry import MAX_LOG_BLOCKS
from xnode.chain.rpc import ChainRpc, Log
from xnode.core.chain_logs import hex_bytes, hex_int
from xnode.core.registry_history import RegistryEvent, RegistryHistory, replay


def _event(log: Log, block_time_s: int) -> RegistryEvent | None:
    topics = [hex_bytes(t) for t in log["topics"]]
    node_id = int.from_bytes(topics[1], "big")
    data = hex_bytes(log["data"])
    if topics[0] == abi.NODE_ADDED:
        key, _address = decode(["bytes", "string"], data)
        return RegistryEvent(block_time_s, node_id, public_key=bytes(key))
    if topics[0] == abi.NODE_STATUS_CHANGED:
        (enabled,) = decode(["bool"], data)
        return RegistryEvent(block_time_s, node_id, enabled=bool(enabled))
    return None


async def read_registry_history(rpc: ChainRpc, address: str, from_block: int) -> RegistryHistory:
    """Every registry event from `from_block` (the deployment) to the head, in chain order."""
    head = await rpc.block_number()
    logs: list[Log] = []
    for first in range(from_block, head + 1, MAX_LOG_BLOCKS):
        last = min(head, first + MAX_LOG_BLOCKS - 1)
        logs += await rpc.logs(first, last, [address], [abi.NODE_ADDED, abi.NODE_STATUS_CHANGED])
    logs.sort(key=lambda log: (hex_int(log["blockNumber"]), hex_int(log["logIndex"])))
    numbers = sorted({hex_int(log["blockNumber"]) for log in logs} | {head})
    headers = await rpc.headers(numbers)
    times = {n: h.timestamp for n, h in zip(numbers, headers, strict=True) if h is not None}
    events = [
        event
        for log in logs
        if (event := _event(log, times[hex_int(log["blockNumber"])])) is not None
    ]
    return RegistryHistory(replay(events), await rpc.chain_id(), address, head, times.get(head, 0))
