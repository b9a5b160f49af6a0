"""Start-up checks: the RPC serves the contracts file's chain, and each address holds the
contract it is named for. A mistake here would otherwise show up as an empty registry or an
indexer that never finds an event."""

from __future__ import annotations

from eth_abi.exceptions import DecodingError

from xnode.chain import abi
from xnode.chain.contracts import DeployedContracts
from xnode.chain.rpc import ChainRpc, ChainRpcError, ChainUnavailable, revert_data


class ChainSetupError(RuntimeError):
    """The chain settings do not match the chain."""


async def _is_registry(rpc: ChainRpc, address: str) -> bool:
    try:
        return abi.decode_uint(await rpc.eth_call(address, abi.NODE_INCREMENT)) == 100
    except (ChainRpcError, DecodingError, ValueError):
        return False


async def _refuses_empty_payload(rpc: ChainRpc, address: str, probe: bytes) -> bool:
    """An empty payload must be refused with InvalidPayloadSize (or EnforcedPause while the
    contract is paused): only the named contract has that function."""
    try:
        await rpc.eth_call(address, probe)
    except ChainRpcError as exc:
        return revert_data(exc)[:4] in (abi.INVALID_PAYLOAD_SIZE, abi.ENFORCED_PAUSE)
    return False


async def _check_contract(rpc: ChainRpc, chain_id: int, name: str, address: str) -> None:
    if not await rpc.code(address):
        raise ChainSetupError(
            f"{name} address {address} has no contract code on chain {chain_id}; "
            "is the contracts file from this chain's deployment?"
        )
    if name == "node_registry":
        ok = await _is_registry(rpc, address)
    elif name == "group_messages":
        ok = await _refuses_empty_payload(rpc, address, abi.add_message_data(bytes(16), b""))
    else:
        ok = await _refuses_empty_payload(
            rpc, address, abi.add_identity_update_data(bytes(32), b"")
        )
    if not ok:
        raise ChainSetupError(f"{name} address {address} holds a contract, but not a {name}")


async def _check_chain_id(rpc: ChainRpc, expected: int, what: str) -> int:
    chain_id = await rpc.chain_id()
    if chain_id != expected:
        raise ChainSetupError(
            f"the {what} RPC {rpc.url} serves chain id {chain_id}, but the contracts file "
            f"is for chain id {expected}"
        )
    return chain_id


async def verify_deployment(
    rpc: ChainRpc, contracts: DeployedContracts, registry: bool = True
) -> None:
    """`registry` False: the NodeRegistry is read from another chain (verify_registry)."""
    try:
        chain_id = await _check_chain_id(rpc, contracts.chain_id, "chain")
        if registry:
            await _check_contract(rpc, chain_id, "node_registry", contracts.node_registry)
        await _check_contract(rpc, chain_id, "group_messages", contracts.group_messages)
        await _check_contract(rpc, chain_id, "identity_updates", contracts.identity_updates)
    except ChainUnavailable as exc:
        raise ChainSetupError(f"cannot reach the chain RPC {rpc.url}: {exc}") from exc


async def verify_registry(rpc: ChainRpc, chain_id: int, address: str) -> None:
    """The registry chain, when it is apart from the app chain (XIP: L1 and L3)."""
    try:
        await _check_chain_id(rpc, chain_id, "registry chain")
        await _check_contract(rpc, chain_id, "node_registry", address)
    except ChainUnavailable as exc:
        raise ChainSetupError(f"cannot reach the registry chain RPC {rpc.url}: {exc}") from exc
